// safetensors writer (the reader is model/safetensors.h): u64 header length (little-endian), the JSON header
// {"<name>": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, ..., "__metadata__": {...}}
// padded with spaces to a multiple of 8, then the data section, tensors in the order added (offsets relative to
// it). The header is complete before any data is written, so tensors are streamed one at a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "quant/output.h"

namespace mopt::quant {

class SafetensorsWriter {
 public:
  // A tensor of dtype `t` (a dtype row with a safetensors name) and PyTorch shape (outermost first).
  void add_tensor(const std::string& name, DType t, const std::vector<int64_t>& torch_shape);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  size_t n_tensors() const { return tensors_.size(); }
  const std::string& tensor_name(size_t i) const { return tensors_[i].name; }
  uint64_t tensor_bytes(size_t i) const { return tensors_[i].nbytes; }
  uint64_t file_bytes() const { return 8 + header().size() + data_bytes_; }

  Status write_header(OutputFile& f) const;
  // Tensor i's bytes (exactly tensor_bytes(i)), in the order added.
  Status write_tensor(OutputFile& f, size_t i, const void* data, uint64_t n);

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    uint64_t nbytes, offset;
  };
  std::string header() const;  // the padded JSON
  std::vector<Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_bytes_ = 0;
  size_t next_ = 0;
};

}  // namespace mopt::quant
