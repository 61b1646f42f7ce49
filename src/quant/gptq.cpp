// GPTQ on one matrix (gptq.h) and the WeightTransform of `mopt quantize --method gptq` (pipeline.h): the model runs
// one decoder layer at a time over the calibration tokens (calibration.h); each linear layer is quantized by GPTQ
// as the forward pass reaches it, from the Gram matrix of its inputs, and the forward pass goes on through the
// quantized weights. So every linear layer sees inputs computed through the quantized layers before it, those of
// its own decoder layer included ("true sequential" in the GPTQ reference code).
#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>

#include "backend/cpu/kernels.h"
#include "core/strfmt.h"
#include "quant/calibration.h"
#include "quant/convert.h"
#include "quant/pipeline.h"

namespace mopt::quant {

namespace {

constexpr int64_t kLazyBlock = 128;  // columns whose updates of the later columns are batched
constexpr int64_t kRowTile = 16;     // rows updated together (one row of U serves all of them)

GptqObserver g_observer;

// In place: the lower Cholesky factor L of the symmetric positive definite a [n, n] (row-major; lower triangle read
// and written, a = L L^T), column by column: L_jj = sqrt(a_jj - |L[j, :j]|^2), then the rows below,
// L_ij = (a_ij - L[i, :j] . L[j, :j]) / L_jj, split over the pool. False if a pivot is not positive.
bool cholesky_lower(std::vector<double>& a, int64_t n, ThreadPool& pool) {
  for (int64_t j = 0; j < n; ++j) {
    double* rj = a.data() + j * n;
    double s = rj[j];
    for (int64_t k = 0; k < j; ++k) s -= rj[k] * rj[k];
    if (!(s > 0.0)) return false;
    rj[j] = std::sqrt(s);
    const double inv = 1.0 / rj[j];
    auto rows = [&](int64_t b, int64_t e, int) {
      for (int64_t i = j + 1 + b; i < j + 1 + e; ++i) {
        double* ri = a.data() + i * n;
        double t = ri[j];
        for (int64_t k = 0; k < j; ++k) t -= ri[k] * rj[k];
        ri[j] = t * inv;
      }
    };
    if ((n - j - 1) * j > 1 << 16) {
      pool.parallel_for(n - j - 1, rows);
    } else {
      rows(0, n - j - 1, 0);
    }
  }
  return true;
}

// M = L^-1 for the lower triangular L in l's lower triangle, one column at a time (columns are independent: split
// over the pool): M_jj = 1 / L_jj, M_ij = -(L[i, j:i] . M[j:i, j]) / L_ii for i > j. M's strictly lower part is
// stored transposed in l's strictly upper triangle (M_ij at l[j][i]), its diagonal in `diag` [n].
void invert_lower(std::vector<double>& l, int64_t n, std::vector<double>& diag, ThreadPool& pool) {
  diag.resize(static_cast<size_t>(n));
  pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
    std::vector<double> m(static_cast<size_t>(n));  // column j of M, rows j..n-1
    for (int64_t j = b; j < e; ++j) {
      m[static_cast<size_t>(j)] = 1.0 / l[static_cast<size_t>(j * n + j)];
      for (int64_t i = j + 1; i < n; ++i) {
        const double* li = l.data() + i * n;
        double t = 0.0;
        for (int64_t k = j; k < i; ++k) t -= li[k] * m[static_cast<size_t>(k)];
        m[static_cast<size_t>(i)] = t / li[i];
        l[static_cast<size_t>(j * n + i)] = m[static_cast<size_t>(i)];
      }
      diag[static_cast<size_t>(j)] = m[static_cast<size_t>(j)];
    }
  });
}

// u [K, K] (upper triangle) = the upper Cholesky factor of (H + damp I)^-1, H = h with its rows and columns in the
// order `perm` (H[i][j] = h[perm[i]][perm[j]]): GPTQ's "Hinv". With J the reversal of the indices, J H J = L L^T
// (L lower: Cholesky) gives H^-1 = (J L^-1 J)^T (J L^-1 J), J L^-1 J being upper: one factorization and one
// triangular inverse, in fp64. False if not positive definite.
bool inverse_cholesky_upper(const std::vector<float>& h, int64_t K, const std::vector<int64_t>& perm, double damp,
                            std::vector<float>& u, ThreadPool& pool) {
  std::vector<double> a(static_cast<size_t>(K * K));
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j <= i; ++j)
      a[static_cast<size_t>(i * K + j)] =
          h[static_cast<size_t>(perm[static_cast<size_t>(K - 1 - i)] * K + perm[static_cast<size_t>(K - 1 - j)])] +
          (i == j ? damp : 0.0);
  if (!cholesky_lower(a, K, pool)) return false;
  std::vector<double> diag;
  invert_lower(a, K, diag, pool);
  // u[i][j] = M[K-1-i][K-1-j] for j >= i, M's strictly lower part being at a[K-1-j][K-1-i].
  u.assign(static_cast<size_t>(K * K), 0.0f);
  for (int64_t i = 0; i < K; ++i) {
    u[static_cast<size_t>(i * K + i)] = static_cast<float>(diag[static_cast<size_t>(K - 1 - i)]);
    for (int64_t j = i + 1; j < K; ++j)
      u[static_cast<size_t>(i * K + j)] = static_cast<float>(a[static_cast<size_t>((K - 1 - j) * K + (K - 1 - i))]);
  }
  return true;
}

}  // namespace

