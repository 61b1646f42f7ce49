// safetensors writer (layout in safetensors_writer.h).
#include "quant/safetensors_writer.h"

#include <nlohmann/json.hpp>

namespace mopt::quant {

void SafetensorsWriter::add_tensor(const std::string& name, DType t, const std::vector<int64_t>& shape) {
  MOPT_CHECK(dtype_traits(t).safetensors_name, "safetensors writer: %s has no safetensors name", dtype_name(t));
  MOPT_CHECK(next_ == 0, "safetensors writer: tensors are added before the data is written");
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  const uint64_t nbytes = n * static_cast<uint64_t>(dtype_traits(t).block_bytes);
  tensors_.push_back({name, t, shape, nbytes, data_bytes_});
  data_bytes_ += nbytes;
}

std::string SafetensorsWriter::header() const {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata_.empty()) h["__metadata__"] = metadata_;
  for (const Tensor& t : tensors_)
    h[t.name] = {{"dtype", dtype_traits(t.type).safetensors_name},
                 {"shape", t.shape},
                 {"data_offsets", {t.offset, t.offset + t.nbytes}}};
  std::string s = h.dump();
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

Status SafetensorsWriter::write_header(OutputFile& f) const {
  const std::string h = header();
  const uint64_t n = h.size();
  MOPT_TRY(f.write(&n, 8));
  return f.write(h.data(), h.size());
}

Status SafetensorsWriter::write_tensor(OutputFile& f, size_t i, const void* data, uint64_t n) {
  MOPT_CHECK(i == next_ && i < tensors_.size(), "safetensors writer: tensor %zu written out of order (expected %zu)",
             i, next_);
  MOPT_CHECK(n == tensors_[i].nbytes, "safetensors writer: tensor %s has %llu bytes, expected %llu",
             tensors_[i].name.c_str(), static_cast<unsigned long long>(n),
             static_cast<unsigned long long>(tensors_[i].nbytes));
  MOPT_TRY(f.write(data, n));
  ++next_;
  return Status::ok();
}

}  // namespace mopt::quant
