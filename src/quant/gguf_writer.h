// GGUF v3 writer (the reader is model/gguf.h): metadata key-values, the tensor table, then the data section, each
// tensor at a multiple of the alignment. The table is complete before the first byte is written (offsets follow
// from the tensor types and shapes), so data is streamed one tensor at a time, in the order the tensors were added.
//
// File layout: "GGUF", u32 version 3, u64 n_tensors, u64 n_kv; each kv: string key, u32 value type, value; each
// tensor: string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset (relative to the data section);
// padding to the alignment; the data. Strings are u64 length + bytes; arrays u32 element type, u64 count, elements.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/gguf.h"
#include "quant/output.h"

namespace mopt::quant {

// Metadata values of the common types (model/gguf.h's Value, as the reader returns them).
gguf::Value gguf_string(std::string s);
gguf::Value gguf_u32(uint32_t v);
gguf::Value gguf_i32(int32_t v);
gguf::Value gguf_f32(float v);
gguf::Value gguf_bool(bool v);
gguf::Value gguf_string_array(const std::vector<std::string>& v);
gguf::Value gguf_f32_array(const std::vector<float>& v);
gguf::Value gguf_i32_array(const std::vector<int32_t>& v);

class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

  // Sets `key` (an existing key keeps its place in the file) / removes it.
  void set(const std::string& key, gguf::Value v);
  void erase(const std::string& key);
  const gguf::Value* find(const std::string& key) const;

  // A tensor of the data section: shape in ne order (ne[0] contiguous); `t` must have a GGUF type id.
  void add_tensor(const std::string& name, DType t, int n_dims, const std::array<int64_t, 4>& ne);
  size_t n_tensors() const { return tensors_.size(); }
  uint64_t tensor_bytes(size_t i) const { return tensors_[i].nbytes; }
  // The size of the whole file.
  uint64_t file_bytes() const;

  // The header (metadata and tensor table) and the padding before the data section.
  Status write_header(OutputFile& f);
  // Tensor i's bytes (exactly tensor_bytes(i)), tensors in the order added, each after the previous one's padding.
  Status write_tensor(OutputFile& f, size_t i, const void* data, uint64_t n);

 private:
  struct Tensor {
    std::string name;
    DType type;
    int n_dims;
    std::array<int64_t, 4> ne;
    uint64_t nbytes, offset;
  };
  uint64_t header_bytes() const;
  uint64_t alignment_;
  std::vector<std::pair<std::string, gguf::Value>> kv_;
  std::vector<Tensor> tensors_;
  uint64_t data_bytes_ = 0;  // data section so far (padded)
  size_t next_ = 0;          // the tensor write_tensor expects next
  uint64_t data_start_ = 0;  // file offset of the data section, set by write_header
};

}  // namespace mopt::quant
