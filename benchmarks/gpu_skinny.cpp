// The skinny GEMM alone (launch_skinny_gemm: the decode GEMMs of 1..8 rows) at the Llama-3.1-8B shapes, per weight
// format and tiling, beside the bandwidth measured in the same run (device-to-device copy, bytes read + written,
// as bench_gpu_decode's ceilings; and a read-only sweep). Random weights quantized on the GPU
// (launch_quantize_weights), each shape with the prologue / epilogue the fused decode step gives it:
//   qkv      6144 x 4096   RMSNorm prologue, bf16 out        o        4096 x 4096   residual epilogue
//   gate_up 28672 x 4096   RMSNorm prologue, bf16 out        down     4096 x 14336  SwiGLU prologue, residual
//   kv       1024 x 4096   plain                             lm_head 128256 x 4096  RMSNorm prologue, fp32 out
// Two timings per tiling:
//   cold:   a chain of 8 (96 MiB L2-evicting read sweep, GEMM) pairs minus the sweeps alone, / 8 (as Gemm's tuner);
//   stream: 32 launches back to back over rotating copies of the weights (>= 192 MiB, so none hits the L2), PDL
//           overlapping each launch's ramp with the previous one's tail, as in a decode step.
// Each figure is the median of --rounds rounds; the bytes are the codes plus their parameters. The last line per
// format and m: 32 x the layer GEMMs (qkv, o, gate_up, down; stream, best tilings) beside their bytes at copy
// bandwidth (the lm_head stays bf16 in the runner whatever the format, so it is not counted there).
// Usage: bench_gpu_skinny [--weights bf16,fp8,int8,q8_0,int4,q4_k] [--m 1,2,4,8]
//                         [--shapes qkv,o,gate_up,down,kv,lm_head] [--rounds 5] [--variants]
//                         [--dims N_EMBD,N_FF,Q_DIM,KV_DIM,VOCAB] [--only V,...] [--row-slice S]
//                         [--a8]
//   (--variants: every tiling's times, not only the best; --dims: another model's shapes, e.g. code-qwen2-25m's
//   512,1408,512,128,4096; default Llama-3.1-8B's 4096,14336,4096,1024,128256; --only: time these tilings
//   alone, e.g. to profile one under Nsight Compute; --row-slice: m > S rows in slices of S rows per CTA,
//   SkinnyGemmParams::row_slice, CUDA-core tilings only, as verification steps may run them; --a8: the formats it
//   takes (q8_0, int4, q4_k; --weights must name one) also through launch_skinny_a8, the integer tensor-core
//   kernel with 8-bit activations, each of its tilings that runs the case timed the same two ways (the wide ones,
//   t8 and up, take one row of 4-bit codes), its output checked against the best stream tiling's). The tilings of
//   a format are numbered as launch_skinny_gemm numbers them: the CUDA-core ones, the tensor-core ones from 10, and
//   the persistent twins of v26-v29 (kernels.h) from 30, which differ from their tiling at m = 1 only; a8 tiling t
//   is variant kFirstA8Variant (34) + t in the runner's tuner.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/gemm_skinny_a8.h"
#include "backend/cuda/kernels.h"

using namespace mopt;

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}
#define CK(expr) check_cuda((expr), #expr)

constexpr size_t kFlushBytes = size_t{96} << 20;
constexpr size_t kRotateBytes = size_t{192} << 20;
constexpr int kChain = 8, kStreamLaunches = 32;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Format {
  const char* name;
  cuda::WeightFormat fmt;
  int group;    // inputs per group (0: a scale per row)
  bool affine;  // groups hold (a, b)
};
const Format kFormats[] = {{"bf16", cuda::WeightFormat::kFloat, 0, false},
                           {"fp8", cuda::WeightFormat::kFp8, 0, false},
                           {"int8", cuda::WeightFormat::kInt8, 0, false},
                           {"q8_0", cuda::WeightFormat::kInt8, 32, false},
                           {"int4", cuda::WeightFormat::kNib4, 128, true},
                           {"q4_k", cuda::WeightFormat::kNib4, 32, true}};  // Q4_0 / Q4_K's layout (G 32)

