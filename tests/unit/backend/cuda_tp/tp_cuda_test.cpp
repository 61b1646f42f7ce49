// Tensor parallelism on the CUDA backend (docs/tensor_parallel.md): the one-shot peer all-reduce against sums on
// the host (eager and inside a replayed CUDA graph), and the sharded runner's logits against the unsharded
// CudaRunner's, prefill then decode steps through the paged cache, with CUDA graphs and eagerly. On a machine
// with one GPU every rank runs on it (tp_devices {0, 0, ...}: separate streams, the peer all-reduce through the
// one device's memory); with two or more, the ranks also run one per GPU.
//
// This executable (test_backend_cuda_tp, apart from test_backend_cuda) loads CUDA modules eagerly: ranks sharing a
// GPU need that (peer_comm.h says why), and the variable must be set before the CUDA runtime starts.
//
// Tolerances. fp32 compute: sharding reorders fp32 sums (row-parallel partial products added by the all-reduce)
// and gives the GEMMs other shapes (so other cuBLAS algorithms): within 1e-4 of the largest logit, no top-1
// change. bf16: each rank's row-parallel output is rounded to bf16 before the sum (the unsharded runner rounds
// the whole sum once), so the greedy token may change only where the reference's top-2 margin is below 0.1.
#if MOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "backend/cuda/peer_comm.h"
#include "unit/backend/cuda/cuda_test_util.h"
#include "unit/backend/model_util.h"
#include "unit/backend/tp_compare.h"
#include "unit/fails_with.h"

