// bench_gpu_tp: tensor parallelism on the CUDA backend (issue 22; docs/tensor_parallel.md), in one run:
//   1. all-reduce latency of bf16 messages from one decode row of the shape (n_embd) to 32 MiB: the one-shot peer
//      all-reduce (peer_comm.h) against NCCL's ring, both inside CUDA graphs of 32 back-to-back all-reduces per
//      rank, replayed; NCCL only where every rank has a GPU of its own;
//   2. decode of a random-weight model shape (--shape) at tensor-parallel size 1 and N: one stream, and --batch
//      sequences, each step a greedy pick on the GPUs (forward_sample: no logits copied), tokens per second. A size
//      whose weights do not fit (llama-3.1-70b at TP 1 on an H200) is reported as not run;
//   3. with --agreement MODEL: top-1 agreement of TP N's logits with TP 1's on that model's weights (fp32 and bf16
//      compute), every row of 4 prompts of 256 pseudo-random tokens.
// Usage: bench_gpu_tp [--tp N] [--same-gpu] [--shape NAME] [--layers N] [--batch N] [--steps N] [--comm KIND]
//                     [--skip-allreduce] [--skip-decode] [--agreement MODEL] [--json PATH]
// --same-gpu: every rank on GPU 0 (separate streams; CUDA modules loaded eagerly, as ranks sharing a GPU need):
// exercises the protocol on a one-GPU machine; its figures measure no interconnect.
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/peer_comm.h"
#include "core/strfmt.h"
#include "bench_clock.h"
#include "gpu_batch.h"
#include "gpu_shapes.h"
#include "model/model.h"

