// FakeRunner: a deterministic ModelRunner for engine tests that honours the paged-KV contract.
//
// Its "KV cache" stores, per slot, the token id and position written there. forward() validates the batch
// (shapes, consecutive positions, slot_mapping == block_tables), writes each sequence's tokens at their slots,
// and computes each requested output's logits from the whole context READ BACK THROUGH THE BLOCK TABLE (a hash
// of the context tokens picks the argmax). Any paging, prefix-cache or swap bug therefore changes the outputs or
// fails the forward with a message. reference_next() computes the same function without any cache: the
// independent oracle the tests compare against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/runner.h"
#include "core/status.h"
#include "core/strfmt.h"

namespace mopt::test {

inline uint64_t fnv1a(std::span<const int32_t> toks) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : toks) {
    h ^= static_cast<uint32_t>(t);
    h *= 1099511628211ull;
  }
  return h;
}
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Logits of the next token after `context`: a clear argmax at hash % n_vocab, pseudo-random values elsewhere.
inline void fake_logits(std::span<const int32_t> context, int n_vocab, float* out) {
  const uint64_t h = fnv1a(context);
  for (int v = 0; v < n_vocab; ++v)
    out[v] = static_cast<float>(mix64(h + static_cast<uint64_t>(v) * 0x9e3779b97f4a7c15ull) >> 40) / 16777216.0f * 2 - 1;
  out[h % static_cast<uint64_t>(n_vocab)] = 4.0f;
}
inline int32_t reference_next(std::span<const int32_t> context, int n_vocab) {
  return static_cast<int32_t>(fnv1a(context) % static_cast<uint64_t>(n_vocab));
}

// Greedy reference generation: stops after max_tokens or at eos (included), like the engine with default params.
inline std::vector<int32_t> reference_generate(std::vector<int32_t> ctx, int max_tokens, int n_vocab, int32_t eos) {
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    int32_t t = reference_next(ctx, n_vocab);
    out.push_back(t);
    ctx.push_back(t);
    if (t == eos) break;
  }
  return out;
}

// The fake "device sampler": greedy (lowest id on ties) when temperature <= 0 or top_k == 1, else a draw from
// softmax(logits / T) restricted to the top-k ids (ties kept), the smallest top-p nucleus and min-p, with
// u = mix64(seed): a pure function of (logits, settings, seed) like the CUDA sampler (not the same function).
inline int32_t fake_device_sample(std::span<const float> logits, const RowSampling& rs) {
  const int n = static_cast<int>(logits.size());
  const int best = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (rs.temperature <= 0 || rs.top_k == 1) return best;
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(static_cast<size_t>(n));  // [n] probabilities in `order`
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += p[static_cast<size_t>(i)] = std::exp((logits[order[i]] - logits[best]) / rs.temperature);
  int keep = rs.top_k > 0 ? std::min(rs.top_k, n) : n;
  for (int i = 1; i < keep; ++i)  // min-p: p_i >= min_p * p_max
    if (p[static_cast<size_t>(i)] < rs.min_p * p[0]) {
      keep = i;
      break;
    }
  while (keep > 1 && p[static_cast<size_t>(keep - 1)] == 0) --keep;  // masked-out ids (-inf) are never drawn
  double mass = 0;
  for (int i = 0; i < keep; ++i) {  // top-p: the smallest prefix holding top_p of the mass
    mass += p[static_cast<size_t>(i)] / sum;
    if (mass >= rs.top_p) {
      keep = i + 1;
      break;
    }
  }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += p[static_cast<size_t>(i)];
  double u = static_cast<double>(mix64(rs.seed) >> 11) * 0x1.0p-53 * kept;
  for (int i = 0; i < keep; ++i) {
    u -= p[static_cast<size_t>(i)];
    if (u < 0) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(keep - 1)];
}

