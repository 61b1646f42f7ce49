// GGUF v2/v3 reader: metadata (every value type, nested arrays) and the tensor table, over a memory map.
// Every count, length, offset and dimension is range- and overflow-checked; a bad file gives a Status
// naming the problem (never a crash). Tensor data are zero-copy views into the mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mmap.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mopt::gguf {

enum class ValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* value_type_name(ValueType t);

// A metadata value. Scalars are widened (ints to int64/uint64, floats to double); arrays hold elements.
struct Value {
  ValueType type = ValueType::kUint8;
  ValueType elem_type = ValueType::kUint8;  // for arrays
  uint64_t u = 0;      // unsigned ints, bool
  int64_t i = 0;       // signed ints
  double f = 0.0;      // floats
  std::string s;       // strings
  std::vector<Value> arr;

  bool is_int() const;     // any integer type (not bool)
  bool is_float() const;   // float32/float64
  int64_t as_int() const;  // for is_int() values
  std::string to_string(size_t max_array_elems = 8) const;  // for `mopt inspect`
};

struct TensorInfo {
  TensorView view;        // name, dtype, dims, data pointer into the mapping, nbytes
  uint32_t ggml_type = 0; // raw GGUF type id
  uint64_t offset = 0;    // relative to the start of the data section
};

class File {
 public:
  // Opens and validates the whole header and tensor table. Errors name the file and the problem.
  static Result<std::unique_ptr<File>> open(const std::string& path);
  // Parses a GGUF image already in memory (fuzzing, tests). `data` must outlive the File and the views;
  // `name` stands in for the path in error messages.
  static Result<std::unique_ptr<File>> open_memory(const void* data, size_t size, const std::string& name);

  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  uint64_t alignment() const { return alignment_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;   // any integer type
  std::optional<double> get_float(std::string_view key) const;  // float or integer types
  std::optional<bool> get_bool(std::string_view key) const;
  // Typed arrays; an error if the key exists with another type. Missing key -> empty vector + ok.
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<float>> get_float_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

  // Hands the memory map to a new owner (e.g. Model::mappings), so tensor views outlive this File.
  // The File stays usable while the new owner keeps the mapping alive. Null for open_memory() files.
  std::unique_ptr<MappedFile> take_mapping() { return std::move(map_); }

 private:
  File() = default;
  friend class Parser;
  std::unique_ptr<MappedFile> map_;  // null for open_memory()
  const uint8_t* data_ = nullptr;    // [size_] the whole file image
  size_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorInfo> tensors_;
};

// Maps a GGUF ggml_type id to our DType (nullopt for types we do not support).
std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type);

}  // namespace mopt::gguf
