#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <dirent.h>
#include <map>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "core/strfmt.h"
#include "model/json_file.h"

namespace mopt::safetensors {

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit (100 MB)
constexpr size_t kMaxDims = 4;

// Every dtype the safetensors format defines, so that one we do not load gets a message naming it. Which of them
// we load is a fact of the dtype table (DTypeTraits::safetensors_name of the weight types).
const char* const kSafetensorsDTypes[] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8",
                                          "U8",  "U16", "U32",  "U64", "BOOL", "F8_E4M3", "F8_E5M2"};

// Weight types, and the element types of the parts of quantized layers (I32 packed codes, I64 shapes, F8_E4M3),
// which the Hugging Face loader assembles into weight types (model/hf_quant.h).
bool loads_from_safetensors(const DTypeTraits& r) { return r.safetensors_name != nullptr; }

bool is_uint(const json& j) { return j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0); }

Status parse_entry(const std::string& name, const std::string& key, const json& e, uint64_t data_size,
                   const uint8_t* data_base, TensorView& tv, uint64_t& begin) {
  auto fail = [&](const std::string& msg) {
    return Status::error(strfmt("%s: tensor '%s': %s", name.c_str(), key.c_str(), msg.c_str()));
  };
  if (!e.is_object()) return fail("header entry is not a JSON object");
  auto dt = e.find("dtype");
  auto sh = e.find("shape");
  auto off = e.find("data_offsets");
  if (dt == e.end() || !dt->is_string()) return fail("missing or non-string \"dtype\"");
  if (sh == e.end() || !sh->is_array()) return fail("missing or non-array \"shape\"");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !is_uint((*off)[0]) || !is_uint((*off)[1]))
    return fail("\"data_offsets\" must be [begin, end] with non-negative integers");
  const std::string dts = dt->get<std::string>();
  const DTypeTraits* d = nullptr;
  for (const DTypeTraits& r : dtype_table())
    if (loads_from_safetensors(r) && dts == r.safetensors_name) d = &r;
  if (!d) {
    if (std::find(std::begin(kSafetensorsDTypes), std::end(kSafetensorsDTypes), dts) == std::end(kSafetensorsDTypes))
      return fail(strfmt("unknown dtype \"%s\"", dts.c_str()));
    const std::string supported =
        dtype_list(loads_from_safetensors, [](const DTypeTraits& r) { return r.safetensors_name; });
    return fail(strfmt("dtype %s is not supported (supported: %s); convert the checkpoint to one of them", dts.c_str(),
                       supported.c_str()));
  }
  if (sh->size() > kMaxDims) return fail(strfmt("%zu dimensions, at most %zu are supported", sh->size(), kMaxDims));
  tv.name = key;
  tv.dtype = d->type;
  tv.n_dims = static_cast<int>(sh->size());
  tv.ne = {1, 1, 1, 1};
  uint64_t n_elems = 1;
  for (size_t i = 0; i < sh->size(); ++i) {
    const json& dim = (*sh)[i];
    if (!is_uint(dim)) return fail(strfmt("shape[%zu] is not a non-negative integer", i));
    uint64_t v = dim.get<uint64_t>();
    if (v == 0) return fail(strfmt("shape[%zu] is 0 (empty tensors are not supported)", i));
    if (v > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(n_elems, v, &n_elems) ||
        n_elems > static_cast<uint64_t>(INT64_MAX))
      return fail("element count overflows");
    tv.ne[sh->size() - 1 - i] = static_cast<int64_t>(v);  // PyTorch order -> ne order
  }
  const std::optional<uint64_t> row = row_bytes(d->type, n_elems);  // the whole tensor as one row
  if (!row) return fail("byte size overflows");
  const uint64_t nbytes = *row;
  begin = (*off)[0].get<uint64_t>();
  uint64_t end = (*off)[1].get<uint64_t>();
  if (begin > end) return fail(strfmt("data_offsets [%llu, %llu] are reversed", (unsigned long long)begin,
                                      (unsigned long long)end));
  if (end > data_size)
    return fail(strfmt("data_offsets [%llu, %llu] run past the data section (%llu bytes); the file is truncated",
                       (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_size));
  if (end - begin != nbytes)
    return fail(strfmt("data_offsets span %llu bytes but shape %s of %s needs %llu", (unsigned long long)(end - begin),
                       sh->dump().c_str(), d->safetensors_name, (unsigned long long)nbytes));
  tv.nbytes = nbytes;
  tv.data = data_base + begin;
  return Status::ok();
}

}  // namespace

