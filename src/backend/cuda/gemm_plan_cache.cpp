// The GEMM plans as plan-cache records (gemm.h: Gemm::plan_schema / export_plans / import_plans; the file format in
// backend/plan_cache.h, its use in runner_warmup.cpp). Three kinds, times in nanoseconds (at least 1: a stored plan
// was timed):
//   gemm   m n k y_f32 has_bias align in_f32 skinny skinny_variant tuned_ns + the cuBLASLt algorithm (blob)
//   fused  m n k prologue epilogue y_f32 has_bias weight_format variant tuned_ns, then kMaxSkinnyVariants pairs
//          (ns, variant): the tilings that ran, fastest first, then (0, -1) for the rest
//   fp8    m n k has_bias tuned_ns path + the cuBLASLt algorithm (blob)
// A fused plan is keyed on the weight format but not on its group size: the runner names the model's quantized
// layouts in its cache key (runner_warmup.cpp), so one file holds the plans of one set of layouts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_desc.h"
#include "core/log.h"

namespace mopt::cuda {

namespace {
constexpr int kGemmInts = 10;
constexpr int kFusedInts = 10 + 2 * kMaxSkinnyVariants;
constexpr int kFp8Ints = 6;
constexpr int kAlgoBytes = static_cast<int>(sizeof(cublasLtMatmulAlgo_t));
// Rounded, so that a plan read back (ns / 1000 as a float) writes the same number.
int64_t to_ns(float us) { return std::max<int64_t>(1, std::llround(static_cast<double>(us) * 1000.0)); }
bool flag(int64_t v) { return v == 0 || v == 1; }
std::vector<uint8_t> algo_blob(const cublasLtMatmulAlgo_t& algo) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&algo);
  return {bytes, bytes + sizeof(algo)};
}
}  // namespace

std::vector<PlanRecordSchema> Gemm::plan_schema() {
  return {{"gemm", kGemmInts, kAlgoBytes}, {"fused", kFusedInts, 0}, {"fp8", kFp8Ints, kAlgoBytes}};
}

std::vector<PlanRecord> Gemm::export_plans() const {
  std::vector<PlanRecord> out;
  auto gemm_record = [&out](const Key& key, bool skinny, int variant, float us, const cublasLtMatmulAlgo_t& algo) {
    const auto& [m, n, k, y_f32, bias, align, in_f32] = key;
    out.push_back({"gemm", {m, n, k, y_f32, bias, align, in_f32, skinny, variant, to_ns(us)}, algo_blob(algo)});
  };
  for (const auto& [key, plan] : plans_)
    if (plan->tuned_us > 0.f)  // heuristic choices (large m) are not timed: nothing to keep
      gemm_record(key, plan->skinny, plan->skinny_variant, plan->tuned_us, plan->algo);
  for (const auto& [key, h] : hints_)  // imported plans of shapes not used in this process: kept
    if (!plans_.count(key)) gemm_record(key, h.skinny, h.skinny_variant, h.tuned_us, h.algo);

  for (const auto& [key, plan] : fused_plans_) {
    const auto& [m, n, k, pro, epi, y_f32, bias, fmt] = key;
    PlanRecord r{"fused", {m, n, k, pro, epi, y_f32, bias, fmt, plan.variant, to_ns(plan.tuned_us)}, {}};
    for (size_t i = 0; i < static_cast<size_t>(kMaxSkinnyVariants); ++i) {
      const bool ran = i < plan.ranked.size();
      r.ints.push_back(ran ? to_ns(plan.ranked[i].first) : 0);
      r.ints.push_back(ran ? plan.ranked[i].second : -1);
    }
    out.push_back(std::move(r));
  }

  auto fp8_record = [&out](const Fp8Key& key, float us, Fp8Path path, const cublasLtMatmulAlgo_t& algo) {
    const auto& [m, n, k, bias] = key;
    out.push_back({"fp8", {m, n, k, bias, to_ns(us), static_cast<int>(path)}, algo_blob(algo)});
  };
  for (const auto& [key, plan] : fp8_plans_)
    if (plan->path != Fp8Path::kNone && plan->tuned_us > 0.f) fp8_record(key, plan->tuned_us, plan->path, plan->algo);
  for (const auto& [key, h] : fp8_hints_)
    if (!fp8_plans_.count(key)) fp8_record(key, h.tuned_us, h.path, h.algo);
  return out;
}

