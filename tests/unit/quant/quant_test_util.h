// Shared helpers of the quantize tests: scratch folders, a generated random-weight Llama in a Hugging Face folder,
// logits of a model over a token sequence (CPU runner), and KL / top-1 between two sets of logits.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "model/loaders.h"
#include "quant/hf_save.h"
#include "unit/backend/seq_driver.h"
#include "unit/model/test_util.h"

namespace mopt::test {

inline std::string qwen_dir() { return model_path("code-qwen2-25m"); }

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

// The names in a folder (without . and ..).
inline std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

// A Llama with random weights (bf16) in a Hugging Face folder `dir`, with code-qwen2-25m's tokenizer files
// (vocab 4096): 2 layers, hidden 256, 4 heads of 64 (2 KV heads), MLP 640 (no multiple of 256: the GGUF mixes
// fall back for ffn_down).
inline void make_tiny_llama(const std::string& dir) {
  const std::string cfg_path = dir + ".config.json";
  write_text(cfg_path, R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 4096,
      "hidden_size": 256, "intermediate_size": 640, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
      "tie_word_embeddings": false, "torch_dtype": "bfloat16"})");
  LoadOptions o;
  o.dummy = true;
  o.dummy_dtype = DType::BF16;
  o.dummy_seed = 7;
  auto m = load_dummy_model(cfg_path, o);
  ASSERT_TRUE(m) << m.message();
  Status s = quant::save_hf_folder(**m, dir, qwen_dir());
  ASSERT_TRUE(s.is_ok()) << s.message();
}

// A test suite's folder, made afresh (TempDir()/mopt_quant_<suite>_<pid>), holding make_tiny_llama's model in
// `dir`/llama. For SetUpTestSuite.
inline void make_tiny_llama_suite(const std::string& suite, std::string& dir) {
  dir = ::testing::TempDir() + "mopt_quant_" + suite + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ::mkdir(dir.c_str(), 0755);
  make_tiny_llama(dir + "/llama");
}

// Logits [tokens.size(), n_vocab] of `m` over one sequence (CPU runner, fp32 KV cache).
inline std::vector<float> logits_of(const Model& m, const std::vector<int32_t>& tokens) {
  RunnerOptions ro;
  ro.n_threads = 2;
  ro.kv_cache_dtype = KvCacheDtype::kFloat32;
  constexpr int kBlock = 16;
  const int n_blocks = static_cast<int>(tokens.size() / kBlock + 2);
  auto r = CpuRunner::create(m, ro);
  EXPECT_TRUE(r) << r.message();
  if (!r) return {};
  EXPECT_TRUE((*r)->init_kv_cache(n_blocks, kBlock, 0).is_ok());
  SeqDriver drv(**r, n_blocks, kBlock);
  const int s = drv.add_sequence();
  return drv.feed(s, tokens);
}

struct Agreement {
  double mean_kl = 0;  // mean over positions of KL(p_ref || p)
  double top1 = 0;     // fraction of positions whose argmax agree
};

inline Agreement compare_logits(const std::vector<float>& ref, const std::vector<float>& got, int n_vocab) {
  Agreement a;
  const size_t n = ref.size() / static_cast<size_t>(n_vocab);
  for (size_t t = 0; t < n; ++t) {
    const float* r = ref.data() + t * n_vocab;
    const float* g = got.data() + t * n_vocab;
    double mr = -1e30, mg = -1e30;
    for (int v = 0; v < n_vocab; ++v) mr = std::max(mr, double(r[v])), mg = std::max(mg, double(g[v]));
    double zr = 0, zg = 0;
    for (int v = 0; v < n_vocab; ++v) zr += std::exp(r[v] - mr), zg += std::exp(g[v] - mg);
    double kl = 0;
    for (int v = 0; v < n_vocab; ++v) {
      const double lr = r[v] - mr - std::log(zr), lg = g[v] - mg - std::log(zg);
      kl += std::exp(lr) * (lr - lg);
    }
    a.mean_kl += kl / static_cast<double>(n);
    a.top1 += (argmax(r, n_vocab) == argmax(g, n_vocab) ? 1.0 : 0.0) / static_cast<double>(n);
  }
  return a;
}

}  // namespace mopt::test
