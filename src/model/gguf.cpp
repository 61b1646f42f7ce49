// GGUF v2/v3 reader. Layout (little-endian):
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
//   n_kv × { string key, u32 value_type, value },
//   n_tensors × { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset },
//   padding to general.alignment (default 32), then the data section (tensor offsets are relative to it).
// A string is u64 length + bytes (no terminator); an array is u32 elem_type + u64 count + elements.
// Every read is bounds-checked against the mapping; every count is checked against the bytes left
// before anything is allocated, so a hostile file can neither crash us nor make us allocate wildly.
#include "model/gguf.h"

#include <cinttypes>
#include <cstring>
#include <unordered_set>

#include "core/strfmt.h"

namespace mopt::gguf {

namespace {

constexpr uint32_t kMinVersion = 2;
constexpr uint32_t kMaxVersion = 3;
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are rejected
constexpr uint64_t kMaxDims = 4;
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = 1ull << 30;
// Each metadata value costs ~90 bytes in memory but as little as 1 byte in the file; this cap on the total
// number of values (arrays included, recursively) bounds that amplification (~400 MB at worst). Real files
// hold well under 1M values (the largest vocabularies have ~256K tokens and ~500K merges).
constexpr uint64_t kMaxMetadataValues = 1ull << 22;

// Every ggml_type GGUF defines, by id and ggml name, so that a file with a type we do not run gets a message
// naming it. Which of them we load is a fact of the dtype table (DTypeTraits::ggml_type of the weight types).
struct GgmlTypeName {
  uint32_t id;
  const char* name;
};
const GgmlTypeName kGgmlTypes[] = {
    {0, "F32"},      {1, "F16"},      {2, "Q4_0"},     {3, "Q4_1"},     {6, "Q5_0"},    {7, "Q5_1"},
    {8, "Q8_0"},     {9, "Q8_1"},     {10, "Q2_K"},    {11, "Q3_K"},    {12, "Q4_K"},   {13, "Q5_K"},
    {14, "Q6_K"},    {15, "Q8_K"},    {16, "IQ2_XXS"}, {17, "IQ2_XS"},  {18, "IQ3_XXS"}, {19, "IQ1_S"},
    {20, "IQ4_NL"},  {21, "IQ3_S"},   {22, "IQ2_S"},   {23, "IQ4_XS"},  {24, "I8"},     {25, "I16"},
    {26, "I32"},     {27, "I64"},     {28, "F64"},     {29, "IQ1_M"},   {30, "BF16"},   {34, "TQ1_0"},
    {35, "TQ2_0"},   {39, "MXFP4"},
};

const char* ggml_type_name(uint32_t id) {
  for (const auto& e : kGgmlTypes)
    if (e.id == id) return e.name;
  return nullptr;
}

bool loads_from_gguf(const DTypeTraits& r) { return r.weight && r.ggml_type >= 0; }

// "F32, F16, BF16, ...": the ggml names of the types we load.
std::string supported_ggml_types() {
  return dtype_list(loads_from_gguf, [](const DTypeTraits& r) {
    const char* name = ggml_type_name(static_cast<uint32_t>(r.ggml_type));
    return std::string(name ? name : r.name);
  });
}

// Smallest number of bytes one element of `t` can take in the file (used to bound counts up front).
uint64_t min_elem_bytes(ValueType t) {
  switch (t) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kBool: return 1;
    case ValueType::kUint16: case ValueType::kInt16: return 2;
    case ValueType::kUint32: case ValueType::kInt32: case ValueType::kFloat32: return 4;
    case ValueType::kUint64: case ValueType::kInt64: case ValueType::kFloat64: return 8;
    case ValueType::kString: return 8;       // u64 length
    case ValueType::kArray: return 12;       // u32 type + u64 count
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kFloat64); }

template <class T>
T load_le(const uint8_t* p) {  // the host is little-endian (x86-64 / aarch64), as GGUF is
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "u8";
    case ValueType::kInt8: return "i8";
    case ValueType::kUint16: return "u16";
    case ValueType::kInt16: return "i16";
    case ValueType::kUint32: return "u32";
    case ValueType::kInt32: return "i32";
    case ValueType::kFloat32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "u64";
    case ValueType::kInt64: return "i64";
    case ValueType::kFloat64: return "f64";
  }
  return "?";
}

std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type) {
  for (const DTypeTraits& r : dtype_table())
    if (loads_from_gguf(r) && static_cast<uint32_t>(r.ggml_type) == ggml_type) return r.type;
  return std::nullopt;
}

// ---- Value ----

