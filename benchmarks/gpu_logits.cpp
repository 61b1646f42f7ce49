// Writes the CUDA runner's logits for given token sequences, for comparison with another implementation
// (tests/gpu/hf_compare.py compares them with Hugging Face transformers).
//
// Usage: bench_gpu_logits --model PATH --tokens FILE --out FILE [--decode-from N] [--device cuda|cpu]
//                         [--dtype auto|float32|bfloat16]
//   FILE (tokens): one sequence per line, token ids separated by spaces.
//   out: raw little-endian fp32 logits [sum of sequence lengths, n_vocab], sequences in file order.
//   --decode-from N: positions >= N are run one token per forward() (decode path, CUDA graphs); the first N
//   tokens as one prefill step. Default: the whole sequence as one prefill (chunked by 1,024 tokens).
//   --dtype: the CUDA runner's compute dtype (RunnerOptions::dtype; default auto). The CPU runner is fp32.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "backend/cuda/cuda_runner.h"
#include "model/model.h"

using namespace mopt;

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "bench_gpu_logits: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, tokens_path, out_path, device = "cuda", dtype = "auto";
  int decode_from = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return fail("missing value after " + a);
    if (a == "--model") model_path = argv[++i];
    else if (a == "--tokens") tokens_path = argv[++i];
    else if (a == "--out") out_path = argv[++i];
    else if (a == "--decode-from") decode_from = std::atoi(argv[++i]);
    else if (a == "--device") device = argv[++i];
    else if (a == "--dtype") dtype = argv[++i];
    else return fail("unknown argument " + a);
  }
  if (model_path.empty() || tokens_path.empty() || out_path.empty())
    return fail("usage: --model PATH --tokens FILE --out FILE [--decode-from N] [--device cuda|cpu] "
                "[--dtype auto|float32|bfloat16]");
  if (device != "cuda" && device != "cpu") return fail("--device must be cuda or cpu, not " + device);
  ComputeDtype compute_dtype;
  if (dtype == "auto") compute_dtype = ComputeDtype::kAuto;
  else if (dtype == "float32") compute_dtype = ComputeDtype::kFloat32;
  else if (dtype == "bfloat16") compute_dtype = ComputeDtype::kBFloat16;
  else return fail("--dtype must be auto, float32 or bfloat16, not " + dtype);

  std::vector<std::vector<int32_t>> seqs;
  {
    std::ifstream f(tokens_path);
    if (!f) return fail("cannot read " + tokens_path);
    std::string line;
    while (std::getline(f, line)) {
      std::istringstream ls(line);
      std::vector<int32_t> s;
      long long v;
      while (ls >> v) {
        if (v < 0 || v > 0x7fffffff) return fail("token id out of range in " + tokens_path);
        s.push_back(static_cast<int32_t>(v));
      }
      if (!s.empty()) seqs.push_back(std::move(s));
    }
  }
  if (seqs.empty()) return fail("no sequences in " + tokens_path);

  auto mr = load_model(model_path);
  if (!mr.is_ok()) return fail(mr.message());
  const Model& model = *mr.value();
  RunnerOptions opts;
  opts.max_batch_tokens = 1024;
  opts.max_seqs = 64;
  opts.dtype = compute_dtype;
  std::unique_ptr<ModelRunner> runner;
  if (device == "cuda") {
    opts.device = DeviceKind::kCuda;
    auto r = create_cuda_runner(model, opts);
    if (!r.is_ok()) return fail(r.message());
    runner = std::move(r).value();
  } else {
    opts.kv_cache_dtype = KvCacheDtype::kFloat32;  // an fp32 reference (the CPU default KV cache is fp16)
    auto r = CpuRunner::create(model, opts);
    if (!r.is_ok()) return fail(r.message());
    runner = std::move(r).value();
  }
  const int V = runner->config().n_vocab;
  const int bs = 16;
  size_t longest = 0;
  for (const auto& s : seqs) longest = std::max(longest, s.size());
  const int max_blocks = static_cast<int>((longest + bs - 1) / bs);
  if (Status st = runner->init_kv_cache(max_blocks, bs, 0); !st.is_ok()) return fail(st.message());

  std::ofstream out(out_path, std::ios::binary);
  if (!out) return fail("cannot write " + out_path);
  std::vector<int32_t> bt(static_cast<size_t>(max_blocks));
  for (int j = 0; j < max_blocks; ++j) bt[static_cast<size_t>(j)] = max_blocks - 1 - j;  // non-trivial table
  std::vector<float> logits;
  for (const auto& s : seqs) {
    const int n = static_cast<int>(s.size());
    int pos = 0;
    while (pos < n) {
      const int chunk = (decode_from >= 0 && pos >= decode_from) ? 1
                        : std::min(opts.max_batch_tokens, (decode_from >= 0 ? std::max(decode_from, 1) : n) - pos);
      BatchArrays b;  // one sequence, tokens [pos, pos + chunk), logits for all of them
      b.tokens.assign(s.begin() + pos, s.begin() + pos + chunk);
      for (int i = 0; i < chunk; ++i) {
        const int p = pos + i;
        b.positions.push_back(p);
        b.slot_mapping.push_back(bt[static_cast<size_t>(p / bs)] * bs + p % bs);
        b.logits_indices.push_back(i);
      }
      b.query_start.push_back(chunk);
      b.seq_lens.push_back(pos + chunk);
      b.block_tables = bt;
      b.max_blocks_per_seq = max_blocks;
      logits.resize(static_cast<size_t>(chunk) * V);
      if (Status st = runner->forward(b.view(), logits.data()); !st.is_ok()) return fail(st.message());
      out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
      pos += chunk;
    }
  }
  std::printf("bench_gpu_logits: %zu sequences, vocab %d, written to %s\n", seqs.size(), V, out_path.c_str());
  return 0;
}