// Whether launch_skinny_a8 takes format f's layout (--a8 times it).
bool takes_a8(const Format& f) {
  static const float some_group = 0.f;  // a8_supports asks only whether there are groups
  return cuda::a8_supports({.fmt = f.fmt, .group = f.group ? &some_group : nullptr, .group_size = f.group,
                            .affine = f.affine});
}

struct Shape {
  const char* name;
  int n, k;
  cuda::SkinnyPrologue pro;
  cuda::SkinnyEpilogue epi;
  bool y_f32;
};
// The shapes of a model of width e, FFN width ff, q / kv projection widths q, kv and vocabulary v.
std::vector<Shape> model_shapes(int e, int ff, int q, int kv, int v) {
  return {{"qkv", q + 2 * kv, e, cuda::SkinnyPrologue::kRmsNorm, cuda::SkinnyEpilogue::kStore, false},
          {"o", e, q, cuda::SkinnyPrologue::kNone, cuda::SkinnyEpilogue::kAddResidual, true},
          {"gate_up", 2 * ff, e, cuda::SkinnyPrologue::kRmsNorm, cuda::SkinnyEpilogue::kStore, false},
          {"down", e, ff, cuda::SkinnyPrologue::kSwiGlu, cuda::SkinnyEpilogue::kAddResidual, true},
          {"kv", kv, e, cuda::SkinnyPrologue::kNone, cuda::SkinnyEpilogue::kStore, false},
          {"lm_head", v, e, cuda::SkinnyPrologue::kRmsNorm, cuda::SkinnyEpilogue::kStore, true}};
}

// Milliseconds between two events recorded around `enqueue`, median over `rounds`.
template <class Fn>
double time_ms(cudaStream_t s, int rounds, Fn&& enqueue) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int r = 0; r < rounds + 1; ++r) {  // the first round warms up
    CK(cudaEventRecord(e0, s));
    enqueue();
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r > 0) t.push_back(ms);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return median(t);
}

// Copy bandwidth (bytes read + written per second) and read-sweep bandwidth (bytes read per second), 1 GiB.
void measure_bandwidth(cudaStream_t s, double& copy_bw, double& read_bw) {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  const double copy_ms = time_ms(s, 10, [&] { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); });
  const double read_ms = time_ms(s, 10, [&] { CK(cuda::launch_read_sweep(a, bytes, s)); });
  CK(cudaFree(a));
  CK(cudaFree(b));
  copy_bw = 2.0 * bytes / (copy_ms * 1e-3);
  read_bw = bytes / (read_ms * 1e-3);
}

// One format's weights for one shape: `copies` back-to-back copies of codes and parameters.
struct Weights {
  void* codes = nullptr;   // [copies][code_bytes] (bf16: the weights)
  float* params = nullptr; // [copies][param_floats]
  size_t code_bytes = 0, param_floats = 0;
  int copies = 1;
  size_t bytes() const { return code_bytes + param_floats * sizeof(float); }
};

Weights make_weights(const Format& f, const Shape& sh, cudaStream_t s) {
  Weights w;
  const size_t nk = static_cast<size_t>(sh.n) * sh.k;
  const bool quant = f.fmt != cuda::WeightFormat::kFloat;
  w.code_bytes = !quant ? nk * 2 : f.fmt == cuda::WeightFormat::kNib4 ? nk / 2 : nk;
  w.param_floats = !quant ? 0 : f.group ? nk / f.group * (f.affine ? 2 : 1) : static_cast<size_t>(sh.n);
  w.copies = static_cast<int>(std::max<size_t>(2, (kRotateBytes + w.bytes() - 1) / w.bytes()));
  CK(cudaMalloc(&w.codes, w.code_bytes * w.copies));
  if (w.param_floats) CK(cudaMalloc(reinterpret_cast<void**>(&w.params), w.param_floats * sizeof(float) * w.copies));
  cuda::bf16* tmp = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&tmp), nk * 2));
  CK(cuda::launch_fill_random(tmp, static_cast<int64_t>(nk), 7, 1.f / 64, 0.f, s));  // ~ sqrt(3 / 4096)
  if (quant)
    CK(cuda::launch_quantize_weights(tmp, sh.n, sh.k, f.fmt, f.group, 127, static_cast<uint8_t*>(w.codes), w.params, s));
  else
    CK(cudaMemcpyAsync(w.codes, tmp, nk * 2, cudaMemcpyDeviceToDevice, s));
  for (int c = 1; c < w.copies; ++c) {
    CK(cudaMemcpyAsync(static_cast<char*>(w.codes) + c * w.code_bytes, w.codes, w.code_bytes,
                       cudaMemcpyDeviceToDevice, s));
    if (w.param_floats)
      CK(cudaMemcpyAsync(w.params + c * w.param_floats, w.params, w.param_floats * sizeof(float),
                         cudaMemcpyDeviceToDevice, s));
  }
  CK(cudaStreamSynchronize(s));
  CK(cudaFree(tmp));
  return w;
}