namespace mopt {
namespace {

using bench::median;
using bench::now_s;

struct Args {
  int tp = 0;
  bool same_gpu = false;
  std::string shape = "llama-3.1-8b";
  int layers = 0;
  int batch = 64;
  int steps = 48;
  std::string comm = "auto";
  bool skip_allreduce = false, skip_decode = false;
  std::string agreement;
  std::string json;
};

// Microseconds per all-reduce of `bytes` of bf16 on every rank of `devices` through `kind`, rank 0's median over
// replays of a graph of kOps all-reduces; negative when the group cannot be made (its error printed).
double all_reduce_us(const std::vector<int>& devices, size_t bytes, TpCommKind kind) {
  constexpr int kOps = 32, kReplays = 12;
  auto group = cuda::create_tp_comm_group(devices, bytes, kind);
  if (!group) {
    std::printf("    (%s)\n", group.message().c_str());
    return -1;
  }
  const int R = static_cast<int>(devices.size());
  std::vector<double> rank0;
  std::vector<std::string> fail(static_cast<size_t>(R));
  auto worker = [&](int r) {
    cudaSetDevice(devices[static_cast<size_t>(r)]);
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    void* buf = nullptr;
    cudaMalloc(&buf, bytes);
    cudaMemset(buf, 0, bytes);
    cudaGraph_t g;
    cudaGraphExec_t exec = nullptr;
    cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
    Status s;
    cuda::DeviceComm& comm = *(*group)[static_cast<size_t>(r)];
    for (int i = 0; i < kOps && s.is_ok(); ++i) s = comm.all_reduce_sum(buf, bytes / 2, false, st);
    cudaStreamEndCapture(st, &g);
    if (!s.is_ok() || cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
      fail[static_cast<size_t>(r)] = s.is_ok() ? "graph" : s.message();
    } else {
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      for (int rep = 0; rep < kReplays + 2; ++rep) {
        cudaEventRecord(a, st);
        cudaGraphLaunch(exec, st);
        cudaEventRecord(b, st);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        if (r == 0 && rep >= 2) rank0.push_back(1e3 * ms / kOps);
      }
      cudaEventDestroy(a);
      cudaEventDestroy(b);
      cudaGraphExecDestroy(exec);
    }
    cudaGraphDestroy(g);
    cudaFree(buf);
    cudaStreamDestroy(st);
  };
  std::vector<std::thread> th;
  for (int r = 0; r < R; ++r) th.emplace_back(worker, r);
  for (auto& t : th) t.join();
  for (const std::string& f : fail)
    if (!f.empty()) {
      std::printf("    (%s)\n", f.c_str());
      return -1;
    }
  return median(rank0);
}

struct DecodeFigures {
  bool ran = false;
  std::string why_not;
  double single_tps = 0, batch_tps = 0, batch_step_ms = 0;
};

DecodeFigures decode(const ModelConfig& shape, int tp, const std::vector<int>& devices, const Args& a,
                     TpCommKind kind) {
  DecodeFigures f;
  Model model;
  model.format = ModelFormat::kDummy;
  model.config = shape;
  RunnerOptions o;
  o.device = DeviceKind::kCuda;
  o.max_batch_tokens = 2048;
  o.max_seqs = a.batch;
  o.tensor_parallel_size = tp;
  o.plan_cache = false;
  CudaRunnerExtras ex;
  ex.random_weights = true;
  if (tp > 1) {
    ex.tp_devices = devices;
    ex.tp_comm = kind;
  }
  auto rr = create_cuda_runner(model, o, ex);
  if (!rr) {
    f.why_not = rr.message();
    return f;
  }
  ModelRunner& r = **rr;
  constexpr int kBs = 16, kPrompt = 128;
  const int max_blocks = (kPrompt + a.steps + 2 * kBs) / kBs;
  const int slots = a.batch + 1;  // the batch, and the single stream
  if (Status s = r.init_kv_cache(slots * max_blocks, kBs, 0); !s.is_ok()) {
    f.why_not = s.message();
    return f;
  }
  std::vector<float> logits(static_cast<size_t>(a.batch) * shape.n_vocab);
  auto batch = [&] {
    bench::SlotBatch b;
    b.max_blocks = max_blocks;
    b.bs = kBs;
    b.token_mod = std::min(shape.n_vocab, 128000);
    return b;
  };
  std::vector<int32_t> picks(static_cast<size_t>(a.batch));
  auto run = [&](const bench::SlotBatch& b) {  // greedy picks on the GPU(s), as the engine takes them
    const Status s = r.can_sample() ? r.forward_sample(b.view(), {}, picks.data()) : r.forward(b.view(), logits.data());
    if (!s.is_ok()) f.why_not = s.message();
    return s.is_ok();
  };
  // Prompts: the single stream's, then the batch's, 2048 / kPrompt sequences per prefill step.
  {
    auto b = batch();
    b.add(a.batch, 0, kPrompt, 5);
    if (!run(b)) return f;
  }
  for (int s0 = 0; s0 < a.batch; s0 += 2048 / kPrompt) {
    auto b = batch();
    for (int s = s0; s < std::min(a.batch, s0 + 2048 / kPrompt); ++s) b.add(s, 0, kPrompt, 11 + s);
    if (!run(b)) return f;
  }
  std::vector<double> t1, tb;
  for (int step = 0; step < a.steps; ++step) {
    auto b = batch();
    b.add(a.batch, kPrompt + step, 1, 17 + step);
    const double t0 = now_s();
    if (!run(b)) return f;
    if (step >= 4) t1.push_back(now_s() - t0);  // past the first steps: graphs captured
  }
  for (int step = 0; step < a.steps; ++step) {
    auto b = batch();
    for (int s = 0; s < a.batch; ++s) b.add(s, kPrompt + step, 1, 23 + s + step);
    const double t0 = now_s();
    if (!run(b)) return f;
    if (step >= 4) tb.push_back(now_s() - t0);
  }
  f.ran = true;
  f.single_tps = 1.0 / median(t1);
  f.batch_step_ms = 1e3 * median(tb);
  f.batch_tps = a.batch / median(tb);
  return f;
}

struct Agreement {
  size_t rows = 0;
  double top1 = 0;  // fraction of rows whose argmax is TP 1's
  std::string error;
};

Agreement top1_agreement(const Model& m, int tp, const std::vector<int>& devices, ComputeDtype dtype, TpCommKind kind) {
  constexpr int kSeqs = 4, kLen = 256, kBs = 16;
  Agreement out;
  std::vector<std::vector<float>> logits(2);
  for (int which = 0; which < 2; ++which) {
    RunnerOptions o;
    o.device = DeviceKind::kCuda;
    o.max_batch_tokens = kSeqs * kLen;
    o.max_seqs = kSeqs;
    o.dtype = dtype;
    o.plan_cache = false;
    o.tensor_parallel_size = which == 0 ? 1 : tp;
    CudaRunnerExtras ex;
    if (which == 1) {
      ex.tp_devices = devices;
      ex.tp_comm = kind;
    }
    auto rr = create_cuda_runner(m, o, ex);
    if (!rr) return {0, 0, rr.message()};
    const int max_blocks = kLen / kBs;
    if (Status s = (*rr)->init_kv_cache(kSeqs * max_blocks, kBs, 0); !s.is_ok()) return {0, 0, s.message()};
    bench::SlotBatch b;
    b.max_blocks = max_blocks;
    b.bs = kBs;
    b.token_mod = m.config.n_vocab;
    for (int s = 0; s < kSeqs; ++s) b.add(s, 0, kLen, 101 + 37 * s, true);
    logits[static_cast<size_t>(which)].resize(static_cast<size_t>(kSeqs) * kLen * m.config.n_vocab);
    if (Status s = (*rr)->forward(b.view(), logits[static_cast<size_t>(which)].data()); !s.is_ok())
      return {0, 0, s.message()};
  }
  const size_t V = static_cast<size_t>(m.config.n_vocab);
  out.rows = logits[0].size() / V;
  size_t same = 0;
  for (size_t r = 0; r < out.rows; ++r) {
    const float* a = logits[0].data() + r * V;
    const float* b = logits[1].data() + r * V;
    same += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
  }
  out.top1 = static_cast<double>(same) / static_cast<double>(out.rows);
  return out;
}

int run(const Args& a) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::fprintf(stderr, "bench_gpu_tp: no CUDA GPU\n");
    return 1;
  }
  const int tp = a.tp > 0 ? a.tp : std::max(2, n_dev);
  if (!a.same_gpu && tp > n_dev) {
    std::fprintf(stderr, "bench_gpu_tp: --tp %d needs %d GPUs, %d present (or --same-gpu)\n", tp, tp, n_dev);
    return 1;
  }
  std::vector<int> devices(static_cast<size_t>(tp), 0);
  if (!a.same_gpu)
    for (int i = 0; i < tp; ++i) devices[static_cast<size_t>(i)] = i;
  auto shape = bench::gpu_shape(a.shape, a.layers);
  if (!shape) {
    std::fprintf(stderr, "bench_gpu_tp: unknown --shape %s (%s)\n", a.shape.c_str(), bench::kGpuShapeChoices);
    return 1;
  }
  const TpCommKind kind =
      a.comm == "peer" ? TpCommKind::kPeer : a.comm == "nccl" ? TpCommKind::kNccl : TpCommKind::kAuto;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("bench_gpu_tp: %d x %s, tensor-parallel size %d%s, shape %s (%d layers)\n", n_dev, prop.name, tp,
              a.same_gpu ? " (every rank on GPU 0)" : "", shape->name.c_str(), shape->n_layer);
  nlohmann::json j = {{"gpus", n_dev}, {"gpu", prop.name}, {"tp", tp}, {"same_gpu", a.same_gpu},
                      {"shape", shape->name}, {"layers", shape->n_layer}};

