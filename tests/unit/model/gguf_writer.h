// A small GGUF writer for tests: synthesizes valid files (metadata of every type, tensors with alignment)
// and, through its override knobs and recorded offsets, precisely broken ones. Header-only; reuse it from
// any test (include "unit/model/gguf_writer.h").
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace mopt::test {

// Little-endian byte buffer with append helpers.
struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void raw(const std::vector<uint8_t>& v) { b.insert(b.end(), v.begin(), v.end()); }
  size_t size() const { return b.size(); }
};

// GGUF value type ids.
enum GgufType : uint32_t {
  kGU8 = 0, kGI8 = 1, kGU16 = 2, kGI16 = 3, kGU32 = 4, kGI32 = 5, kGF32 = 6, kGBool = 7, kGString = 8,
  kGArray = 9, kGU64 = 10, kGI64 = 11, kGF64 = 12,
};

// ggml tensor type ids used in tests.
enum GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30 };

inline uint64_t ggml_type_bytes(uint32_t type, uint64_t n_elems) {
  switch (type) {
    case kF32: return n_elems * 4;
    case kF16: case kBF16: return n_elems * 2;
    case kQ4_0: return n_elems / 32 * 18;
    case kQ8_0: return n_elems / 32 * 34;
    case kQ4_K: return n_elems / 256 * 144;
    case kQ5_K: return n_elems / 256 * 176;
    case kQ6_K: return n_elems / 256 * 210;
    default: return n_elems;  // unknown types: tests that use them only need some bytes
  }
}

class GgufWriter {
 public:
  // ---- knobs for broken files ----
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors_override, n_kv_override;
  uint64_t alignment = 32;  // the padding used; add general.alignment yourself to declare another value

  // ---- metadata: typed helpers and a raw escape hatch (payload = bytes after the type id) ----
  void kv_raw(const std::string& key, uint32_t type, const std::vector<uint8_t>& payload) {
    Bytes e;
    e.str(key);
    e.put<uint32_t>(type);
    e.raw(payload);
    kvs_.push_back(std::move(e.b));
  }
  template <class T>
  void kv_scalar(const std::string& key, uint32_t type, T v) {
    Bytes p;
    p.put<T>(v);
    kv_raw(key, type, p.b);
  }
  void kv_u32(const std::string& k, uint32_t v) { kv_scalar(k, kGU32, v); }
  void kv_i32(const std::string& k, int32_t v) { kv_scalar(k, kGI32, v); }
  void kv_u64(const std::string& k, uint64_t v) { kv_scalar(k, kGU64, v); }
  void kv_f32(const std::string& k, float v) { kv_scalar(k, kGF32, v); }
  void kv_bool(const std::string& k, bool v) { kv_scalar<uint8_t>(k, kGBool, v ? 1 : 0); }
  void kv_str(const std::string& k, const std::string& v) {
    Bytes p;
    p.str(v);
    kv_raw(k, kGString, p.b);
  }
  void kv_str_array(const std::string& k, const std::vector<std::string>& v) {
    Bytes p;
    p.put<uint32_t>(kGString);
    p.put<uint64_t>(v.size());
    for (const auto& s : v) p.str(s);
    kv_raw(k, kGArray, p.b);
  }
  void kv_f32_array(const std::string& k, const std::vector<float>& v) {
    Bytes p;
    p.put<uint32_t>(kGF32);
    p.put<uint64_t>(v.size());
    for (float x : v) p.put<float>(x);
    kv_raw(k, kGArray, p.b);
  }
  void kv_i32_array(const std::string& k, const std::vector<int32_t>& v) {
    Bytes p;
    p.put<uint32_t>(kGI32);
    p.put<uint64_t>(v.size());
    for (int32_t x : v) p.put<int32_t>(x);
    kv_raw(k, kGArray, p.b);
  }

