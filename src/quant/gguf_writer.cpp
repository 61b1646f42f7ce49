// GGUF v3 writer (layout in gguf_writer.h).
#include "quant/gguf_writer.h"

#include <cstring>

#include "core/strfmt.h"

namespace mopt::quant {

namespace {

using gguf::Value;
using gguf::ValueType;

// Little-endian byte sink (x86 and every GGUF producer are little-endian).
struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

void put_scalar(Bytes& out, ValueType t, const Value& v) {
  switch (t) {
    case ValueType::kUint8: out.put<uint8_t>(static_cast<uint8_t>(v.u)); return;
    case ValueType::kInt8: out.put<int8_t>(static_cast<int8_t>(v.i)); return;
    case ValueType::kUint16: out.put<uint16_t>(static_cast<uint16_t>(v.u)); return;
    case ValueType::kInt16: out.put<int16_t>(static_cast<int16_t>(v.i)); return;
    case ValueType::kUint32: out.put<uint32_t>(static_cast<uint32_t>(v.u)); return;
    case ValueType::kInt32: out.put<int32_t>(static_cast<int32_t>(v.i)); return;
    case ValueType::kFloat32: out.put<float>(static_cast<float>(v.f)); return;
    case ValueType::kBool: out.put<uint8_t>(v.u ? 1 : 0); return;
    case ValueType::kString: out.str(v.s); return;
    case ValueType::kUint64: out.put<uint64_t>(v.u); return;
    case ValueType::kInt64: out.put<int64_t>(v.i); return;
    case ValueType::kFloat64: out.put<double>(v.f); return;
    case ValueType::kArray:
      out.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
      out.put<uint64_t>(v.arr.size());
      for (const Value& e : v.arr) put_scalar(out, v.elem_type, e);
      return;
  }
  MOPT_CHECK(false, "gguf writer: value type %u", static_cast<unsigned>(t));
}

// The field of a Value that holds a C++ value of each type.
void store(Value& v, std::string s) { v.s = std::move(s); }
void store(Value& v, uint32_t x) { v.u = x; }
void store(Value& v, int32_t x) { v.i = x; }
void store(Value& v, float x) { v.f = x; }
void store(Value& v, bool x) { v.u = x ? 1 : 0; }

template <class T>
Value value_of(ValueType t, T x) {
  Value v;
  v.type = t;
  store(v, std::move(x));
  return v;
}

template <class T>
Value array_of(ValueType elem, const std::vector<T>& items) {
  Value v;
  v.type = ValueType::kArray;
  v.elem_type = elem;
  v.arr.reserve(items.size());
  for (const T& x : items) v.arr.push_back(value_of(elem, x));
  return v;
}

}  // namespace

Value gguf_string(std::string s) { return value_of(ValueType::kString, std::move(s)); }
Value gguf_u32(uint32_t x) { return value_of(ValueType::kUint32, x); }
Value gguf_i32(int32_t x) { return value_of(ValueType::kInt32, x); }
Value gguf_f32(float x) { return value_of(ValueType::kFloat32, x); }
Value gguf_bool(bool x) { return value_of(ValueType::kBool, x); }
Value gguf_string_array(const std::vector<std::string>& items) { return array_of(ValueType::kString, items); }
Value gguf_f32_array(const std::vector<float>& items) { return array_of(ValueType::kFloat32, items); }
Value gguf_i32_array(const std::vector<int32_t>& items) { return array_of(ValueType::kInt32, items); }

void GgufWriter::set(const std::string& key, Value v) {
  for (auto& [k, old] : kv_)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::erase(const std::string& key) {
  for (auto it = kv_.begin(); it != kv_.end(); ++it)
    if (it->first == key) {
      kv_.erase(it);
      return;
    }
}

const Value* GgufWriter::find(const std::string& key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

void GgufWriter::add_tensor(const std::string& name, DType t, int n_dims, const std::array<int64_t, 4>& ne) {
  MOPT_CHECK(dtype_traits(t).ggml_type >= 0, "gguf writer: %s has no GGUF type", dtype_name(t));
  MOPT_CHECK(next_ == 0, "gguf writer: tensors are added before the data is written");
  const std::optional<uint64_t> rb = row_bytes(t, static_cast<uint64_t>(ne[0]));
  MOPT_CHECK(rb, "gguf writer: %s row of %lld elements", dtype_name(t), static_cast<long long>(ne[0]));
  const uint64_t nbytes = *rb * static_cast<uint64_t>(ne[1] * ne[2] * ne[3]);
  tensors_.push_back({name, t, n_dims, ne, nbytes, data_bytes_});
  data_bytes_ += (nbytes + alignment_ - 1) / alignment_ * alignment_;
}

uint64_t GgufWriter::header_bytes() const {
  Bytes h;
  // Only sizes matter here; write_header builds the same bytes.
  uint64_t n = 4 + 4 + 8 + 8;
  for (const auto& [k, v] : kv_) {
    h.b.clear();
    h.str(k);
    h.put<uint32_t>(static_cast<uint32_t>(v.type));
    put_scalar(h, v.type, v);
    n += h.b.size();
  }
  for (const Tensor& t : tensors_) n += 8 + t.name.size() + 4 + 8 * static_cast<uint64_t>(t.n_dims) + 4 + 8;
  return (n + alignment_ - 1) / alignment_ * alignment_;
}

uint64_t GgufWriter::file_bytes() const { return header_bytes() + data_bytes_; }

Status GgufWriter::write_header(OutputFile& f) {
  Bytes h;
  h.b = {'G', 'G', 'U', 'F'};
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors_.size());
  h.put<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) {
    h.str(k);
    h.put<uint32_t>(static_cast<uint32_t>(v.type));
    put_scalar(h, v.type, v);
  }
  for (const Tensor& t : tensors_) {
    h.str(t.name);
    h.put<uint32_t>(static_cast<uint32_t>(t.n_dims));
    for (int d = 0; d < t.n_dims; ++d) h.put<uint64_t>(static_cast<uint64_t>(t.ne[static_cast<size_t>(d)]));
    h.put<uint32_t>(static_cast<uint32_t>(dtype_traits(t.type).ggml_type));
    h.put<uint64_t>(t.offset);
  }
  MOPT_TRY(f.write(h.b.data(), h.b.size()));
  MOPT_TRY(f.pad_to(alignment_));
  data_start_ = f.offset();
  return Status::ok();
}

Status GgufWriter::write_tensor(OutputFile& f, size_t i, const void* data, uint64_t n) {
  MOPT_CHECK(i == next_ && i < tensors_.size(), "gguf writer: tensor %zu written out of order (expected %zu)", i,
             next_);
  const Tensor& t = tensors_[i];
  MOPT_CHECK(n == t.nbytes, "gguf writer: tensor %s has %llu bytes, expected %llu", t.name.c_str(),
             static_cast<unsigned long long>(n), static_cast<unsigned long long>(t.nbytes));
  MOPT_CHECK(f.offset() == data_start_ + t.offset, "gguf writer: tensor %s at the wrong offset", t.name.c_str());
  MOPT_TRY(f.write(data, n));
  MOPT_TRY(f.pad_to(alignment_));
  ++next_;
  return Status::ok();
}

}  // namespace mopt::quant