void set_gptq_observer(GptqObserver f) { g_observer = std::move(f); }

Status gptq_quantize(float* w, int64_t N, int64_t K, std::vector<float> h, WeightGrid& grid, const GptqOptions& o,
                     ThreadPool& pool) {
  // Inputs that are always 0 carry no information: their weights are set to 0 and H made regular there.
  double diag_mean = 0.0;
  for (int64_t k = 0; k < K; ++k) {
    float& d = h[static_cast<size_t>(k * K + k)];
    if (d == 0.0f) {
      d = 1.0f;
      for (int64_t n = 0; n < N; ++n) w[n * K + k] = 0.0f;
    }
    diag_mean += d / static_cast<double>(K);
  }
  // The column order: as stored, or by decreasing H diagonal (act-order; ties in stored order).
  std::vector<int64_t> perm(static_cast<size_t>(K));
  std::iota(perm.begin(), perm.end(), 0);
  if (o.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
      return h[static_cast<size_t>(a * K + a)] > h[static_cast<size_t>(b * K + b)];
    });
  std::vector<float> u;  // [K, K] upper
  double damp = o.damp * diag_mean;
  for (int tries = 0; !inverse_cholesky_upper(h, K, perm, damp, u, pool); ++tries) {
    if (tries == 3)
      return error("GPTQ: the inputs' Gram matrix [%lld, %lld] is not positive definite even with %.3g x its mean "
                   "diagonal added; give more (or more varied) calibration text", (long long)K, (long long)K,
                   damp / diag_mean);
    damp *= 10.0;
  }
  h = {};
  // Static group scales (act-order, and INT8's one scale per row) from the weights before any update.
  const int64_t g = grid.group();
  const bool static_groups = o.act_order || g == K;
  if (static_groups)
    pool.parallel_for(N, [&](int64_t b, int64_t e, int) {
      for (int64_t n = b; n < e; ++n)
        for (int64_t k0 = 0; k0 < K; k0 += g) grid.set_scale(n, k0, w + n * K + k0);
    });
  // wp [N, K]: the weights with their columns in processing order.
  std::vector<float> wp(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < K; ++i) wp[static_cast<size_t>(n * K + i)] = w[n * K + perm[static_cast<size_t>(i)]];

  const int64_t tiles = (N + kRowTile - 1) / kRowTile;
  pool.parallel_for(tiles, [&](int64_t tb, int64_t te, int) {
    std::vector<float> err(static_cast<size_t>(kRowTile * kLazyBlock));  // [rows of the tile, columns of the block]
    for (int64_t tile = tb; tile < te; ++tile) {
      const int64_t n0 = tile * kRowTile, nr = std::min(kRowTile, N - n0);
      for (int64_t i1 = 0; i1 < K; i1 += kLazyBlock) {
        const int64_t i2 = std::min(i1 + kLazyBlock, K);
        // The block's columns one at a time: round, then spread the error over the block's later columns.
        for (int64_t i = i1; i < i2; ++i) {
          const float* ui = u.data() + i * K;
          for (int64_t r = 0; r < nr; ++r) {
            float* wr = wp.data() + (n0 + r) * K;
            if (!static_groups && i % g == 0) grid.set_scale(n0 + r, i, wr + i);
            const float q = grid.round(n0 + r, perm[static_cast<size_t>(i)], wr[i]);
            const float e = (wr[i] - q) / ui[i];
            wr[i] = q;
            err[static_cast<size_t>(r * kLazyBlock + (i - i1))] = e;
            for (int64_t j = i + 1; j < i2; ++j) wr[j] -= e * ui[j];
          }
        }
        // The deferred updates of the columns after the block: W[:, i2:] -= E U[i1:i2, i2:].
        for (int64_t i = i1; i < i2; ++i) {
          const float* ui = u.data() + i * K;
          for (int64_t r = 0; r < nr; ++r) {
            float* wr = wp.data() + (n0 + r) * K;
            const float e = err[static_cast<size_t>(r * kLazyBlock + (i - i1))];
            for (int64_t j = i2; j < K; ++j) wr[j] -= e * ui[j];
          }
        }
      }
    }
  });
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < K; ++i) w[n * K + perm[static_cast<size_t>(i)]] = wp[static_cast<size_t>(n * K + i)];
  return Status::ok();
}