class FakeRunner : public ModelRunner {
 public:
  explicit FakeRunner(int n_vocab = 64, int context_length = 4096, uint64_t kv_memory = 1 << 20) : kv_memory_(kv_memory) {
    cfg_.name = "fake";
    cfg_.n_vocab = n_vocab;
    cfg_.context_length = context_length;
  }
  DeviceKind device() const override { return DeviceKind::kCpu; }
  const ModelConfig& config() const override { return cfg_; }
  uint64_t kv_block_bytes(int block_size) const override { return 8ull * static_cast<uint64_t>(block_size); }
  uint64_t available_kv_memory(double util) const override { return static_cast<uint64_t>(kv_memory_ * util); }

  Status init_kv_cache(int n_blocks, int block_size, int n_swap_blocks) override {
    if (initialized_) return error("init_kv_cache called twice");
    initialized_ = true;
    n_blocks_ = n_blocks;
    bs_ = block_size;
    n_swap_ = n_swap_blocks;
    cache_tok_.assign(static_cast<size_t>(n_blocks) * block_size, -1);  // [n_blocks * block_size]
    cache_pos_.assign(cache_tok_.size(), -1);                            // [n_blocks * block_size]
    swap_tok_.assign(static_cast<size_t>(n_swap_blocks) * block_size, -1);
    swap_pos_.assign(swap_tok_.size(), -1);
    return Status::ok();
  }

  Status forward(const ForwardBatch& b, float* logits) override {
    ++forward_calls;
    if (fail_at_call > 0 && forward_calls == fail_at_call) return error("injected forward failure");
    const int n_seqs = b.n_seqs();
    if (b.n_tokens() < 1 || n_seqs < 1) return error("empty batch");
    if (static_cast<int>(b.positions.size()) != b.n_tokens() || static_cast<int>(b.slot_mapping.size()) != b.n_tokens())
      return error("positions/slot_mapping size mismatch");
    if (static_cast<int>(b.query_start.size()) != n_seqs + 1 || b.query_start[0] != 0 ||
        b.query_start[static_cast<size_t>(n_seqs)] != b.n_tokens())
      return error("bad query_start");
    if (static_cast<int64_t>(b.block_tables.size()) != int64_t{n_seqs} * b.max_blocks_per_seq)
      return error("bad block_tables size");
    max_seqs_seen = std::max(max_seqs_seen, n_seqs);
    max_tokens_seen = std::max(max_tokens_seen, b.n_tokens());
    total_tokens += static_cast<uint64_t>(b.n_tokens());
    int out_row = 0;
    for (int s = 0; s < n_seqs; ++s) {
      const int q0 = b.query_start[static_cast<size_t>(s)], q1 = b.query_start[static_cast<size_t>(s) + 1];
      if (q1 <= q0) return error("sequence %d has no tokens", s);
      const std::span<const int32_t> bt = b.block_tables.subspan(static_cast<size_t>(s) * b.max_blocks_per_seq,
                                                                  static_cast<size_t>(b.max_blocks_per_seq));
      auto slot_of = [&](int pos) -> int64_t {
        const int bi = pos / bs_;
        if (bi >= b.max_blocks_per_seq) return -1;
        const int32_t blk = bt[static_cast<size_t>(bi)];
        if (blk < 0 || blk >= n_blocks_) return -1;
        return int64_t{blk} * bs_ + pos % bs_;
      };
      if (b.positions[static_cast<size_t>(q1 - 1)] != b.seq_lens[static_cast<size_t>(s)] - 1)
        return error("sequence %d: last position %d but seq_len %d", s, b.positions[static_cast<size_t>(q1 - 1)],
                     b.seq_lens[static_cast<size_t>(s)]);
      for (int j = q0; j < q1; ++j) {
        const int pos = b.positions[static_cast<size_t>(j)];
        if (j > q0 && pos != b.positions[static_cast<size_t>(j) - 1] + 1) return error("non-consecutive positions");
        const int64_t slot = slot_of(pos);
        if (slot < 0 || slot != b.slot_mapping[static_cast<size_t>(j)])
          return error("token %d (pos %d): slot_mapping %d disagrees with the block table", j, pos,
                       b.slot_mapping[static_cast<size_t>(j)]);
        cache_tok_[static_cast<size_t>(slot)] = b.tokens[static_cast<size_t>(j)];
        cache_pos_[static_cast<size_t>(slot)] = pos;
      }
      // Outputs of this sequence: read the context back through the block table.
      while (out_row < b.n_out() && b.logits_indices[static_cast<size_t>(out_row)] < q1) {
        const int j = b.logits_indices[static_cast<size_t>(out_row)];
        if (j < q0) return error("logits index %d out of order", j);
        const int pos = b.positions[static_cast<size_t>(j)];
        std::vector<int32_t> ctx(static_cast<size_t>(pos) + 1);
        for (int p = 0; p <= pos; ++p) {
          const int64_t slot = slot_of(p);
          if (slot < 0) return error("position %d is outside the block table", p);
          if (cache_pos_[static_cast<size_t>(slot)] != p)
            return error("seq %d: cache slot %lld holds position %d, expected %d (stale or overwritten block)", s,
                         static_cast<long long>(slot), cache_pos_[static_cast<size_t>(slot)], p);
          ctx[static_cast<size_t>(p)] = cache_tok_[static_cast<size_t>(slot)];
        }
        fake_logits(ctx, cfg_.n_vocab, logits + static_cast<size_t>(out_row) * cfg_.n_vocab);
        ++out_row;
      }
    }
    if (out_row != b.n_out()) return error("logits indices not covered");
    return Status::ok();
  }

