// Test helpers: paths of the shared models, dummy models from a config, re-quantized copies of a model, and fp32
// copies decoded by the tests' own dequantization oracle.
#pragma once

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "backend/cpu/quant.h"
#include "dequant_oracle.h"
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

// A copy of `src` whose tensors pass through convert(view, new_view, buffer): when it returns true, new_view (its dtype
// set by convert) takes the bytes convert wrote into buffer.
template <class Convert>
std::unique_ptr<Model> converted_copy(const Model& src, Convert convert) {
  auto m = std::make_unique<Model>();
  m->format = src.format;
  m->path = src.path;
  m->config = src.config;
  m->vocab = src.vocab;
  for (const TensorView& v : src.tensors) {
    TensorView nv = v;
    std::vector<uint8_t> buf;
    if (convert(v, nv, buf)) {
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

// A copy of `src` whose 2-D weight matrices are converted to `t` (norms, biases and embeddings stay as they are
// unless `embeddings_too`). Row length must suit the block size of t.
inline std::unique_ptr<Model> requantize(const Model& src, DType t, bool embeddings_too = false) {
  return converted_copy(src, [&](const TensorView& v, TensorView& nv, std::vector<uint8_t>& buf) {
    const bool is_emb = v.name == "token_embd.weight" || v.name == "output.weight";
    if (v.n_dims != 2 || (is_emb && !embeddings_too)) return false;
    const int64_t K = v.ne[0], N = v.rows();
    std::vector<float> row(static_cast<size_t>(K));
    const uint64_t src_rb = *row_bytes(v.dtype, K), dst_rb = *row_bytes(t, K);
    buf.resize(static_cast<size_t>(dst_rb * N));
    for (int64_t r = 0; r < N; ++r) {
      cpu::dequantize_row(v.dtype, static_cast<const uint8_t*>(v.data) + r * src_rb, row.data(), K);
      cpu::quantize_row(t, row.data(), buf.data() + r * dst_rb, K);
    }
    nv.dtype = t;
    return true;
  });
}

// A copy of `src` with every tensor in F32, decoded by the independent oracle (dequant_oracle.h), not by src/'s
// dequantization: the input of a reference forward pass that checks the fast path on the quantized model.
inline std::unique_ptr<Model> oracle_f32_copy(const Model& src) {
  return converted_copy(src, [](const TensorView& v, TensorView& nv, std::vector<uint8_t>& buf) {
    if (v.dtype == DType::F32) return false;
    buf.resize(static_cast<size_t>(v.n_elements()) * sizeof(float));  // [n_elements] fp32
    oracle::dequantize(v.dtype, v.data, reinterpret_cast<float*>(buf.data()), v.n_elements());
    nv.dtype = DType::F32;
    return true;
  });
}

}  // namespace mopt::test