namespace mopt {
namespace {

// Before main, so before the CUDA runtime reads it.
[[maybe_unused]] const int kEagerModules = setenv("CUDA_MODULE_LOADING", "EAGER", 1);

using cuda::DeviceComm;

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// bf16 bits of x, rounded to nearest even.
uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Every rank all-reduces messages of each size in `sizes` (elements), fp32 then bf16, `rounds` times, eagerly or
// as one CUDA graph per rank captured once and replayed; the results must equal the rank-order sums exactly.
void check_all_reduce(std::span<const int> devices, std::span<const size_t> sizes, bool graph) {
  SCOPED_TRACE(testing::Message() << devices.size() << " ranks" << (graph ? ", graph" : ", eager"));
  size_t max_elems = 0;
  for (size_t n : sizes) max_elems = std::max(max_elems, n);
  auto group = cuda::create_tp_comm_group(devices, max_elems * 4, TpCommKind::kPeer);
  ASSERT_TRUE(group.is_ok()) << group.message();
  const int R = static_cast<int>(devices.size());
  constexpr int kRounds = 3;
  std::vector<std::string> failures(static_cast<size_t>(R));
  // vals[(round * sizes + size) * R + rank]: what each rank contributes, bf16-representable (for the bf16 messages
  // too), made once here: computing them again where they are checked could round differently (FMA contraction).
  std::vector<std::vector<float>> vals;
  for (int round = 0; round < kRounds; ++round)
    for (size_t s = 0; s < sizes.size(); ++s)
      for (int rank = 0; rank < R; ++rank) {
        std::vector<float> v(sizes[s]);
        for (size_t i = 0; i < v.size(); ++i)
          v[i] = from_bf16(to_bf16(std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(rank) +
                                            0.71f * static_cast<float>(round)) * static_cast<float>(1 + s)));
        vals.push_back(std::move(v));
      }
  auto value = [&](int round, size_t s, int rank) -> const std::vector<float>& {
    return vals[(static_cast<size_t>(round) * sizes.size() + s) * static_cast<size_t>(R) + static_cast<size_t>(rank)];
  };
  auto worker = [&](int rank) {
    std::string& fail = failures[static_cast<size_t>(rank)];
    if (cudaSetDevice(devices[static_cast<size_t>(rank)]) != cudaSuccess) return void(fail = "cudaSetDevice");
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    std::vector<void*> bufs;
    for (size_t n : sizes) {
      void* p = nullptr;
      cudaMalloc(&p, n * 4);
      bufs.push_back(p);
    }
    DeviceComm& comm = *(*group)[static_cast<size_t>(rank)];
    auto enqueue = [&](bool f32) -> Status {
      for (size_t s = 0; s < sizes.size(); ++s) MOPT_TRY(comm.all_reduce_sum(bufs[s], sizes[s], f32, st));
      return Status::ok();
    };
    for (bool f32 : {true, false}) {
      cudaGraphExec_t exec = nullptr;
      if (graph) {
        cudaGraph_t g;
        cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
        const Status s = enqueue(f32);
        cudaStreamEndCapture(st, &g);
        if (!s.is_ok() || cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) return void(fail = "capture");
        cudaGraphDestroy(g);
      }
      for (int round = 0; round < kRounds; ++round) {
        for (size_t s = 0; s < sizes.size(); ++s) {
          const std::vector<float>& h = value(round, s, rank);
          if (f32) {
            cudaMemcpyAsync(bufs[s], h.data(), h.size() * 4, cudaMemcpyHostToDevice, st);
          } else {
            std::vector<uint16_t> b(h.size());
            for (size_t i = 0; i < h.size(); ++i) b[i] = to_bf16(h[i]);
            cudaMemcpyAsync(bufs[s], b.data(), b.size() * 2, cudaMemcpyHostToDevice, st);
          }
          cudaStreamSynchronize(st);
        }
        if (graph) cudaGraphLaunch(exec, st);
        else if (const Status s = enqueue(f32); !s.is_ok()) return void(fail = s.message());
        if (cudaStreamSynchronize(st) != cudaSuccess) return void(fail = "sync");
        for (size_t s = 0; s < sizes.size(); ++s) {
          std::vector<uint8_t> out(sizes[s] * (f32 ? 4 : 2));
          cudaMemcpy(out.data(), bufs[s], out.size(), cudaMemcpyDeviceToHost);
          for (size_t i = 0; i < sizes[s]; ++i) {
            float want = 0;
            for (int r = 0; r < R; ++r) want += value(round, s, r)[i];
            float got;
            if (f32) {
              std::memcpy(&got, &out[4 * i], 4);
            } else {
              uint16_t b;
              std::memcpy(&b, &out[2 * i], 2);
              got = from_bf16(b);
              want = from_bf16(to_bf16(want));
            }
            if (std::memcmp(&got, &want, 4) != 0) {
              fail = "round " + std::to_string(round) + (f32 ? " fp32" : " bf16") + " size " +
                     std::to_string(sizes[s]) + " element " + std::to_string(i) + ": " + std::to_string(got) +
                     " != " + std::to_string(want);
              return;
            }
          }
        }
      }
      if (exec) cudaGraphExecDestroy(exec);
    }
    for (void* p : bufs) cudaFree(p);
    cudaStreamDestroy(st);
  };
  std::vector<std::thread> th;
  for (int r = 0; r < R; ++r) th.emplace_back(worker, r);
  for (auto& t : th) t.join();
  for (int r = 0; r < R; ++r) EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "rank " << r;
}

TEST(CudaTensorParallel, PeerAllReduceEqualsHostSums) {
  SKIP_WITHOUT_GPU();
  // 8 elements (one vector), a decode step's rows, one above a CTA's share, and 1 Mi elements.
  const size_t sizes[] = {8, 4096, 16 * 512 * 4 + 8, size_t{1} << 20};
  for (int n : {1, 2, 3, 4}) {
    const std::vector<int> same(static_cast<size_t>(n), 0);  // every rank on GPU 0
    for (bool graph : {false, true}) check_all_reduce(same, sizes, graph);
  }
  if (device_count() >= 2) {
    const int two[] = {0, 1};
    for (bool graph : {false, true}) check_all_reduce(two, sizes, graph);
  }
}

TEST(CudaTensorParallel, PeerAllReduceRefusesBadMessages) {
  SKIP_WITHOUT_GPU();
  const int devs[] = {0};
  auto group = cuda::create_tp_comm_group(devs, 1024, TpCommKind::kPeer);
  ASSERT_TRUE(group.is_ok()) << group.message();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  DeviceComm& c = *(*group)[0];
  EXPECT_TRUE(test::fails_with(c.all_reduce_sum(p, 2048, true, nullptr), "exceeds"));    // 8 KiB > 1 KiB staged
  EXPECT_TRUE(test::fails_with(c.all_reduce_sum(p, 3, true, nullptr), "multiple of 16"));
  cudaFree(p);
  const std::vector<int> nine(9, 0);
  EXPECT_TRUE(test::fails_with(cuda::create_tp_comm_group(nine, 1024, TpCommKind::kPeer), "1 to 8 ranks"));
  const int shared[] = {0, 0};
  EXPECT_TRUE(test::fails_with(cuda::create_tp_comm_group(shared, 1024, TpCommKind::kNccl), "one GPU per"));
}

RunnerOptions options(ComputeDtype dtype, bool eager, int tp) {
  RunnerOptions o = cudatest::small_cuda_options(dtype, eager);
  o.tensor_parallel_size = tp;
  return o;
}

// tp shards on `devices` (empty: one GPU each) against the unsharded runner, both on the general path or both
// with the fused decode path (bf16 decode steps of up to 8 rows).
void expect_sharded_close(const Model& m, int tp, ComputeDtype dtype, bool eager, std::vector<int> devices,
                          bool fused = false) {
  SCOPED_TRACE(testing::Message() << m.config.name << " tp " << tp << " " << compute_dtype_name(dtype)
                                  << (eager ? " eager" : " graphs") << (devices.empty() ? " one GPU each" : "")
                                  << (fused ? " fused" : ""));
  CudaRunnerExtras ex;
  ex.fused_decode = fused;
  auto plain = create_cuda_runner(m, options(dtype, eager, 1), ex);
  ASSERT_TRUE(plain.is_ok()) << plain.message();
  ex.tp_devices = std::move(devices);
  auto sharded = create_cuda_runner(m, options(dtype, eager, tp), ex);
  ASSERT_TRUE(sharded.is_ok()) << sharded.message();
  const auto want = test::run_two_sequences(**plain, 12, 6);
  const auto got = test::run_two_sequences(**sharded, 12, 6);
  const bool f32 = dtype == ComputeDtype::kFloat32;
  const test::LogitDiff d = test::compare_logits(got, want, m.config.n_vocab, f32 ? 0.f : 0.1f);
  std::printf("CUDA tp %d %s (%s, %s%s): %zu rows, max |logit diff| %.3e, max |logit| %.3e, ratio %.3e, top-1 "
              "changes %d (%d off near-ties)\n", tp, m.config.name.c_str(), compute_dtype_name(dtype),
              eager ? "eager" : "graphs", fused ? ", fused" : "", d.rows, d.max_abs, d.max_ref, d.max_abs / d.max_ref,
              d.top1_changes, d.top1_changes_off_tie);
  if (f32) {
    EXPECT_LE(d.max_abs, 1e-4 * d.max_ref);
    EXPECT_EQ(d.top1_changes, 0);
  } else {
    EXPECT_EQ(d.top1_changes_off_tie, 0);
  }
}

std::vector<int> on_gpu0(int tp) { return std::vector<int>(static_cast<size_t>(tp), 0); }

TEST(CudaTensorParallel, Stories260KShardsMatchUnsharded) {
  SKIP_WITHOUT_GPU();
  auto m = load_model(test::models_dir() + "/stories260K.gguf");  // 8 heads / 4 KV heads, head_dim 8
  ASSERT_TRUE(m.is_ok()) << m.message();
  for (int tp : {2, 4})
    for (ComputeDtype dt : {ComputeDtype::kFloat32, ComputeDtype::kBFloat16})
      for (bool eager : {false, true}) expect_sharded_close(**m, tp, dt, eager, on_gpu0(tp));
  if (device_count() >= 2) expect_sharded_close(**m, 2, ComputeDtype::kFloat32, false, {});
}

TEST(CudaTensorParallel, CodeQwen2ShardsMatchUnsharded) {
  SKIP_WITHOUT_GPU();
  auto m = load_model(test::models_dir() + "/code-qwen2-25m");  // QKV bias, tied embeddings, 8 / 2 KV heads
  ASSERT_TRUE(m.is_ok()) << m.message();
  for (int tp : {2, 4})  // TP 4: each KV head replicated on two ranks
    for (ComputeDtype dt : {ComputeDtype::kFloat32, ComputeDtype::kBFloat16})
      expect_sharded_close(**m, tp, dt, false, on_gpu0(tp));
  // The fused decode path (bf16; code-qwen2's widths split into multiples of 8, which it needs): the o / down
  // partial products reduced into the residual.
  for (int tp : {2, 4})
    for (bool eager : {false, true})
      expect_sharded_close(**m, tp, ComputeDtype::kBFloat16, eager, on_gpu0(tp), true);
  if (device_count() >= 2) {
    expect_sharded_close(**m, 2, ComputeDtype::kFloat32, false, {});
    expect_sharded_close(**m, 2, ComputeDtype::kBFloat16, false, {});
  }
}

// 9 heads over 3 KV heads of 16 dims, odd MLP and vocabulary: uneven splits, one KV head per Q head on a rank
// whose heads cut a group unequally (docs/tensor_parallel.md).
constexpr const char* kOddLlama = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 144, "intermediate_size": 301, "num_hidden_layers": 2, "num_attention_heads": 9,
  "num_key_value_heads": 3, "vocab_size": 301, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "tie_word_embeddings": false})";
