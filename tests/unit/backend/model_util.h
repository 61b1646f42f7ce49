// Test helpers: paths of the shared models, dummy models from a config, re-quantized copies of a model.
#pragma once

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "backend/cpu/quant.h"
#include "model/model.h"

namespace mopt::test {

inline std::string models_dir() {
  const char* e = std::getenv("MOPT_MODELS_DIR");
  return e ? e : MOPT_MODELS_DIR;
}

// Writes a Hugging Face config.json into a fresh temp dir and loads a dummy (random-weight) F32 model from it.
inline std::unique_ptr<Model> dummy_model(const std::string& config_json, uint64_t seed = 7) {
  char tmpl[] = "/tmp/mopt_dummy_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  EXPECT_NE(dir, nullptr);
  const std::string path = std::string(dir) + "/config.json";
  std::ofstream(path) << config_json;
  LoadOptions o;
  o.dummy = true;
  o.dummy_dtype = DType::F32;
  o.dummy_seed = seed;
  auto m = load_model(path, o);
  EXPECT_TRUE(m.is_ok()) << m.message();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

// A copy of `src` whose 2-D weight matrices are converted to `t` (norms, biases and embeddings stay as they are
// unless `embeddings_too`). Row length must suit the block size of t.
inline std::unique_ptr<Model> requantize(const Model& src, DType t, bool embeddings_too = false) {
  auto m = std::make_unique<Model>();
  m->format = src.format;
  m->path = src.path;
  m->config = src.config;
  m->vocab = src.vocab;
  for (const TensorView& v : src.tensors) {
    TensorView nv = v;
    const bool is_emb = v.name == "token_embd.weight" || v.name == "output.weight";
    if (v.n_dims == 2 && (embeddings_too || !is_emb)) {
      const int64_t K = v.ne[0], N = v.rows();
      std::vector<float> row(static_cast<size_t>(K));
      const uint64_t src_rb = *row_bytes(v.dtype, K), dst_rb = *row_bytes(t, K);
      std::vector<uint8_t> buf(static_cast<size_t>(dst_rb * N));
      for (int64_t r = 0; r < N; ++r) {
        cpu::dequantize_row(v.dtype, static_cast<const uint8_t*>(v.data) + r * src_rb, row.data(), K);
        cpu::quantize_row(t, row.data(), buf.data() + r * dst_rb, K);
      }
      nv.dtype = t;
      nv.nbytes = buf.size();
      m->owned_buffers.push_back(std::move(buf));
      nv.data = m->owned_buffers.back().data();
    }
    m->tensors.push_back(nv);
  }
  Status s = finalize_model(*m);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return m;
}

}  // namespace mopt::test
