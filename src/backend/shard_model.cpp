#include "backend/shard_model.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "model/arch.h"

namespace mopt {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;  // [begin, end) pairs, in order

// Adjacent ranges merged: [a, b) [b, c) -> [a, c).
Ranges merged(const Ranges& in) {
  Ranges out;
  for (const auto& r : in) {
    if (!out.empty() && out.back().second == r.first) out.back().second = r.second;
    else out.push_back(r);
  }
  return out;
}

int64_t total(const Ranges& rs) {
  int64_t n = 0;
  for (const auto& [b, e] : rs) n += e - b;
  return n;
}

// The rows `rs` of a 2-D matrix: a view when they are one range, else a copy owned by `m`.
TensorView take_rows(const TensorView& t, const Ranges& in, Model& m) {
  const Ranges rs = merged(in);
  const uint64_t rb = *row_bytes(t.dtype, static_cast<uint64_t>(t.ne[0]));
  TensorView v = t;
  v.ne[1] = total(rs);
  v.nbytes = rb * static_cast<uint64_t>(v.ne[1]);
  const uint8_t* src = static_cast<const uint8_t*>(t.data);
  if (rs.size() == 1) {
    v.data = src + rb * static_cast<uint64_t>(rs[0].first);
    return v;
  }
  std::vector<uint8_t> buf(v.nbytes);
  uint64_t at = 0;
  for (const auto& [b, e] : rs) {
    std::memcpy(buf.data() + at, src + rb * static_cast<uint64_t>(b), rb * static_cast<uint64_t>(e - b));
    at += rb * static_cast<uint64_t>(e - b);
  }
  m.owned_buffers.push_back(std::move(buf));
  v.data = m.owned_buffers.back().data();
  return v;
}

// The columns (elements along ne[0]) `rs` of every row, copied into `m`; each range on the format's block
// boundaries.
Result<TensorView> take_cols(const TensorView& t, const Ranges& in, Model& m) {
  const Ranges rs = merged(in);
  const int blk = dtype_traits(t.dtype).block_elems;
  for (const auto& [b, e] : rs)
    if (b % blk != 0 || e % blk != 0)
      return error("tensor %s is %s, whose %d-element blocks the tensor-parallel split at columns [%lld, %lld) "
                   "would cut: use a --tensor-parallel-size that splits the heads / MLP on block boundaries, or an "
                   "unquantized model", t.name.c_str(), dtype_name(t.dtype), blk, static_cast<long long>(b),
                   static_cast<long long>(e));
  const uint64_t rb = *row_bytes(t.dtype, static_cast<uint64_t>(t.ne[0]));
  const uint64_t bpb = static_cast<uint64_t>(dtype_traits(t.dtype).block_bytes);
  TensorView v = t;
  v.ne[0] = total(rs);
  const uint64_t nrb = *row_bytes(t.dtype, static_cast<uint64_t>(v.ne[0]));
  v.nbytes = nrb * static_cast<uint64_t>(t.rows());
  std::vector<uint8_t> buf(v.nbytes);
  const uint8_t* src = static_cast<const uint8_t*>(t.data);
  for (int64_t r = 0; r < t.rows(); ++r) {
    uint64_t at = nrb * static_cast<uint64_t>(r);
    for (const auto& [b, e] : rs) {
      const uint64_t n = static_cast<uint64_t>(e - b) / blk * bpb;
      std::memcpy(buf.data() + at, src + rb * static_cast<uint64_t>(r) + static_cast<uint64_t>(b) / blk * bpb, n);
      at += n;
    }
  }
  m.owned_buffers.push_back(std::move(buf));
  v.data = m.owned_buffers.back().data();
  return v;
}

// "blk.N.attn_q.weight" -> "attn_q.weight"; "" for tensors outside the layers.
std::string layer_suffix(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return "";
  const size_t dot = name.find('.', 4);
  return dot == std::string::npos ? "" : name.substr(dot + 1);
}

}  // namespace

int shard_ff_unit(const Model& src) {
  int unit = 1;
  for (const TensorView& t : src.tensors)
    if (layer_suffix(t.name) == "ffn_down.weight") unit = std::max(unit, dtype_traits(t.dtype).block_elems);
  return unit;
}

Result<std::unique_ptr<Model>> shard_model(const Model& src, const ShardPlan& plan, int rank) {
  const ModelConfig& c = src.config;
  const ShardRank& r = plan.ranks[static_cast<size_t>(rank)];
  const int64_t hd = c.head_dim;
  auto m = std::make_unique<Model>();
  m->format = src.format;
  m->path = src.path;
  m->config = plan.rank_config(c, rank);
  const Ranges q_rows{{r.head_begin * hd, (r.head_begin + r.n_head) * hd}};
  Ranges kv_rows;
  for (int kv : r.kv_heads) kv_rows.push_back({kv * hd, (kv + 1) * hd});
  const Ranges ff{{r.ff_begin, r.ff_begin + r.n_ff}};
  const Ranges vocab{{r.vocab_begin, r.vocab_begin + r.n_vocab}};
  for (const TensorView& t : src.tensors) {
    const std::string s = layer_suffix(t.name);
    TensorView v = t;
    if (t.name == "token_embd.weight" || t.name == "output.weight") {
      v = take_rows(t, vocab, *m);
    } else if (s == "attn_q.weight") {
      v = take_rows(t, q_rows, *m);
    } else if (s == "attn_k.weight" || s == "attn_v.weight") {
      v = take_rows(t, kv_rows, *m);
    } else if (s == "attn_q.bias") {
      MOPT_ASSIGN_OR_RETURN(v, take_cols(t, q_rows, *m));
    } else if (s == "attn_k.bias" || s == "attn_v.bias") {
      MOPT_ASSIGN_OR_RETURN(v, take_cols(t, kv_rows, *m));
    } else if (s == "attn_output.weight") {
      MOPT_ASSIGN_OR_RETURN(v, take_cols(t, q_rows, *m));
    } else if (s == "ffn_gate.weight" || s == "ffn_up.weight") {
      v = take_rows(t, ff, *m);
    } else if (s == "ffn_down.weight") {
      MOPT_ASSIGN_OR_RETURN(v, take_cols(t, ff, *m));
    } else if (s != "attn_norm.weight" && s != "ffn_norm.weight" && s != "attn_q_norm.weight" &&
               s != "attn_k_norm.weight" && t.name != "output_norm.weight") {
      return error("tensor %s has no tensor-parallel split: use --tensor-parallel-size 1", t.name.c_str());
    }
    m->tensors.push_back(v);
  }
  MOPT_TRY(finalize_model(*m).with_context("tensor-parallel shard " + std::to_string(rank)));
  return m;
}

}  // namespace mopt