namespace {

// The transform of --method gptq: begin_layer(l) runs decoder layer l over the calibration tokens and quantizes each
// of its linear layers as the forward pass reaches it; the writer then takes their bytes from encoded().
class Gptq : public WeightTransform {
 public:
  Gptq(const Model& m, std::vector<std::vector<int32_t>> seqs, ThreadPool& pool, GptqTypeFn type_of,
       DType row_scale_type, GptqOptions opt)
      : m_(m), pool_(pool), fwd_(m, std::move(seqs), pool), type_of_(std::move(type_of)),
        row_scale_type_(row_scale_type), opt_(opt) {}

  Status begin_layer(int l) override {
    if (l != next_layer_)
      return error("GPTQ: the writer reached layer %d where layer %d was expected (tensors out of layer order)", l,
                   next_layer_);
    ++next_layer_;
    encoded_.clear(), views_.clear();
    gram_x_ = nullptr;
    Status st = Status::ok();
    fwd_.run_layer(l, [&](const std::string& name, const float* x, int64_t T, int64_t K) -> const TensorView* {
      if (!st.is_ok()) return nullptr;
      Result<const TensorView*> v = quantize(name, x, T, K);
      if (!v) st = v.status();
      return v ? *v : nullptr;
    });
    return st;
  }

  void apply(const std::string&, float*, int64_t, int64_t) override {}  // GPTQ changes no float tensor

  const std::vector<uint8_t>* encoded(const std::string& name) const override {
    auto it = encoded_.find(name);
    return it == encoded_.end() ? nullptr : &it->second;
  }

 private:
  // GPTQ of linear `name` [N, K] on its inputs x [T, K]: its bytes kept for the writer, and a view of them for the
  // rest of the forward pass. nullptr (the model's weights, converted by the writer) where the type written is no
  // GPTQ format (a GGUF fallback to F16 for rows that fit no block).
  Result<const TensorView*> quantize(const std::string& name, const float* x, int64_t T, int64_t K) {
    const TensorView& t = *m_.find(name);
    const int64_t N = t.rows();
    const DType type = type_of_(name, K);
    if (!WeightGrid::supports(type)) return static_cast<const TensorView*>(nullptr);
    if (x != gram_x_) {  // the linear layers that share an input share its Gram matrix [K, K]
      gram_.resize(static_cast<size_t>(K * K));
      column_gram(x, T, K, 0, K, nullptr, gram_.data(), packed_, pool_);
      gram_x_ = x;
    }
    std::vector<float> w = to_f32(t, pool_);
    WeightGrid grid(type, N, K, row_scale_type_);
    if (Status s = gptq_quantize(w.data(), N, K, gram_, grid, opt_, pool_); !s.is_ok())
      return s.with_context(name);
    if (g_observer) g_observer(name, w.data(), N, K);
    const std::vector<uint8_t>& bytes = encoded_[name] = std::move(grid.bytes());
    TensorView& v = views_[name];
    v = t;
    v.dtype = type, v.data = bytes.data(), v.nbytes = bytes.size();
    return &v;
  }

  const Model& m_;
  ThreadPool& pool_;
  CalibrationForward fwd_;
  GptqTypeFn type_of_;
  DType row_scale_type_;
  GptqOptions opt_;
  int next_layer_ = 0;
  std::map<std::string, std::vector<uint8_t>> encoded_;  // this layer's linears in their written types
  std::map<std::string, TensorView> views_;              // the same as tensors for the forward pass
  const float* gram_x_ = nullptr;                        // the input whose Gram matrix gram_ holds
  std::vector<float> gram_;                              // [K, K]
  cpu::PackedF32 packed_;                                // column_gram()'s storage, reused
};

}  // namespace

Result<std::unique_ptr<WeightTransform>> make_gptq(const Model& m, const QuantizeOptions& o, ThreadPool& pool,
                                                   GptqTypeFn type_of, DType row_scale_type) {
  const int max_tokens = o.calib_tokens > 0 ? o.calib_tokens : kCalibMaxTokens;
  MOPT_ASSIGN_OR_RETURN(auto seqs, calibration_sequences_of(m, o.calib_path, "GPTQ", max_tokens));
  GptqOptions opt;
  opt.act_order = o.act_order;
  if (o.damp > 0) opt.damp = o.damp;
  return std::unique_ptr<WeightTransform>(
      new Gptq(m, std::move(seqs), pool, std::move(type_of), row_scale_type, opt));
}

}  // namespace mopt::quant