Status Gemm::import_plans(std::span<const PlanRecord> records) {
  std::map<Key, Hint> hints;
  std::map<FusedKey, FusedPlan> fused;
  std::map<Fp8Key, Fp8Hint> fp8;
  for (const PlanRecord& r : records) {
    const std::vector<int64_t>& v = r.ints;
    const bool gemm = r.kind == "gemm" && v.size() == kGemmInts && r.blob.size() == sizeof(cublasLtMatmulAlgo_t);
    const bool fus = r.kind == "fused" && v.size() == kFusedInts && r.blob.empty();
    const bool f8 = r.kind == "fp8" && v.size() == kFp8Ints && r.blob.size() == sizeof(cublasLtMatmulAlgo_t);
    if (!gemm && !fus && !f8) return error("plan cache: a '%s' record of the wrong shape", r.kind.c_str());
    constexpr int64_t kMaxDim = 1 << 24;
    if (v[0] < 1 || v[0] > kMaxDim || v[1] < 1 || v[1] > kMaxDim || v[2] < 1 || v[2] > kMaxDim)
      return error("plan cache: a %s plan of shape %lldx%lldx%lld", r.kind.c_str(), static_cast<long long>(v[0]),
                   static_cast<long long>(v[1]), static_cast<long long>(v[2]));
    const int m = static_cast<int>(v[0]), n = static_cast<int>(v[1]), k = static_cast<int>(v[2]);
    if (gemm) {
      const int64_t align = v[5];
      if (!flag(v[3]) || !flag(v[4]) || !flag(v[6]) || !flag(v[7]) || align < 1 || align > 256 ||
          (align & (align - 1)) || v[8] < 0 || v[8] >= kSkinnyVariants || v[9] < 1 ||
          (v[7] && (v[6] || m > kSkinnyMaxRows)))
        return error("plan cache: an invalid GEMM plan for %dx%dx%d", m, n, k);
      Hint h;
      h.skinny = v[7];
      h.skinny_variant = static_cast<int>(v[8]);
      h.tuned_us = static_cast<float>(v[9]) / 1000.f;
      std::memcpy(&h.algo, r.blob.data(), sizeof(h.algo));
      hints[Key{m, n, k, v[3] != 0, v[4] != 0, static_cast<int>(align), v[6] != 0}] = h;
    } else if (fus) {
      const bool pro_ok = v[3] >= 0 && v[3] <= static_cast<int64_t>(SkinnyPrologue::kSwiGlu);
      const bool epi_ok = v[4] >= 0 && v[4] <= static_cast<int64_t>(SkinnyEpilogue::kAddResidual);
      const bool fmt_ok = v[7] >= 0 && v[7] <= static_cast<int64_t>(WeightFormat::kNib4);
      const int n_var = fmt_ok ? skinny_variants(static_cast<WeightFormat>(v[7])) : 0;
      if (m > kSkinnyMaxRows || !pro_ok || !epi_ok || !flag(v[5]) || !flag(v[6]) || !fmt_ok || v[8] < 0 ||
          v[8] >= n_var || v[9] < 1)
        return error("plan cache: an invalid fused GEMM plan for %dx%dx%d", m, n, k);
      FusedPlan p;
      p.variant = static_cast<int>(v[8]);
      p.tuned_us = static_cast<float>(v[9]) / 1000.f;
      // The tilings that ran, fastest first, each once, then padding only; the variant in use among them.
      std::vector<bool> seen(static_cast<size_t>(n_var), false);
      bool padding = false, ok = true;
      for (int i = 0; i < kMaxSkinnyVariants && ok; ++i) {
        const int64_t ns = v[10 + 2 * i], var = v[11 + 2 * i];
        if (ns == 0 && var == -1) {
          padding = true;
          continue;
        }
        ok = !padding && ns >= 1 && var >= 0 && var < n_var && !seen[static_cast<size_t>(var)] &&
             (p.ranked.empty() || static_cast<float>(ns) / 1000.f >= p.ranked.back().first);
        if (!ok) break;
        seen[static_cast<size_t>(var)] = true;
        p.ranked.emplace_back(static_cast<float>(ns) / 1000.f, static_cast<int>(var));
      }
      if (!ok || p.ranked.empty() || !seen[static_cast<size_t>(p.variant)])
        return error("plan cache: the fused GEMM plan for %dx%dx%d ranks its tilings wrongly", m, n, k);
      fused[FusedKey{m, n, k, static_cast<int>(v[3]), static_cast<int>(v[4]), v[5] != 0, v[6] != 0,
                     static_cast<int>(v[7])}] = p;
    } else {
      if (!flag(v[3]) || v[4] < 1 || (v[5] != static_cast<int64_t>(Fp8Path::kOuterVec) &&
                                      v[5] != static_cast<int64_t>(Fp8Path::kTensorScaled)))
        return error("plan cache: an invalid FP8 GEMM plan for %dx%dx%d", m, n, k);
      Fp8Hint h;
      h.path = static_cast<Fp8Path>(v[5]);
      h.tuned_us = static_cast<float>(v[4]) / 1000.f;
      std::memcpy(&h.algo, r.blob.data(), sizeof(h.algo));
      fp8[Fp8Key{m, n, k, v[3] != 0}] = h;
    }
  }
  hints_ = std::move(hints);
  fp8_hints_ = std::move(fp8);
  for (auto& [key, p] : fused)
    if (fused_plans_.emplace(key, p).second) ++n_from_cache_;
  return Status::ok();
}

