#include "model/safetensors_write.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/strfmt.h"

namespace mopt::safetensors {

namespace {

using ojson = nlohmann::ordered_json;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// One shard: the header (its length as u64 LE, then JSON padded with spaces to a multiple of 8), then the data.
Status write_shard(const std::string& path, const std::vector<const OutTensor*>& tensors, std::vector<uint8_t>& buf) {
  ojson header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const OutTensor* t : tensors) {
    header[t->name] = {{"dtype", dtype_traits(t->dtype).safetensors_name},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->nbytes()}}};
    offset += t->nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (!f) return error("cannot write '%s' (does the directory exist and is it writable?)", path.c_str());
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f.get()) == 8 && std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
  for (const OutTensor* t : tensors) {
    if (!ok) break;
    buf.resize(t->nbytes());
    t->fill(buf.data());
    ok = std::fwrite(buf.data(), 1, buf.size(), f.get()) == buf.size();
  }
  if (!ok || std::fclose(f.release()) != 0) return error("error writing '%s' (disk full?)", path.c_str());
  return Status::ok();
}

}  // namespace

uint64_t OutTensor::nbytes() const {
  uint64_t n = static_cast<uint64_t>(dtype_traits(dtype).block_bytes);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

Result<Written> write_checkpoint(const std::string& dir, const std::vector<OutTensor>& tensors,
                                 uint64_t max_shard_bytes) {
  if (tensors.empty()) return error("no tensors to write");
  std::vector<std::vector<const OutTensor*>> shards(1);
  uint64_t in_shard = 0;
  for (const OutTensor& t : tensors) {
    const DTypeTraits& d = dtype_traits(t.dtype);
    if (!d.safetensors_name || d.block_elems != 1)
      return error("tensor '%s': dtype %s cannot be stored in safetensors", t.name.c_str(), d.name);
    if (!shards.back().empty() && in_shard + t.nbytes() > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&t);
    in_shard += t.nbytes();
  }
  Written w;
  std::vector<uint8_t> buf;  // one tensor at a time
  ojson weight_map = ojson::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shards.size() == 1 ? std::string("model.safetensors")
                                                 : strfmt("model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    MOPT_TRY(write_shard(dir + "/" + name, shards[s], buf));
    w.files.push_back(dir + "/" + name);
    for (const OutTensor* t : shards[s]) {
      weight_map[t->name] = name;
      w.data_bytes += t->nbytes();
    }
  }
  if (shards.size() > 1) {
    const ojson index = {{"metadata", {{"total_size", w.data_bytes}}}, {"weight_map", weight_map}};
    w.files.push_back(dir + "/model.safetensors.index.json");
    MOPT_TRY(write_file(w.files.back(), index.dump(2) + "\n"));
  }
  return w;
}

}  // namespace mopt::safetensors