bool Value::is_int() const {
  switch (type) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kUint16: case ValueType::kInt16:
    case ValueType::kUint32: case ValueType::kInt32: case ValueType::kUint64: case ValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool Value::is_float() const { return type == ValueType::kFloat32 || type == ValueType::kFloat64; }

int64_t Value::as_int() const {
  switch (type) {
    case ValueType::kUint8: case ValueType::kUint16: case ValueType::kUint32: case ValueType::kUint64:
    case ValueType::kBool:
      // u64 values above INT64_MAX saturate (no GGUF hyperparameter is that large).
      return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
    case ValueType::kInt8: case ValueType::kInt16: case ValueType::kInt32: case ValueType::kInt64:
      return i;
    case ValueType::kFloat32: case ValueType::kFloat64:
      return static_cast<int64_t>(f);
    default:
      return 0;
  }
}

namespace {
std::string quote(const std::string& s, size_t max_len) {
  std::string out = "\"";
  size_t n = 0;
  for (unsigned char c : s) {
    if (n++ >= max_len) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      out += strfmt("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}
}  // namespace

std::string Value::to_string(size_t max_array_elems) const {
  switch (type) {
    case ValueType::kUint8: case ValueType::kUint16: case ValueType::kUint32: case ValueType::kUint64:
      return strfmt("%" PRIu64, u);
    case ValueType::kInt8: case ValueType::kInt16: case ValueType::kInt32: case ValueType::kInt64:
      return strfmt("%" PRId64, i);
    case ValueType::kFloat32: case ValueType::kFloat64:
      return strfmt("%g", f);
    case ValueType::kBool:
      return u ? "true" : "false";
    case ValueType::kString:
      return quote(s, 200);
    case ValueType::kArray: {
      std::string out = strfmt("%s[%zu]{", value_type_name(elem_type), arr.size());
      for (size_t k = 0; k < arr.size() && k < max_array_elems; ++k) {
        if (k) out += ", ";
        out += arr[k].to_string(max_array_elems);
      }
      if (arr.size() > max_array_elems) out += ", ...";
      return out + "}";
    }
  }
  return "?";
}

// ---- Parser ----

class Parser {
 public:
  explicit Parser(File& f) : f_(f), base_(f.data_), size_(f.size_) {}
  Status parse();

 private:
  // Error prefixed with the file path and the current location (e.g. "metadata entry 3 'general.name'").
  [[gnu::format(printf, 2, 3)]] Status fail(const char* fmt, ...) const {
    va_list ap;
    va_start(ap, fmt);
    std::string msg = vstrfmt(fmt, ap);
    va_end(ap);
    std::string loc = where_.empty() ? "" : where_ + ": ";
    return Status::error(strfmt("%s: %s%s", f_.path().c_str(), loc.c_str(), msg.c_str()));
  }
  Status need(uint64_t n, const char* what) const {
    if (n > size_ - pos_)
      return fail("truncated: %s needs %" PRIu64 " bytes at offset %" PRIu64 ", file has %" PRIu64 " bytes", what, n,
                  pos_, static_cast<uint64_t>(size_));
    return Status::ok();
  }
  template <class T>
  Status read(T& out, const char* what) {
    MOPT_TRY(need(sizeof(T), what));
    out = load_le<T>(base_ + pos_);
    pos_ += sizeof(T);
    return Status::ok();
  }
  Status read_string(std::string& out, const char* what) {
    uint64_t len = 0;
    MOPT_TRY(read(len, what));
    if (len > size_ - pos_)
      return fail("truncated: %s of length %" PRIu64 " at offset %" PRIu64 " runs past the end of the file (%" PRIu64
                  " bytes)", what, len, pos_, static_cast<uint64_t>(size_));
    out.assign(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return Status::ok();
  }
  Status read_value(ValueType t, Value& v, int depth);
  Status parse_kv(uint64_t n_kv);
  Status parse_tensor_table(uint64_t n_tensors);
  Status place_tensors();

  File& f_;
  const uint8_t* base_;
  size_t size_;
  uint64_t pos_ = 0;
  uint64_t n_values_ = 0;  // array elements read so far (all arrays, nested ones too)
  std::string where_;
};

Status Parser::read_value(ValueType t, Value& v, int depth) {
  v.type = t;
  switch (t) {
    case ValueType::kUint8: { uint8_t x; MOPT_TRY(read(x, "u8 value")); v.u = x; return Status::ok(); }
    case ValueType::kInt8: { int8_t x; MOPT_TRY(read(x, "i8 value")); v.i = x; return Status::ok(); }
    case ValueType::kUint16: { uint16_t x; MOPT_TRY(read(x, "u16 value")); v.u = x; return Status::ok(); }
    case ValueType::kInt16: { int16_t x; MOPT_TRY(read(x, "i16 value")); v.i = x; return Status::ok(); }
    case ValueType::kUint32: { uint32_t x; MOPT_TRY(read(x, "u32 value")); v.u = x; return Status::ok(); }
    case ValueType::kInt32: { int32_t x; MOPT_TRY(read(x, "i32 value")); v.i = x; return Status::ok(); }
    case ValueType::kUint64: { uint64_t x; MOPT_TRY(read(x, "u64 value")); v.u = x; return Status::ok(); }
    case ValueType::kInt64: { int64_t x; MOPT_TRY(read(x, "i64 value")); v.i = x; return Status::ok(); }
    case ValueType::kFloat32: { float x; MOPT_TRY(read(x, "f32 value")); v.f = x; return Status::ok(); }
    case ValueType::kFloat64: { double x; MOPT_TRY(read(x, "f64 value")); v.f = x; return Status::ok(); }
    case ValueType::kBool: {
      uint8_t x;
      MOPT_TRY(read(x, "bool value"));
      if (x > 1) return fail("bool value at offset %" PRIu64 " is %u, expected 0 or 1", pos_ - 1, x);
      v.u = x;
      return Status::ok();
    }
    case ValueType::kString:
      return read_string(v.s, "string value");
    case ValueType::kArray: {
      if (depth >= kMaxArrayDepth) return fail("arrays nested deeper than %d levels", kMaxArrayDepth);
      uint32_t et = 0;
      MOPT_TRY(read(et, "array element type"));
      if (!valid_value_type(et))
        return fail("array element type %u at offset %" PRIu64 " is not a GGUF value type (0..12)", et, pos_ - 4);
      v.elem_type = static_cast<ValueType>(et);
      uint64_t count = 0;
      MOPT_TRY(read(count, "array length"));
      uint64_t min_bytes = min_elem_bytes(v.elem_type);
      if (count > (size_ - pos_) / min_bytes)
        return fail("array of %" PRIu64 " %s elements at offset %" PRIu64 " needs at least %" PRIu64
                    " bytes per element but only %" PRIu64 " bytes are left in the file",
                    count, value_type_name(v.elem_type), pos_ - 8, min_bytes, static_cast<uint64_t>(size_ - pos_));
      if (count > kMaxMetadataValues - n_values_)
        return fail("metadata holds more than %" PRIu64 " values in total (array of %" PRIu64
                    " at offset %" PRIu64 "); this is not a model file we can load", kMaxMetadataValues, count,
                    pos_ - 8);
      n_values_ += count;
      v.arr.resize(static_cast<size_t>(count));
      for (uint64_t k = 0; k < count; ++k) {
        Status s = read_value(v.elem_type, v.arr[k], depth + 1);
        if (!s.is_ok()) return s.with_context(strfmt("array element %" PRIu64, k));
      }
      return Status::ok();
    }
  }
  return fail("unknown value type %u", static_cast<uint32_t>(t));
}

Status Parser::parse_kv(uint64_t n_kv) {
  std::unordered_set<std::string> seen;
  f_.kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    where_ = strfmt("metadata entry %" PRIu64, k);
    std::string key;
    MOPT_TRY(read_string(key, "key"));
    where_ = strfmt("metadata entry %" PRIu64 " '%s'", k, key.c_str());
    if (key.empty()) return fail("empty key");
    if (!seen.insert(key).second) return fail("duplicate metadata key");
    uint32_t t = 0;
    MOPT_TRY(read(t, "value type"));
    if (!valid_value_type(t)) return fail("value type %u is not a GGUF value type (0..12)", t);
    Value v;
    MOPT_TRY(read_value(static_cast<ValueType>(t), v, 0));
    f_.kv_.emplace_back(std::move(key), std::move(v));
  }
  where_.clear();
  return Status::ok();
}

Status Parser::parse_tensor_table(uint64_t n_tensors) {
  std::unordered_set<std::string> seen;
  f_.tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    where_ = strfmt("tensor table entry %" PRIu64, k);
    TensorInfo ti;
    MOPT_TRY(read_string(ti.view.name, "tensor name"));
    where_ = strfmt("tensor table entry %" PRIu64 " '%s'", k, ti.view.name.c_str());
    if (ti.view.name.empty()) return fail("empty tensor name");
    if (!seen.insert(ti.view.name).second) return fail("duplicate tensor name");
    uint32_t n_dims = 0;
    MOPT_TRY(read(n_dims, "n_dims"));
    if (n_dims < 1 || n_dims > kMaxDims)
      return fail("n_dims is %u, expected 1..%" PRIu64, n_dims, kMaxDims);
    ti.view.n_dims = static_cast<int>(n_dims);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      MOPT_TRY(read(ne, "dimension"));
      if (ne == 0) return fail("dimension %u is 0", d);
      if (ne > static_cast<uint64_t>(INT64_MAX)) return fail("dimension %u is %" PRIu64 " (too large)", d, ne);
      if (__builtin_mul_overflow(n_elems, ne, &n_elems) || n_elems > static_cast<uint64_t>(INT64_MAX))
        return fail("the element count (product of dimensions) overflows at dimension %u (= %" PRIu64 ")", d, ne);
      ti.view.ne[d] = static_cast<int64_t>(ne);
    }
    MOPT_TRY(read(ti.ggml_type, "tensor type"));
    const std::optional<DType> dtype = dtype_from_ggml_type(ti.ggml_type);
    if (!dtype) {
      const char* type_name = ggml_type_name(ti.ggml_type);
      if (!type_name) return fail("unknown ggml tensor type %u", ti.ggml_type);
      return fail("tensor type %s (%u) is not supported (supported: %s); re-quantize the model to a supported type",
                  type_name, ti.ggml_type, supported_ggml_types().c_str());
    }
    ti.view.dtype = *dtype;
    std::optional<uint64_t> rb = row_bytes(ti.view.dtype, static_cast<uint64_t>(ti.view.ne[0]));
    if (!rb)
      return fail("row length %" PRId64 " is not a multiple of the %s block size %d", ti.view.ne[0],
                  dtype_name(ti.view.dtype), dtype_traits(ti.view.dtype).block_elems);
    uint64_t rows = n_elems / static_cast<uint64_t>(ti.view.ne[0]);
    if (__builtin_mul_overflow(*rb, rows, &ti.view.nbytes))
      return fail("byte size overflows (%" PRIu64 " rows of %" PRIu64 " bytes)", rows, *rb);
    MOPT_TRY(read(ti.offset, "data offset"));
    f_.tensors_.push_back(std::move(ti));
  }
  where_.clear();
  return Status::ok();
}

Status Parser::place_tensors() {
  if (f_.tensors_.empty()) return Status::ok();  // vocab-only files may end right after the tensor table
  const uint64_t a = f_.alignment_;
  uint64_t data_start = pos_ % a == 0 ? pos_ : pos_ + (a - pos_ % a);
  if (data_start > size_)
    return fail("truncated: the data section starts at offset %" PRIu64 " (aligned to %" PRIu64
                ") but the file has %" PRIu64 " bytes", data_start, a, static_cast<uint64_t>(size_));
  const uint64_t data_size = size_ - data_start;
  for (size_t k = 0; k < f_.tensors_.size(); ++k) {
    TensorInfo& ti = f_.tensors_[k];
    where_ = strfmt("tensor '%s'", ti.view.name.c_str());
    if (ti.offset % a != 0)
      return fail("data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, ti.offset, a);
    if (ti.offset > data_size || ti.view.nbytes > data_size - ti.offset)
      return fail("data [%" PRIu64 ", +%" PRIu64 ") at file offset %" PRIu64 " runs past the end of the file "
                  "(%" PRIu64 " bytes; data section has %" PRIu64 "); the file is truncated",
                  ti.offset, ti.view.nbytes, data_start + ti.offset, static_cast<uint64_t>(size_), data_size);
    ti.view.data = base_ + data_start + ti.offset;
  }
  where_.clear();
  return Status::ok();
}

Status Parser::parse() {
  if (size_ < 4) return fail("truncated: %zu bytes, too small to be a GGUF file (needs the 4-byte magic)", size_);
  if (std::memcmp(base_, "GGUF", 4) != 0) {
    return fail("not a GGUF file: magic is %02x %02x %02x %02x, expected \"GGUF\" (47 47 55 46)", base_[0],
                base_[1], base_[2], base_[3]);
  }
  pos_ = 4;
  uint32_t version = 0;
  MOPT_TRY(read(version, "version"));
  if (version < kMinVersion || version > kMaxVersion) {
    if (version == 1) return fail("GGUF version 1 is not supported (32-bit counts); re-convert with a current llama.cpp");
    if ((version & 0xffffu) == 0 && version != 0)
      return fail("GGUF version field 0x%08x looks big-endian; only little-endian GGUF files are supported", version);
    return fail("unsupported GGUF version %u (supported: %u..%u)", version, kMinVersion, kMaxVersion);
  }
  f_.version_ = version;
  uint64_t n_tensors = 0, n_kv = 0;
  MOPT_TRY(read(n_tensors, "tensor count"));
  MOPT_TRY(read(n_kv, "metadata count"));
  // Each metadata entry takes >= 13 bytes (key length, type, 1-byte value); each tensor entry >= 32.
  if (n_kv > (size_ - pos_) / 13)
    return fail("metadata count %" PRIu64 " is impossible: %" PRIu64 " bytes are left and each entry needs >= 13",
                n_kv, static_cast<uint64_t>(size_ - pos_));
  if (n_tensors > (size_ - pos_) / 32)
    return fail("tensor count %" PRIu64 " is impossible: %" PRIu64 " bytes are left and each entry needs >= 32",
                n_tensors, static_cast<uint64_t>(size_ - pos_));
  MOPT_TRY(parse_kv(n_kv));

  f_.alignment_ = kDefaultAlignment;
  if (const Value* av = f_.find("general.alignment")) {
    if (!av->is_int() || av->as_int() <= 0)
      return fail("general.alignment must be a positive integer, got %s %s", value_type_name(av->type),
                  av->to_string().c_str());
    uint64_t a = static_cast<uint64_t>(av->as_int());
    if ((a & (a - 1)) != 0 || a > kMaxAlignment)
      return fail("general.alignment %" PRIu64 " is not a power of two <= 2^30", a);
    f_.alignment_ = a;
  }
  MOPT_TRY(parse_tensor_table(n_tensors));
  return place_tensors();
}

// ---- File ----

Result<std::unique_ptr<File>> File::open(const std::string& path) {
  MOPT_ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
  std::unique_ptr<File> f(new File());
  f->data_ = map->data();
  f->size_ = map->size();
  f->path_ = path;
  f->map_ = std::move(map);
  Parser p(*f);
  MOPT_TRY(p.parse());
  return f;
}

Result<std::unique_ptr<File>> File::open_memory(const void* data, size_t size, const std::string& name) {
  std::unique_ptr<File> f(new File());
  f->data_ = static_cast<const uint8_t*>(data);
  f->size_ = size;
  f->path_ = name;
  Parser p(*f);
  MOPT_TRY(p.parse());
  return f;
}

const Value* File::find(std::string_view key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::kString) return std::nullopt;
  return v->s;
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v || !v->is_int()) return std::nullopt;
  return v->as_int();
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_int()) return static_cast<double>(v->as_int());
  return std::nullopt;
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::kBool) return std::nullopt;
  return v->u != 0;
}

