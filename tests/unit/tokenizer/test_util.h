// Helpers shared by the tokenizer tests: model paths, the llama.cpp .inp/.out vector format, loading.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/mmap.h"
#include "core/status.h"
#include "model/gguf.h"
#include "model/vocab_load.h"
#include "tokenizer/tokenizer.h"

namespace mopt::test {

inline std::string models_dir() {
  const char* env = std::getenv("MOPT_MODELS_DIR");
  return env && *env ? std::string(env) : std::string(MOPT_MODELS_DIR);
}

inline std::string read_text(const std::string& path) {
  Result<std::string> r = read_file(path);
  return r.is_ok() ? std::move(r).value() : std::string();
}

// .inp: strings each followed by "\n__ggml_vocab_test__\n".
inline std::vector<std::string> read_inp(const std::string& path) {
  const std::string data = read_text(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t at = data.find(sep, pos);
    if (at == std::string::npos) break;  // trailing text without a separator is not a test string
    out.push_back(data.substr(pos, at - pos));
    pos = at + sep.size();
  }
  return out;
}

// .out: one line per string, ids each preceded by a space.
inline std::vector<std::vector<int32_t>> read_out(const std::string& path) {
  const std::string data = read_text(path);
  std::vector<std::vector<int32_t>> out;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    if (nl == std::string::npos) nl = data.size();
    std::vector<int32_t> ids;
    const std::string line = data.substr(pos, nl - pos);
    for (size_t i = 0; i < line.size();) {
      if (line[i] == ' ') {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < line.size() && line[j] != ' ') ++j;
      ids.push_back(static_cast<int32_t>(std::stol(line.substr(i, j - i))));
      i = j;
    }
    out.push_back(std::move(ids));
    pos = nl + 1;
  }
  return out;
}

inline Result<VocabData> load_gguf_vocab(const std::string& path) {
  MOPT_ASSIGN_OR_RETURN(auto file, gguf::File::open(path));
  return vocab_from_gguf(*file);
}

inline std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

}  // namespace mopt::test