Result<std::vector<TensorView>> parse(const uint8_t* data, size_t size, const std::string& name) {
  if (size < 8) return error("%s: truncated: %zu bytes, a safetensors file starts with an 8-byte header length", name.c_str(), size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);
  if (header_len > kMaxHeaderBytes)
    return error("%s: header length %llu exceeds the safetensors limit of 100 MB (not a safetensors file?)",
                 name.c_str(), (unsigned long long)header_len);
  if (header_len > size - 8)
    return error("%s: truncated: header needs %llu bytes at offset 8, file has %zu bytes", name.c_str(),
                 (unsigned long long)header_len, size);
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(data) + 8, reinterpret_cast<const char*>(data) + 8 + header_len);
  } catch (const json::exception& e) {
    return error("%s: header is not valid JSON: %s", name.c_str(), e.what());
  }
  if (!header.is_object()) return error("%s: header is not a JSON object", name.c_str());
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  std::vector<TensorView> out;
  std::vector<std::pair<uint64_t, size_t>> order;  // (begin, index into out) for the overlap check
  out.reserve(header.size());
  try {
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        if (!it->is_object()) return error("%s: __metadata__ is not a JSON object", name.c_str());
        continue;
      }
      TensorView tv;
      uint64_t begin = 0;
      MOPT_TRY(parse_entry(name, it.key(), *it, data_size, data + data_start, tv, begin));
      order.emplace_back(begin, out.size());
      out.push_back(std::move(tv));
    }
  } catch (const json::exception& e) {  // defensive: type errors from unexpected values
    return error("%s: malformed header: %s", name.c_str(), e.what());
  }
  std::sort(order.begin(), order.end());
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorView& prev = out[order[i - 1].second];
    if (order[i].first < order[i - 1].first + prev.nbytes)
      return error("%s: tensors '%s' and '%s' overlap in the data section", name.c_str(), prev.name.c_str(),
                   out[order[i].second].name.c_str());
  }
  // Keep the data order (the header's JSON object order is alphabetical in nlohmann::json).
  std::vector<TensorView> sorted;
  sorted.reserve(out.size());
  for (const auto& [b, idx] : order) sorted.push_back(std::move(out[idx]));
  return sorted;
}

Result<TensorSet> open_file(const std::string& path) {
  MOPT_ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
  MOPT_ASSIGN_OR_RETURN(auto tensors, parse(map->data(), map->size(), path));
  TensorSet set;
  set.tensors = std::move(tensors);
  set.mappings.push_back(std::move(map));
  return set;
}

Result<Index> parse_index(const std::string& text, const std::string& name) {
  MOPT_ASSIGN_OR_RETURN(json j, parse_json_object(text, name));
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    return error("%s: expected an object with a \"weight_map\" object", name.c_str());
  Index idx;
  std::map<std::string, size_t> shard_ids;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string()) return error("%s: weight_map['%s'] is not a string", name.c_str(), it.key().c_str());
    std::string shard = it->get<std::string>();
    // Shard names come from an untrusted file: only plain names inside the model folder.
    if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
        shard == "." || shard == ".." || shard.find('\0') != std::string::npos)
      return error("%s: weight_map['%s'] = '%s' is not a plain file name in the model folder", name.c_str(),
                   it.key().c_str(), shard.c_str());
    if (shard_ids.emplace(shard, idx.shards.size()).second) idx.shards.push_back(shard);
    idx.weight_map.emplace_back(it.key(), std::move(shard));
  }
  if (idx.weight_map.empty()) return error("%s: weight_map is empty", name.c_str());
  std::sort(idx.shards.begin(), idx.shards.end());  // model-00001-of-N, model-00002-of-N, ...
  return idx;
}

namespace {
bool is_regular_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
}  // namespace

Result<TensorSet> open_dir(const std::string& dir) {
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (is_regular_file(index_path)) {
    MOPT_ASSIGN_OR_RETURN(std::string text, read_file(index_path));
    MOPT_ASSIGN_OR_RETURN(Index idx, parse_index(text, index_path));
    TensorSet set;
    std::map<std::string, std::string> where;  // tensor -> shard it was found in
    std::map<std::string, const TensorView*> by_name;
    for (const std::string& shard : idx.shards) {
      MOPT_ASSIGN_OR_RETURN(TensorSet one, open_file(dir + "/" + shard));
      for (TensorView& t : one.tensors) {
        if (!where.emplace(t.name, shard).second)
          return error("%s: tensor '%s' is stored in both %s and %s", dir.c_str(), t.name.c_str(),
                       where[t.name].c_str(), shard.c_str());
        set.tensors.push_back(std::move(t));
      }
      for (auto& m : one.mappings) set.mappings.push_back(std::move(m));
    }
    for (const auto& [tensor, shard] : idx.weight_map) {
      auto it = where.find(tensor);
      if (it == where.end())
        return error("%s: the index lists tensor '%s' in %s, but no shard contains it", index_path.c_str(),
                     tensor.c_str(), shard.c_str());
      if (it->second != shard)
        return error("%s: the index lists tensor '%s' in %s, but it is in %s", index_path.c_str(), tensor.c_str(),
                     shard.c_str(), it->second.c_str());
    }
    return set;
  }
  const std::string single = dir + "/model.safetensors";
  if (is_regular_file(single)) return open_file(single);
  // Any single *.safetensors file.
  std::vector<std::string> found;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* ent = ::readdir(d)) {
      std::string n = ent->d_name;
      if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0 && is_regular_file(dir + "/" + n))
        found.push_back(n);
    }
    ::closedir(d);
  } else {
    return error("cannot read directory '%s'", dir.c_str());
  }
  if (found.size() == 1) return open_file(dir + "/" + found[0]);
  if (found.empty())
    return error("%s: no model.safetensors, model.safetensors.index.json or *.safetensors file in this folder",
                 dir.c_str());
  return error("%s: %zu *.safetensors files but no model.safetensors.index.json to say how they fit together",
               dir.c_str(), found.size());
}

}  // namespace mopt::safetensors