namespace {
Status array_type_error(const std::string& path, std::string_view key, const Value& v, const char* want) {
  std::string got = v.type == ValueType::kArray ? strfmt("array of %s", value_type_name(v.elem_type))
                                                 : std::string(value_type_name(v.type));
  return error("%s: metadata '%.*s' is %s, expected an array of %s", path.c_str(), static_cast<int>(key.size()),
               key.data(), got.c_str(), want);
}
}  // namespace

Result<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  std::vector<std::string> out;
  const Value* v = find(key);
  if (!v) return out;
  if (v->type != ValueType::kArray || v->elem_type != ValueType::kString)
    return array_type_error(path(), key, *v, "strings");
  out.reserve(v->arr.size());
  for (const Value& e : v->arr) out.push_back(e.s);
  return out;
}

Result<std::vector<float>> File::get_float_array(std::string_view key) const {
  std::vector<float> out;
  const Value* v = find(key);
  if (!v) return out;
  if (v->type != ValueType::kArray) return array_type_error(path(), key, *v, "numbers");
  Value probe;
  probe.type = v->elem_type;
  if (!probe.is_float() && !probe.is_int()) return array_type_error(path(), key, *v, "numbers");
  out.reserve(v->arr.size());
  for (const Value& e : v->arr) out.push_back(e.is_float() ? static_cast<float>(e.f) : static_cast<float>(e.as_int()));
  return out;
}

Result<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  std::vector<int64_t> out;
  const Value* v = find(key);
  if (!v) return out;
  Value probe;
  probe.type = v->elem_type;
  if (v->type != ValueType::kArray || !probe.is_int()) return array_type_error(path(), key, *v, "integers");
  out.reserve(v->arr.size());
  for (const Value& e : v->arr) out.push_back(e.as_int());
  return out;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.view.name == name) return &t;
  return nullptr;
}

}  // namespace mopt::gguf