// Activations and outputs for every shape (the largest of each).
struct Operands {
  cuda::bf16* x = nullptr;    // [8, 2 * kmax] (gate|up for SwiGLU)
  float* x_f32 = nullptr;     // [8, kmax] residual (RMSNorm)
  cuda::bf16* norm_w = nullptr;  // [kmax]
  void* y = nullptr;          // [8, nmax] fp32
};

cuda::SkinnyGemmParams params_for(const Format& f, const Shape& sh, const Weights& w, const Operands& o, int m,
                                  int copy, int variant) {
  cuda::SkinnyGemmParams p;
  p.x = o.x;
  p.y = o.y;
  p.y_f32 = sh.y_f32 || sh.epi == cuda::SkinnyEpilogue::kAddResidual;
  p.m = m;
  p.n = sh.n;
  p.k = sh.k;
  p.variant = variant;
  p.prologue = sh.pro;
  p.epilogue = sh.epi;
  p.x_f32 = o.x_f32;
  p.norm_w = o.norm_w;
  const void* codes = static_cast<const char*>(w.codes) + copy * w.code_bytes;
  const float* params = w.params ? w.params + copy * w.param_floats : nullptr;
  if (f.fmt == cuda::WeightFormat::kFloat) {
    p.w = static_cast<const cuda::bf16*>(codes);
  } else {
    p.qw.fmt = f.fmt;
    p.qw.codes = codes;
    p.qw.row_scale = f.group ? nullptr : params;
    p.qw.group = f.group ? params : nullptr;
    p.qw.group_size = f.group;
    p.qw.affine = f.affine;
  }
  return p;
}

struct Timing {
  double cold_us = 0, stream_us = 0;
};

// launch(copy) enqueues one GEMM over weight copy `copy`: its cold time (a chain of kChain (L2-evicting sweep,
// launch) pairs minus the sweeps alone) and its stream time (kStreamLaunches launches over rotating copies).
template <class Launch>
Timing time_launches(cudaStream_t s, int rounds, void* flush, int copies, Launch&& launch) {
  const double chain = time_ms(s, rounds, [&] {
    for (int i = 0; i < kChain; ++i) {
      CK(cuda::launch_read_sweep(flush, kFlushBytes, s));
      launch(0);
    }
  });
  const double sweeps = time_ms(s, rounds, [&] {
    for (int i = 0; i < kChain; ++i) CK(cuda::launch_read_sweep(flush, kFlushBytes, s));
  });
  Timing t;
  t.cold_us = (chain - sweeps) * 1e3 / kChain;
  t.stream_us = time_ms(s, rounds, [&] {
    for (int i = 0; i < kStreamLaunches; ++i) launch(i % copies);
  }) * 1e3 / kStreamLaunches;
  return t;
}

// max |a - b| / max |a| and the RMS of a - b over the RMS of a, for two fp32 device outputs of n values.
void compare_outputs(const float* a_dev, const float* b_dev, int n, double& max_rel, double& rms_rel) {
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  CK(cudaMemcpy(a.data(), a_dev, a.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), b_dev, b.size() * 4, cudaMemcpyDeviceToHost));
  double amax = 0, dmax = 0, a2 = 0, d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    amax = std::max(amax, std::fabs(static_cast<double>(a[i])));
    dmax = std::max(dmax, std::fabs(d));
    a2 += static_cast<double>(a[i]) * a[i];
    d2 += d * d;
  }
  max_rel = amax > 0 ? dmax / amax : dmax;
  rms_rel = a2 > 0 ? std::sqrt(d2 / a2) : std::sqrt(d2);
}

// The first of the fastest timings by `field` (untimed entries are infinite); -1 when none was timed.
int fastest(const std::vector<Timing>& t, double Timing::*field) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(t.size()); ++i)
    if (std::isfinite(t[i].*field) && (best < 0 || t[i].*field < t[best].*field)) best = i;
  return best;
}