  // ---- tensors ----
  struct Tensor {
    std::string name;
    uint32_t type = kF32;
    std::vector<uint64_t> ne;
    std::vector<uint8_t> data;          // written at the next aligned offset
    std::optional<uint64_t> offset;     // override the offset written in the table
  };
  // Adds a tensor; empty `data` = deterministic bytes of the right size for the type and shape.
  Tensor& tensor(const std::string& name, uint32_t type, std::vector<uint64_t> ne, std::vector<uint8_t> data = {}) {
    Tensor t;
    t.name = name;
    t.type = type;
    t.ne = std::move(ne);
    if (data.empty()) {
      uint64_t n = 1;
      for (uint64_t d : t.ne) n *= d;
      data.resize(static_cast<size_t>(ggml_type_bytes(type, n)));
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 131 + tensors_.size() * 7) & 0x7f);
    }
    t.data = std::move(data);
    tensors_.push_back(std::move(t));
    return tensors_.back();
  }
  // An f32 tensor from values.
  Tensor& tensor_f32(const std::string& name, std::vector<uint64_t> ne, const std::vector<float>& v) {
    std::vector<uint8_t> d(v.size() * 4);
    std::memcpy(d.data(), v.data(), d.size());
    return tensor(name, kF32, std::move(ne), std::move(d));
  }

  // ---- output; offsets of interesting fields are recorded while building ----
  size_t off_version = 0, off_n_tensors = 0, off_n_kv = 0;
  std::vector<size_t> off_kv;             // start of each metadata entry
  std::vector<size_t> off_tensor_entry;   // start of each tensor table entry
  std::vector<size_t> off_tensor_ndims;   // its n_dims field
  std::vector<size_t> off_tensor_type;    // its type field
  std::vector<size_t> off_tensor_offset;  // its offset field
  size_t data_start = 0;

  std::vector<uint8_t> build() {
    Bytes out;
    out.b.insert(out.b.end(), magic.begin(), magic.end());
    off_version = out.size();
    out.put<uint32_t>(version);
    off_n_tensors = out.size();
    out.put<uint64_t>(n_tensors_override.value_or(tensors_.size()));
    off_n_kv = out.size();
    out.put<uint64_t>(n_kv_override.value_or(kvs_.size()));
    off_kv.clear();
    for (const auto& kv : kvs_) {
      off_kv.push_back(out.size());
      out.raw(kv);
    }
    // Data layout first (offsets relative to the data section).
    std::vector<uint64_t> offsets;
    uint64_t cur = 0;
    for (const auto& t : tensors_) {
      offsets.push_back(cur);
      cur += t.data.size();
      cur = (cur + alignment - 1) / alignment * alignment;
    }
    off_tensor_entry.clear();
    off_tensor_ndims.clear();
    off_tensor_type.clear();
    off_tensor_offset.clear();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      off_tensor_entry.push_back(out.size());
      out.str(t.name);
      off_tensor_ndims.push_back(out.size());
      out.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) out.put<uint64_t>(d);
      off_tensor_type.push_back(out.size());
      out.put<uint32_t>(t.type);
      off_tensor_offset.push_back(out.size());
      out.put<uint64_t>(t.offset.value_or(offsets[i]));
    }
    if (!tensors_.empty()) {
      while (out.size() % alignment) out.put<uint8_t>(0);
      data_start = out.size();
      for (size_t i = 0; i < tensors_.size(); ++i) {
        out.b.resize(data_start + offsets[i], 0);
        out.raw(tensors_[i].data);
      }
      while (out.size() % alignment) out.put<uint8_t>(0);
    } else {
      data_start = out.size();
    }
    return std::move(out.b);
  }

  std::vector<Tensor>& tensors() { return tensors_; }

 private:
  std::vector<std::vector<uint8_t>> kvs_;
  std::vector<Tensor> tensors_;
};

// Patches a little-endian value into a built file.
template <class T>
void patch(std::vector<uint8_t>& file, size_t offset, T v) {
  std::memcpy(file.data() + offset, &v, sizeof(T));
}

// Writes bytes to `path`; returns false on failure.
inline bool write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}
inline bool write_file(const std::string& path, const std::string& text) {
  return write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace mopt::test