  if (!a.skip_allreduce) {
    std::printf("all-reduce of bf16 messages, us per call (graphs of 32 calls, rank 0's median):\n");
    std::printf("  %10s  %10s  %10s  %8s\n", "bytes", "peer", "nccl", "nccl/peer");
    const size_t row = static_cast<size_t>(shape->n_embd) * 2;
    nlohmann::json rows = nlohmann::json::array();
    for (size_t bytes : {row, 8 * row, 64 * row, size_t{2} << 20, size_t{8} << 20, size_t{32} << 20}) {
      const double peer = all_reduce_us(devices, bytes, TpCommKind::kPeer);
      const double nccl = a.same_gpu ? -1 : all_reduce_us(devices, bytes, TpCommKind::kNccl);
      // A figure that was not measured (no NCCL with ranks sharing a GPU, a group that could not be made) is
      // printed as "-" and written as null.
      auto cell = [](double us) { return us > 0 ? strfmt("%.2f", us) : std::string("-"); };
      auto value = [](double us) { return us > 0 ? nlohmann::json(us) : nlohmann::json(nullptr); };
      std::printf("  %10zu  %10s  %10s  %8s\n", bytes, cell(peer).c_str(), cell(nccl).c_str(),
                  peer > 0 && nccl > 0 ? strfmt("%.2f", nccl / peer).c_str() : "-");
      rows.push_back({{"bytes", bytes}, {"peer_us", value(peer)}, {"nccl_us", value(nccl)}});
    }
    j["all_reduce"] = rows;
  }
  if (!a.agreement.empty()) {
    auto m = load_model(a.agreement);
    if (!m) {
      std::fprintf(stderr, "bench_gpu_tp: --agreement %s: %s\n", a.agreement.c_str(), m.message().c_str());
      return 1;
    }
    std::printf("top-1 agreement of TP %d with TP 1, %s, every row of 4 x 256 tokens:\n", tp, a.agreement.c_str());
    nlohmann::json rows = nlohmann::json::array();
    for (ComputeDtype dt : {ComputeDtype::kFloat32, ComputeDtype::kBFloat16}) {
      const Agreement g = top1_agreement(**m, tp, devices, dt, kind);
      if (!g.error.empty()) {
        std::printf("  %s: not run: %s\n", compute_dtype_name(dt), g.error.c_str());
        continue;
      }
      std::printf("  %s: %.2f%% of %zu rows\n", compute_dtype_name(dt), 100 * g.top1, g.rows);
      rows.push_back({{"dtype", compute_dtype_name(dt)}, {"rows", g.rows}, {"top1", g.top1}});
    }
    j["agreement"] = rows;
  }
  if (!a.skip_decode) {
    std::printf("decode, random bf16 weights, %d steps after a 128-token prompt (greedy picks on the GPU):\n",
                a.steps);
    nlohmann::json rows = nlohmann::json::array();
    for (int t : {1, tp}) {
      const DecodeFigures f = decode(*shape, t, devices, a, kind);
      if (!f.ran) {
        std::printf("  TP %d: not run: %s\n", t, f.why_not.c_str());
        rows.push_back({{"tp", t}, {"ran", false}, {"why_not", f.why_not}});
        continue;
      }
      std::printf("  TP %d: single stream %.1f tok/s; %d sequences %.0f tok/s (%.2f ms per step)\n", t, f.single_tps,
                  a.batch, f.batch_tps, f.batch_step_ms);
      rows.push_back({{"tp", t}, {"ran", true}, {"single_tps", f.single_tps}, {"batch", a.batch},
                      {"batch_tps", f.batch_tps}, {"batch_step_ms", f.batch_step_ms}});
    }
    j["decode"] = rows;
  }
  if (!a.json.empty()) {
    std::ofstream out(a.json);
    out << j.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "bench_gpu_tp: cannot write %s\n", a.json.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace mopt

int main(int argc, char** argv) {
  mopt::Args a;
  CLI::App app{"Tensor parallelism on the CUDA backend: all-reduce latency (peer vs NCCL) and decode at TP 1 and N"};
  app.add_option("--tp", a.tp, "tensor-parallel size (default: the GPU count, at least 2)")->check(CLI::Range(2, 8));
  app.add_flag("--same-gpu", a.same_gpu, "every rank on GPU 0 (the protocol on one GPU; no interconnect measured)");
  app.add_option("--shape", a.shape, std::string("model shape: ") + mopt::bench::kGpuShapeChoices)
      ->capture_default_str();
  app.add_option("--layers", a.layers, "layers (0: the shape's own)")->check(CLI::Range(0, 1000));
  app.add_option("--batch", a.batch, "sequences of the batched decode")->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--steps", a.steps, "decode steps per figure (the first 4 untimed)")->check(CLI::Range(8, 10000))
      ->capture_default_str();
  app.add_option("--comm", a.comm, "the decode runs' collectives: auto, peer or nccl")
      ->check(CLI::IsMember({"auto", "peer", "nccl"}))->capture_default_str();
  app.add_flag("--skip-allreduce", a.skip_allreduce, "no all-reduce latency table");
  app.add_flag("--skip-decode", a.skip_decode, "no decode figures");
  app.add_option("--agreement", a.agreement, "a model file / folder: top-1 agreement of TP N with TP 1 on it");
  app.add_option("--json", a.json, "write the figures as JSON to this path");
  CLI11_PARSE(app, argc, argv);
  if (a.same_gpu) setenv("CUDA_MODULE_LOADING", "EAGER", 1);  // before the CUDA runtime starts (peer_comm.h)
  return mopt::run(a);
}