  // Device sampling (when device_sampling is set): the same forward, then each row is sampled "on the device"
  // by fake_device_sample() from its settings; the logits stay available to sampled_logits() until the next call.
  bool can_sample() const override { return device_sampling; }
  // With device_masks: token masks (RowSampling::allowed) are applied before the fake device sampler; else refused.
  bool can_sample_masked() const override { return device_sampling && device_masks; }
  // max_sample_rows(): 0 = the engine's max_num_seqs; forward_sample refuses more rows (as the CUDA runner does).
  int max_sample_rows() const override { return sample_rows_limit; }
  Status forward_sample(const ForwardBatch& b, std::span<const RowSampling> params, int32_t* tokens) override {
    if (!device_sampling) return error("FakeRunner: device sampling is off");
    if (sample_rows_limit > 0 && b.n_out() > sample_rows_limit)
      return error("forward_sample: %d rows, at most %d", b.n_out(), sample_rows_limit);
    max_sample_rows_seen = std::max(max_sample_rows_seen, b.n_out());
    if (!params.empty() && static_cast<int>(params.size()) != b.n_out())
      return error("forward_sample: %zu settings for %d rows", params.size(), b.n_out());
    last_sample_rows_ = -1;
    device_logits_.resize(static_cast<size_t>(b.n_out()) * cfg_.n_vocab);
    MOPT_TRY(forward(b, device_logits_.data()));
    ++forward_sample_calls;
    sample_rows_total += static_cast<uint64_t>(b.n_out());
    for (int i = 0; i < b.n_out(); ++i) {
      const RowSampling rs = params.empty() ? RowSampling{} : params[static_cast<size_t>(i)];
      std::span<const float> row =
          std::span<const float>(device_logits_).subspan(static_cast<size_t>(i) * cfg_.n_vocab, cfg_.n_vocab);
      if (!rs.allowed.empty()) {
        if (!device_masks) return error("FakeRunner: a token mask without device_masks");
        if (rs.allowed.size() != static_cast<size_t>((cfg_.n_vocab + 63) / 64)) return error("FakeRunner: mask size");
        masked_row_.assign(row.begin(), row.end());
        for (int t = 0; t < cfg_.n_vocab; ++t)
          if (!((rs.allowed[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1)) masked_row_[static_cast<size_t>(t)] = -INFINITY;
        row = masked_row_;
        ++masked_rows_sampled;
      }
      tokens[i] = fake_device_sample(row, rs);
      if (bad_token_at_call > 0 && forward_calls == bad_token_at_call) tokens[i] = cfg_.n_vocab + 5;
    }
    last_sample_rows_ = b.n_out();
    return Status::ok();
  }
  Status sampled_logits(std::span<const int32_t> rows, float* logits) override {
    if (last_sample_rows_ < 0) return error("sampled_logits without a successful forward_sample before it");
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] < 0 || rows[i] >= last_sample_rows_) return error("sampled_logits: row %d out of range", rows[i]);
      if (i > 0 && rows[i] <= rows[i - 1]) return error("sampled_logits: rows not increasing");
      std::copy_n(device_logits_.data() + static_cast<size_t>(rows[i]) * cfg_.n_vocab, cfg_.n_vocab,
                  logits + i * static_cast<size_t>(cfg_.n_vocab));
    }
    host_rows_fetched += rows.size();
    last_sample_rows_ = -1;  // one fetch per step
    return Status::ok();
  }

  Status swap_out(std::span<const std::pair<int32_t, int32_t>> d2h) override {
    for (auto [d, h] : d2h) MOPT_TRY(copy(d, h, true));
    swapped_out_blocks += d2h.size();
    return Status::ok();
  }
  Status swap_in(std::span<const std::pair<int32_t, int32_t>> h2d) override {
    for (auto [h, d] : h2d) MOPT_TRY(copy(d, h, false));
    swapped_in_blocks += h2d.size();
    return Status::ok();
  }

  bool device_sampling = false;  // can_sample()
  int sample_rows_limit = 0;     // max_sample_rows()
  int max_sample_rows_seen = 0;  // most rows of one forward_sample() call
  bool device_masks = false;     // can_sample_masked() (with device_sampling)
  uint64_t masked_rows_sampled = 0;  // forward_sample rows drawn under a token mask
  int forward_calls = 0;
  int fail_at_call = 0;       // >0: that forward() call fails
  int bad_token_at_call = 0;  // >0: forward_sample() of that forward call returns out-of-vocabulary ids
  int forward_sample_calls = 0;
  uint64_t sample_rows_total = 0;  // output rows of all forward_sample() calls
  uint64_t host_rows_fetched = 0;  // of which handed out by sampled_logits() (the rest were device-sampled)
  int max_seqs_seen = 0, max_tokens_seen = 0;
  uint64_t total_tokens = 0, swapped_out_blocks = 0, swapped_in_blocks = 0;
  int n_blocks() const { return n_blocks_; }

 private:
  Status copy(int32_t dev, int32_t host, bool to_host) {
    if (dev < 0 || dev >= n_blocks_ || host < 0 || host >= n_swap_) return error("swap block out of range");
    const size_t d0 = static_cast<size_t>(dev) * bs_, h0 = static_cast<size_t>(host) * bs_;
    for (int i = 0; i < bs_; ++i) {
      if (to_host) {
        swap_tok_[h0 + i] = cache_tok_[d0 + i];
        swap_pos_[h0 + i] = cache_pos_[d0 + i];
      } else {
        cache_tok_[d0 + i] = swap_tok_[h0 + i];
        cache_pos_[d0 + i] = swap_pos_[h0 + i];
      }
    }
    return Status::ok();
  }

  ModelConfig cfg_;
  uint64_t kv_memory_;
  bool initialized_ = false;
  int n_blocks_ = 0, bs_ = 0, n_swap_ = 0;
  std::vector<int32_t> cache_tok_, cache_pos_;  // [n_blocks * block_size]
  std::vector<int32_t> swap_tok_, swap_pos_;    // [n_swap_blocks * block_size]
  std::vector<float> device_logits_;            // [n_out, n_vocab] of the last forward_sample
  std::vector<float> masked_row_;               // [n_vocab] a masked row's logits (-inf where disallowed)
  int last_sample_rows_ = -1;
};

}  // namespace mopt::test