// 6 heads over 1 KV head of 32 dims: every rank holds a replica of it.
constexpr const char* kOneKvHead = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "hidden_size": 192, "intermediate_size": 320, "num_hidden_layers": 2, "num_attention_heads": 6,
  "num_key_value_heads": 1, "vocab_size": 257, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
  "rope_theta": 10000.0, "tie_word_embeddings": true})";

TEST(CudaTensorParallel, UnevenSplitsAndReplicatedKvHeads) {
  SKIP_WITHOUT_GPU();
  auto odd = test::dummy_model(kOddLlama, 5);
  auto one = test::dummy_model(kOneKvHead, 9);
  ASSERT_TRUE(odd && one);
  for (int tp : {2, 3, 4}) expect_sharded_close(*odd, tp, ComputeDtype::kFloat32, false, on_gpu0(tp));
  for (int tp : {2, 4}) expect_sharded_close(*one, tp, ComputeDtype::kFloat32, false, on_gpu0(tp));
}

// The shards warm up together (their steps hold the collectives), with one plan-cache file for both (stories260K
// splits evenly: both shards have one key); afterwards a workload tunes and captures nothing, and its logits still
// match the unsharded runner's.
TEST(CudaTensorParallel, WarmupInLockstepThenNothingTunes) {
  SKIP_WITHOUT_GPU();
  auto m = load_model(test::models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(m.is_ok()) << m.message();
  namespace fs = std::filesystem;
  const std::string dir = (fs::temp_directory_path() / ("mopt_tp_warmup_" + std::to_string(getpid()))).string();
  fs::remove_all(dir);
  CudaRunnerExtras ex;  // the fused decode path: its eager steps warm up too
  auto plain = create_cuda_runner(**m, options(ComputeDtype::kBFloat16, false, 1), ex);
  ASSERT_TRUE(plain.is_ok()) << plain.message();
  RunnerOptions o = options(ComputeDtype::kBFloat16, false, 2);
  o.plan_cache = true;
  o.plan_cache_dir = dir;
  ex.tp_devices = on_gpu0(2);
  auto sharded = create_cuda_runner(**m, o, ex);
  ASSERT_TRUE(sharded.is_ok()) << sharded.message();
  ModelRunner& r = **sharded;
  ASSERT_TRUE(r.init_kv_cache(test::kTwoSeqBlocks, test::kTwoSeqBlock, 0).is_ok());
  int progress_calls = 0;
  auto rep = r.warmup([&](int, int, const std::string&) { ++progress_calls; });
  ASSERT_TRUE(rep.is_ok()) << rep.message();
  EXPECT_GT(rep->graphs, 0);
  EXPECT_GT(rep->plans_tuned, 0u);
  EXPECT_GT(progress_calls, 0);
  EXPECT_NE(rep->plan_cache.find("wrote"), std::string::npos) << rep->plan_cache;
  const TuningCounters after = r.tuning_counters();
  const auto got = test::run_two_sequences(r, 12, 6, false);
  const TuningCounters now = r.tuning_counters();
  EXPECT_EQ(now.gemm_tunings, after.gemm_tunings);
  EXPECT_EQ(now.graph_captures, after.graph_captures);
  const auto want = test::run_two_sequences(**plain, 12, 6);
  const test::LogitDiff d = test::compare_logits(got, want, (*m)->config.n_vocab, 0.1f);
  std::printf("CUDA tp 2 after warm-up: %zu rows, max |logit diff| %.3e, top-1 changes %d (%d off near-ties); %s\n",
              d.rows, d.max_abs, d.top1_changes, d.top1_changes_off_tie, rep->plan_cache.c_str());
  EXPECT_EQ(d.top1_changes_off_tie, 0);
  fs::remove_all(dir);
}

// Greedy picks on the GPUs (each shard's argmax and its logit, the largest across shards) equal the argmax of the
// gathered logits of the same step; sampled_logits() gathers the rows asked for; draws at a temperature are
// refused (the engine samples those on the host).
TEST(CudaTensorParallel, GreedyPicksOnTheGpusEqualTheGatheredArgmax) {
  SKIP_WITHOUT_GPU();
  auto stories = load_model(test::models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(stories.is_ok()) << stories.message();
  auto odd = test::dummy_model(kOddLlama, 5);  // 301-token vocabulary: uneven column splits
  ASSERT_TRUE(odd);
  for (const auto& [model, tp] : {std::pair<const Model*, int>{stories->get(), 2}, {odd.get(), 3}}) {
    SCOPED_TRACE(testing::Message() << model->config.name << " tp " << tp);
    CudaRunnerExtras ex;
    ex.tp_devices = on_gpu0(tp);
    auto rr = create_cuda_runner(*model, options(ComputeDtype::kFloat32, true, tp), ex);
    ASSERT_TRUE(rr.is_ok()) << rr.message();
    ModelRunner& r = **rr;
    ASSERT_TRUE(r.can_sample());
    EXPECT_FALSE(r.can_sample_random());
    ASSERT_TRUE(r.init_kv_cache(8, 16, 0).is_ok());
    const int V = model->config.n_vocab;
    BatchArrays a;  // sequence 0: 7 tokens in block 0; sequence 1: 5 tokens in block 1
    a.max_blocks_per_seq = 1;
    for (int i = 0; i < 12; ++i) {
      const int seq = i < 7 ? 0 : 1, pos = seq == 0 ? i : i - 7;
      a.tokens.push_back((37 * i + 11) % V);
      a.positions.push_back(pos);
      a.slot_mapping.push_back(16 * seq + pos);
    }
    a.query_start = {0, 7, 12};
    a.seq_lens = {7, 5};
    a.block_tables = {0, 1};
    a.logits_indices = {6, 3, 11};
    const ForwardBatch b = a.view();
    std::vector<float> logits(3 * static_cast<size_t>(V));
    ASSERT_TRUE(r.forward(b, logits.data()).is_ok());
    std::vector<int32_t> picks(3, -1);
    ASSERT_TRUE(r.forward_sample(b, {}, picks.data()).is_ok());  // the same step again: the same values
    for (int row = 0; row < 3; ++row)
      EXPECT_EQ(picks[static_cast<size_t>(row)], test::argmax(&logits[static_cast<size_t>(row) * V], V)) << row;
    const int32_t rows[] = {2, 0};
    std::vector<float> got(2 * static_cast<size_t>(V));
    ASSERT_TRUE(r.sampled_logits(rows, got.data()).is_ok());
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + V, logits.begin() + 2 * V));
    EXPECT_TRUE(std::equal(got.begin() + V, got.end(), logits.begin()));
    std::vector<RowSampling> hot(3);
    hot[1].temperature = 0.7f;
    EXPECT_TRUE(test::fails_with(r.forward_sample(b, hot, picks.data()), "greedy rows on the GPU only"));
  }
}

TEST(CudaTensorParallel, MoreShardsThanGpusRefused) {
  SKIP_WITHOUT_GPU();
  auto m = load_model(test::models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(m.is_ok()) << m.message();
  const int n = device_count();
  EXPECT_TRUE(test::fails_with(create_cuda_runner(**m, options(ComputeDtype::kFloat32, true, n + 1)),
                         "GPUs; this machine has"));
}

}  // namespace
}  // namespace mopt
#endif  // MOPT_HAVE_CUDA
