// A model and its tokenizer for a benchmark program (engine_throughput, speculative): a file that does not load
// prints why and ends the program with exit status 1.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mopt::bench {

struct BenchModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

inline BenchModel load_model_or_exit(const std::string& path) {
  auto m = load_model(path);
  if (!m) {
    std::fprintf(stderr, "%s\n", m.message().c_str());
    std::exit(1);
  }
  auto t = Tokenizer::create((*m)->vocab);
  if (!t) {
    std::fprintf(stderr, "%s\n", t.message().c_str());
    std::exit(1);
  }
  return {std::move(*m), std::move(*t)};
}

}  // namespace mopt::bench