// " | tiling us GB/s %copy" for the cold and the stream time of tilings c and s (named `tag` + number), for `bytes`.
void print_best(char tag, const std::vector<Timing>& t, int c, int s, double bytes, double copy_bw) {
  auto gbs = [&](double us) { return bytes / (us * 1e-6) / 1e9; };
  std::printf(" | %c%-2d %7.1f %6.0f %4.0f%% | %c%-2d %7.1f %6.0f %4.0f%%", tag, c, t[c].cold_us, gbs(t[c].cold_us),
              100 * gbs(t[c].cold_us) * 1e9 / copy_bw, tag, s, t[s].stream_us, gbs(t[s].stream_us),
              100 * gbs(t[s].stream_us) * 1e9 / copy_bw);
}

// --variants: every timed tiling's cold and stream time on two lines, after `label`.
void print_times(const char* label, char tag, const std::vector<Timing>& t) {
  std::printf("      %scold us:  ", label);
  for (size_t i = 0; i < t.size(); ++i)
    if (std::isfinite(t[i].cold_us)) std::printf(" %c%zu %.1f", tag, i, t[i].cold_us);
  std::printf("\n      %sstream us:", label);
  for (size_t i = 0; i < t.size(); ++i)
    if (std::isfinite(t[i].stream_us)) std::printf(" %c%zu %.1f", tag, i, t[i].stream_us);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> formats = {"bf16", "fp8", "int8", "int4"}, shapes;
  std::vector<int> ms = {1};
  int rounds = 5;
  bool all_variants = false, a8 = false;
  std::vector<int> dims = {4096, 14336, 4096, 1024, 128256}, only;
  int row_slice = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--weights") formats = split(next());
    else if (a == "--shapes") shapes = split(next());
    else if (a == "--m") {
      ms.clear();
      for (const std::string& v : split(next())) ms.push_back(std::atoi(v.c_str()));
    } else if (a == "--rounds") rounds = std::atoi(next().c_str());
    else if (a == "--variants") all_variants = true;
    else if (a == "--row-slice") row_slice = std::atoi(next().c_str());
    else if (a == "--a8") a8 = true;
    else if (a == "--only") {
      for (const std::string& v : split(next())) only.push_back(std::atoi(v.c_str()));
    } else if (a == "--dims") {
      dims.clear();
      for (const std::string& v : split(next())) dims.push_back(std::atoi(v.c_str()));
    } else {
      std::fprintf(stderr, "unknown option %s\nusage: bench_gpu_skinny [--weights LIST] [--m LIST] [--shapes LIST] "
                   "[--rounds N] [--variants] [--dims N_EMBD,N_FF,Q_DIM,KV_DIM,VOCAB] [--only V,...] "
                   "[--row-slice S] [--a8]\n", a.c_str());
      return 2;
    }
  }
  if (dims.size() != 5 || *std::min_element(dims.begin(), dims.end()) < 8 ||
      *std::max_element(dims.begin(), dims.end()) > 262144 ||
      std::any_of(dims.begin(), dims.end(), [](int d) { return d % 32 != 0; })) {
    std::fprintf(stderr, "--dims: five widths (n_embd, n_ff, q, kv, vocab), multiples of 32 up to 262144\n");
    return 2;
  }
  const std::vector<Shape> kShapes = model_shapes(dims[0], dims[1], dims[2], dims[3], dims[4]);
  for (int m : ms)
    if (m < 1 || m > cuda::kSkinnyMaxRows) {
      std::fprintf(stderr, "--m: rows must be 1..%d\n", cuda::kSkinnyMaxRows);
      return 2;
    }
  if (row_slice < 0 || row_slice >= cuda::kSkinnyMaxRows) {
    std::fprintf(stderr, "--row-slice: rows per CTA, 0 (all) .. %d\n", cuda::kSkinnyMaxRows - 1);
    return 2;
  }
  if (rounds < 1) {
    std::fprintf(stderr, "--rounds must be >= 1\n");
    return 2;
  }
  std::vector<const Format*> fsel;
  for (const std::string& n : formats) {
    const Format* f = nullptr;
    for (const Format& c : kFormats)
      if (n == c.name) f = &c;
    if (!f) {
      std::fprintf(stderr, "--weights: unknown format %s (bf16, fp8, int8, q8_0, int4, q4_k)\n", n.c_str());
      return 2;
    }
    fsel.push_back(f);
  }
  if (a8 && std::none_of(fsel.begin(), fsel.end(), [](const Format* f) { return takes_a8(*f); })) {
    std::fprintf(stderr, "--a8 times q8_0, int4 and q4_k weights only: add one of them to --weights\n");
    return 2;
  }
  std::vector<const Shape*> ssel;
  for (const Shape& s : kShapes)
    if (shapes.empty() || std::find(shapes.begin(), shapes.end(), s.name) != shapes.end()) ssel.push_back(&s);
  if (ssel.size() != (shapes.empty() ? std::size(kShapes) : shapes.size())) {
    std::fprintf(stderr, "--shapes: unknown shape (qkv, o, gate_up, down, kv, lm_head)\n");
    return 2;
  }

  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  double copy_bw = 0, read_bw = 0;
  measure_bandwidth(s, copy_bw, read_bw);
  std::printf("%s: D2D copy %.0f GB/s (read + write), read sweep %.0f GB/s\n", prop.name, copy_bw / 1e9,
              read_bw / 1e9);

  int kmax = 0, nmax = 0;
  for (const Shape& sh : kShapes) kmax = std::max(kmax, sh.k), nmax = std::max(nmax, sh.n);
  Operands o;
  CK(cudaMalloc(reinterpret_cast<void**>(&o.x), size_t{8} * 2 * kmax * 2));
  CK(cudaMalloc(reinterpret_cast<void**>(&o.x_f32), size_t{8} * kmax * 4));
  CK(cudaMalloc(reinterpret_cast<void**>(&o.norm_w), static_cast<size_t>(kmax) * 2));
  CK(cudaMalloc(&o.y, size_t{8} * nmax * 4));
  CK(cuda::launch_fill_random(o.x, int64_t{8} * 2 * kmax, 1, 1.f, 0.f, s));
  CK(cuda::launch_fill_random(o.x_f32, int64_t{8} * kmax, 2, 2.f, 0.f, s));
  CK(cuda::launch_fill_random(o.norm_w, static_cast<int64_t>(kmax), 3, 0.5f, 1.f, s));
  CK(cudaMemsetAsync(o.y, 0, size_t{8} * nmax * 4, s));
  void* flush = nullptr;
  CK(cudaMalloc(&flush, kFlushBytes));
  float *check_ref = nullptr, *check_a8 = nullptr;  // --a8's output check
  CK(cudaMalloc(reinterpret_cast<void**>(&check_ref), size_t{8} * nmax * 4));
  CK(cudaMalloc(reinterpret_cast<void**>(&check_a8), size_t{8} * nmax * 4));

  std::printf("%-5s %-8s %6s x %-5s m %8s | %-26s | %-26s\n", "fmt", "shape", "n", "k", "MB",
              "cold: tiling us GB/s %copy", "stream: tiling us GB/s %copy");
  for (const Format* f : fsel) {
    // The f16-activation tilings (the a8 variants, kernels.h, are --a8's, timed below by tiling).
    const int n_var = std::min(cuda::skinny_variants(f->fmt), cuda::kCommonSkinnyVariants);
    for (int m : ms) {
      double layer_us = 0, layer_bytes = 0, a8_layer_us = 0;
      for (const Shape* sh : ssel) {
        Weights w = make_weights(*f, *sh, s);
        std::vector<Timing> t(n_var);
        const int slice = row_slice < m ? row_slice : 0;
        auto timed = [&](int v) {
          if (slice > 0 && v >= cuda::kQuantSkinnyVariants) return false;  // tensor-core tilings: no slices
          return only.empty() || std::find(only.begin(), only.end(), v) != only.end();
        };
        for (int v = 0; v < n_var; ++v) {
          if (!timed(v)) {
            t[v].cold_us = t[v].stream_us = std::numeric_limits<double>::infinity();
            continue;
          }
          t[v] = time_launches(s, rounds, flush, w.copies, [&](int copy) {
            cuda::SkinnyGemmParams p = params_for(*f, *sh, w, o, m, copy, v);
            p.row_slice = slice;
            CK(cuda::launch_skinny_gemm(p, s));
          });
        }
        const int bc = fastest(t, &Timing::cold_us), bs = fastest(t, &Timing::stream_us);
        if (bc < 0) {
          std::fprintf(stderr, "--only: no tiling of %s has those numbers (0 .. %d)\n", f->name, n_var - 1);
          return 2;
        }
        const double bytes = static_cast<double>(w.bytes());
        std::printf("%-5s %-8s %6d x %-5d %d %8.1f", f->name, sh->name, sh->n, sh->k, m, bytes / 1e6);
        print_best('v', t, bc, bs, bytes, copy_bw);
        std::printf("\n");
        if (all_variants) print_times("", 'v', t);
        const bool layer_shape = std::strcmp(sh->name, "lm_head") != 0 && std::strcmp(sh->name, "kv") != 0;
        if (layer_shape) {
          layer_us += t[bs].stream_us;
          layer_bytes += bytes;
        }
        if (a8 && takes_a8(*f)) {
          std::vector<Timing> tw(cuda::kA8Tilings);
          for (int i = 0; i < cuda::kA8Tilings; ++i) {
            if (!cuda::a8_tiling_runs(params_for(*f, *sh, w, o, m, 0, 0), i)) {  // wide: one row of 4-bit codes
              tw[i].cold_us = tw[i].stream_us = std::numeric_limits<double>::infinity();
              continue;
            }
            tw[i] = time_launches(s, rounds, flush, w.copies, [&](int copy) {
              CK(cuda::launch_skinny_a8(params_for(*f, *sh, w, o, m, copy, 0), i, s));
            });
          }
          const int wc = fastest(tw, &Timing::cold_us), ws = fastest(tw, &Timing::stream_us);
          // The same product by the best stream tiling of each kernel, in fp32: stored, or (residual epilogue, whose
          // plans are for it) added to a zeroed residual.
          cuda::SkinnyGemmParams pr = params_for(*f, *sh, w, o, m, 0, bs), pw = params_for(*f, *sh, w, o, m, 0, 0);
          pr.y_f32 = pw.y_f32 = true;
          pr.y = check_ref;
          pw.y = check_a8;
          CK(cudaMemsetAsync(check_ref, 0, size_t{8} * nmax * 4, s));
          CK(cudaMemsetAsync(check_a8, 0, size_t{8} * nmax * 4, s));
          CK(cuda::launch_skinny_gemm(pr, s));
          CK(cuda::launch_skinny_a8(pw, ws, s));
          CK(cudaStreamSynchronize(s));
          double max_rel = 0, rms_rel = 0;
          compare_outputs(check_ref, check_a8, m * sh->n, max_rel, rms_rel);
          std::printf("%-5s %-8s a8 8-bit activations      ", f->name, sh->name);
          print_best('t', tw, wc, ws, bytes, copy_bw);
          std::printf(" | vs v%d: max %.2e, rms %.2e of the output\n", bs, max_rel, rms_rel);
          if (all_variants) print_times("a8 ", 't', tw);
          if (layer_shape) a8_layer_us += tw[ws].stream_us;
        }
        CK(cudaFree(w.codes));
        if (w.params) CK(cudaFree(w.params));
      }
      if (layer_us > 0)  // the four layer shapes that ran (lm_head stays bf16 in the runner: not counted)
        std::printf("%-5s m %d: 32 layers of the layer shapes above (stream, best tilings): %.0f us, %.0f%% of copy "
                    "bandwidth (%.0f us at copy bandwidth)\n",
                    f->name, m, 32 * layer_us, 100 * layer_bytes / (layer_us * 1e-6) / copy_bw,
                    32 * layer_bytes / copy_bw * 1e6);
      if (a8_layer_us > 0)
        std::printf("%-5s m %d: the same through a8 (8-bit activations, integer tensor cores): %.0f us, "
                    "%.0f%% of copy bandwidth\n",
                    f->name, m, 32 * a8_layer_us, 100 * layer_bytes / (a8_layer_us * 1e-6) / copy_bw);
    }
  }
  CK(cudaFree(flush));
  CK(cudaFree(check_ref));
  CK(cudaFree(check_a8));
  CK(cudaFree(o.x));
  CK(cudaFree(o.x_f32));
  CK(cudaFree(o.norm_w));
  CK(cudaFree(o.y));
  CK(cudaStreamDestroy(s));
  return 0;
}