namespace {
// Whether cuBLASLt accepts `algo` for the descriptors with this workspace; false after a warning naming the shape.
bool algo_fits(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
               cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t& algo, size_t workspace_bytes, const char* what,
               int m, int n, int k) {
  cublasLtMatmulHeuristicResult_t check{};
  const cublasStatus_t st = cublasLtMatmulAlgoCheck(handle, op, a, b, d, d, &algo, &check);
  if (st == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= workspace_bytes) return true;
  MOPT_LOG_WARN("plan cache: cuBLASLt rejects the cached algorithm of the %s%dx%dx%d GEMM (%s); tuning it", what, m,
                n, k, st != CUBLAS_STATUS_SUCCESS ? cublas_error_string(st).c_str() : "workspace too small");
  return false;
}
}  // namespace

bool Gemm::apply_hint(const Key& key, Plan& plan, bool skinny_ok) {
  const Hint& h = hints_.at(key);
  const auto& [m, n, k, y_f32, bias, align, in_f32] = key;
  if (h.skinny) {
    if (!skinny_ok) {
      MOPT_LOG_WARN("plan cache: the skinny kernel cannot run the %dx%dx%d GEMM here; tuning it", m, n, k);
      return false;
    }
    plan.skinny = true;
    plan.skinny_variant = h.skinny_variant;
  } else {
    if (!algo_fits(handle_, plan.op, plan.a, plan.b, plan.d, h.algo, workspace_bytes_, "", m, n, k)) return false;
    plan.skinny = false;
    plan.algo = h.algo;
  }
  plan.tuned_us = h.tuned_us;
  return true;
}

bool Gemm::apply_fp8_hint(const Fp8Key& key, Fp8Plan& plan) {
  const auto it = fp8_hints_.find(key);
  if (it == fp8_hints_.end()) return false;
  const Fp8Hint& h = it->second;
  const auto& [m, n, k, bias] = key;
  if (h.path != plan.path) {
    MOPT_LOG_WARN("plan cache: the cached FP8 %dx%dx%d GEMM took another way; tuning it", m, n, k);
    return false;
  }
  if (!algo_fits(handle_, plan.op, plan.a, plan.b, plan.d, h.algo, workspace_bytes_, "FP8 ", m, n, k)) return false;
  plan.algo = h.algo;
  plan.tuned_us = h.tuned_us;
  plan.timed = true;
  ++n_from_cache_;
  return true;
}

}  // namespace mopt::cuda
