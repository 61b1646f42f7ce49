// Mixture-of-experts on the CPU: a Mixtral-shaped model (8 experts of ff_exp, top-2) against a dense Llama whose MLP
// is as wide as the two experts a token runs (ff = 2 ff_exp), same attention and size otherwise, both bf16 random
// weights (--load-format dummy). A MoE layer that ran every expert for every token would cost about 4x the dense
// MLP; the grouped layer (backend/cpu/moe.h) should cost about the dense one plus routing and gathering. Prints the
// prefill and decode tokens/s of both, measured in the same run, and their ratios.
// Usage: bench_moe [--threads N] [--prompt N] [--decode N] [--dim D] [--ff-exp F] [--layers L]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "core/strfmt.h"
#include "model/model.h"

using namespace mopt;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  int threads = 0, prompt = 256, decode = 32, dim = 1024, ff_exp = 1024, layers = 4;
};

std::unique_ptr<Model> dummy(const std::string& json) {
  const std::string path = strfmt("/tmp/bench_moe_%d_%zu.json", static_cast<int>(::getpid()), json.size());
  std::ofstream(path) << json;
  LoadOptions o;
  o.dummy = true;
  o.dummy_dtype = DType::BF16;
  auto m = load_model(path, o);
  std::remove(path.c_str());
  if (!m) {
    std::fprintf(stderr, "bench_moe: %s\n", m.message().c_str());
    std::exit(1);
  }
  return std::move(m).value();
}

struct Speed {
  double prefill_tps = 0, decode_tps = 0;
};

// One sequence: a prompt of n_prompt tokens in one step, then n_decode single-token steps; best of `reps`.
Speed measure(const Model& m, int threads, int n_prompt, int n_decode, int reps) {
  RunnerOptions ro;
  ro.n_threads = threads;
  ro.max_batch_tokens = n_prompt;
  auto r = CpuRunner::create(m, ro);
  if (!r) {
    std::fprintf(stderr, "bench_moe: %s\n", r.message().c_str());
    std::exit(1);
  }
  const int bs = 16, n_blocks = (n_prompt + n_decode) / bs + 2;
  if (!(*r)->init_kv_cache(n_blocks, bs, 0).is_ok()) std::exit(1);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int i = 0; i < n_blocks; ++i) table[static_cast<size_t>(i)] = i;
  std::vector<float> logits(static_cast<size_t>(m.config.n_vocab));
  Speed best;
  for (int rep = 0; rep < reps; ++rep) {
    BatchArrays a;
    for (int i = 0; i < n_prompt; ++i) {
      a.tokens.push_back((i * 7919 + 13) % m.config.n_vocab);
      a.positions.push_back(i);
      a.slot_mapping.push_back(i);
    }
    a.query_start.push_back(n_prompt);
    a.seq_lens.push_back(n_prompt);
    a.block_tables = table;
    a.max_blocks_per_seq = n_blocks;
    a.logits_indices.push_back(n_prompt - 1);
    auto t0 = Clock::now();
    if (!(*r)->forward(a.view(), logits.data()).is_ok()) std::exit(1);
    const double prefill = n_prompt / std::chrono::duration<double>(Clock::now() - t0).count();
    t0 = Clock::now();
    for (int i = 0; i < n_decode; ++i) {
      const int pos = n_prompt + i;
      BatchArrays d;
      d.tokens = {(pos * 31 + 5) % m.config.n_vocab};
      d.positions = {pos};
      d.slot_mapping = {pos};
      d.query_start.push_back(1);
      d.seq_lens = {pos + 1};
      d.block_tables = table;
      d.max_blocks_per_seq = n_blocks;
      d.logits_indices = {0};
      if (!(*r)->forward(d.view(), logits.data()).is_ok()) std::exit(1);
    }
    const double decode = n_decode / std::chrono::duration<double>(Clock::now() - t0).count();
    best.prefill_tps = std::max(best.prefill_tps, prefill);
    best.decode_tps = std::max(best.decode_tps, decode);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--threads") a.threads = v;
    else if (k == "--prompt") a.prompt = v;
    else if (k == "--decode") a.decode = v;
    else if (k == "--dim") a.dim = v;
    else if (k == "--ff-exp") a.ff_exp = v;
    else if (k == "--layers") a.layers = v;
    else {
      std::fprintf(stderr, "bench_moe: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const std::string common = strfmt(
      "\"vocab_size\": 4096, \"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
      "\"num_key_value_heads\": %d, \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-5, "
      "\"tie_word_embeddings\": false",
      a.dim, a.layers, a.dim / 64, std::max(1, a.dim / 256));
  auto moe = dummy(strfmt("{\"architectures\": [\"MixtralForCausalLM\"], \"intermediate_size\": %d, "
                          "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, %s}",
                          a.ff_exp, common.c_str()));
  auto dense = dummy(strfmt("{\"architectures\": [\"LlamaForCausalLM\"], \"intermediate_size\": %d, %s}",
                            2 * a.ff_exp, common.c_str()));
  std::printf("d %d, %d layers; MoE: 8 experts of %d, top-2 (%.1fM parameters, %.1fM active); dense: ff %d "
              "(%.1fM parameters)\n",
              a.dim, a.layers, a.ff_exp, moe->n_params() / 1e6, moe->n_active_params() / 1e6, 2 * a.ff_exp,
              dense->n_params() / 1e6);
  const int reps = 3;
  for (int round = 0; round < 2; ++round) {  // interleaved, so that both see the same machine load
    const Speed sm = measure(*moe, a.threads, a.prompt, a.decode, reps);
    const Speed sd = measure(*dense, a.threads, a.prompt, a.decode, reps);
    std::printf("round %d: prefill %d tokens: MoE %.0f tok/s, dense %.0f tok/s (MoE / dense %.2f); decode: MoE %.1f "
                "tok/s, dense %.1f tok/s (%.2f)\n",
                round, a.prompt, sm.prefill_tps, sd.prefill_tps, sm.prefill_tps / sd.prefill_tps, sm.decode_tps,
                sd.decode_tps, sm.decode_tps / sd.decode_tps);
  }
  return 0;
}
