// safetensors reader: single files and sharded sets (model.safetensors.index.json), zero-copy over mmap.
// Format: u64 header_len (LE), header_len bytes of JSON
//   {"<name>": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data section; offsets are relative to it. Shapes are PyTorch order (outermost first); views
// reverse them into ne order, so a [out, in] matrix becomes ne = [in, out] with the same bytes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/mmap.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mopt::safetensors {

// Parses a safetensors image in memory; views point into `data`, which must outlive them.
// `name` stands in for the path in error messages. Supported dtypes: those of the dtype table with a
// safetensors name (F32, F16, BF16, and I8, I32, I64, F8_E4M3 for the parts of quantized layers).
Result<std::vector<TensorView>> parse(const uint8_t* data, size_t size, const std::string& name);

// Tensors of a set of safetensors files, with the mappings that back them.
struct TensorSet {
  std::vector<TensorView> tensors;                   // file order within each shard, shards in index order
  std::vector<std::unique_ptr<MappedFile>> mappings;
};

// One file.
Result<TensorSet> open_file(const std::string& path);
// A Hugging Face folder: model.safetensors.index.json (sharded) if present, else model.safetensors,
// else the single *.safetensors file in the folder.
Result<TensorSet> open_dir(const std::string& dir);
// The index JSON of a sharded set: checks shard names (plain file names, no paths) and returns the
// unique shard file names in first-use order and the tensor -> shard map.
struct Index {
  std::vector<std::string> shards;
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor name -> shard file name
};
Result<Index> parse_index(const std::string& json_text, const std::string& name);

}  // namespace mopt::safetensors
