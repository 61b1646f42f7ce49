// Helpers for the CUDA tests: skip without a GPU, device buffers, bf16 random data, tolerance checks, a small
// random-weight model.
#pragma once

#if MOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "model/model.h"
#include "unit/backend/e4m3_ref.h"

namespace mopt::cudatest {

#define SKIP_WITHOUT_GPU()                                             \
  do {                                                                 \
    if (!::mopt::cuda_device_available()) GTEST_SKIP() << "no CUDA GPU"; \
  } while (0)

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// The runner options of the small-model runner tests: steps of up to 256 tokens, 4 sequences, no plan cache.
inline RunnerOptions small_cuda_options(ComputeDtype dtype, bool eager) {
  RunnerOptions o;
  o.device = DeviceKind::kCuda;
  o.max_batch_tokens = 256;
  o.max_seqs = 4;
  o.dtype = dtype;
  o.enforce_eager = eager;
  o.plan_cache = false;
  return o;
}

// A random-weight model with the Llama-3 block at a small width: GQA 2:1, head_dim 128 (the decode kernels' main
// case), NeoX RoPE over the whole head, 1000-token vocabulary, untied output, context 512. Tests set the layer
// count, QKV bias and RoPE base they need on the returned config.
inline Model small_hd128_model(const char* name) {
  Model m;
  m.format = ModelFormat::kDummy;
  ModelConfig& c = m.config;
  c.arch = Arch::kLlama;
  c.name = name;
  c.n_vocab = 1000;
  c.n_embd = 512;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 128;
  c.n_ff = 1792;
  c.context_length = 512;
  c.rope_style = RopeStyle::kNeox;
  c.rope_dim = 128;
  return m;
}

template <class T>
class DevVec {
 public:
  explicit DevVec(size_t n) : n_(n) {
    if (n == 0) return;
    if (cudaMalloc(&p_, n * sizeof(T)) != cudaSuccess) p_ = nullptr;
  }
  explicit DevVec(const std::vector<T>& h) : DevVec(h.size()) { upload(h); }
  ~DevVec() {
    if (p_) cudaFree(p_);
  }
  DevVec(const DevVec&) = delete;
  DevVec& operator=(const DevVec&) = delete;
  void upload(const std::vector<T>& h) { cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice); }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    cudaDeviceSynchronize();
    cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
  // Poison (0xff bytes: NaN for floats and bf16) so unwritten outputs are caught.
  void poison() { cudaMemset(p_, 0xff, n_ * sizeof(T)); }
  T* get() const { return static_cast<T*>(p_); }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// Random bf16 values (as raw bits) uniform in [lo, hi), plus their exact fp32 values.
inline void random_bf16(std::mt19937& rng, size_t n, float lo, float hi, std::vector<uint16_t>& bits,
                        std::vector<float>& vals) {
  std::uniform_real_distribution<float> u(lo, hi);
  bits.resize(n);
  vals.resize(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = fp32_to_bf16(u(rng));
    vals[i] = bf16_to_fp32(bits[i]);
  }
}

inline std::vector<float> bf16_to_f32(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = bf16_to_fp32(bits[i]);
  return v;
}

// Storage types of the templated kernels: bf16 (held on the host as raw uint16_t bits) or float.
template <class T>
struct Storage;
template <>
struct Storage<cuda::bf16> {
  using Host = uint16_t;
  static Host from(float v) { return fp32_to_bf16(v); }
  static float to(Host h) { return bf16_to_fp32(h); }
};
template <>
struct Storage<float> {
  using Host = float;
  static Host from(float v) { return v; }
  static float to(Host h) { return h; }
};
// fp8 KV cache elements (E4M3 bytes, through the independent oracle; scales are applied by the tests).
template <>
struct Storage<cuda::fp8> {
  using Host = uint8_t;
  static Host from(float v) { return e4m3ref::encode(v); }
  static float to(Host h) { return e4m3ref::decode(h); }
};
template <class T>
using host_t = typename Storage<T>::Host;

// Random values uniform in [lo, hi) rounded to T (raw host representation), plus their exact fp32 values.
template <class T>
void random_vals(std::mt19937& rng, size_t n, float lo, float hi, std::vector<host_t<T>>& raw,
                 std::vector<float>& vals) {
  std::uniform_real_distribution<float> u(lo, hi);
  raw.resize(n);
  vals.resize(n);
  for (size_t i = 0; i < n; ++i) {
    raw[i] = Storage<T>::from(u(rng));
    vals[i] = Storage<T>::to(raw[i]);
  }
}

template <class T>
std::vector<float> to_f32(const std::vector<host_t<T>>& raw) {
  std::vector<float> v(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) v[i] = Storage<T>::to(raw[i]);
  return v;
}

// gtest names for typed tests over the storage types.
struct StorageName {
  template <class T>
  static std::string GetName(int) {
    return sizeof(T) == 2 ? "bf16" : "fp32";
  }
};

// Every element within atol + rtol * |ref| (NaN never passes). Reports the worst element.
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& ref, float atol,
                                            float rtol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
  size_t worst = 0;
  double worst_excess = -1;
  size_t n_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double tol = atol + rtol * std::fabs(ref[i]);
    const double excess = std::isnan(got[i]) ? 1e30 : err - tol;
    if (excess > 0) ++n_bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (n_bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << n_bad << " of " << got.size() << " elements off; worst at " << worst
                                       << ": got " << got[worst] << ", want " << ref[worst] << " (atol " << atol
                                       << ", rtol " << rtol << ")";
}

// Device views of a DevVec holding T's host representation, its download as fp32, and tolerances per T.
template <class T>
std::vector<float> download_f32(const DevVec<host_t<T>>& d) {
  return cudatest::to_f32<T>(d.download());
}

template <class T>
const T* dev(const DevVec<host_t<T>>& d) {
  return reinterpret_cast<const T*>(d.get());
}
template <class T>
T* dev_mut(DevVec<host_t<T>>& d) {
  return reinterpret_cast<T*>(d.get());
}

// Tolerance of an output of storage type T: bf16 value for bf16, fp32 value for float.
template <class T>
constexpr float tol(float bf16_value, float fp32_value) {
  return std::is_same_v<T, float> ? fp32_value : bf16_value;
}
template <class T>
constexpr float kRtol = tol<T>(1.f / 128, 1e-5f);

}  // namespace mopt::cudatest
#endif
