#include "model/hf_experts.h"

#include <cstring>
#include <map>
#include <set>
#include <string>

#include "core/strfmt.h"

namespace mopt {

namespace {

constexpr const char* kCanonical[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};

// Per-expert suffixes after "model.layers.N.": Qwen names, then Mixtral's.
std::string per_expert_name(bool mixtral, int layer, int e, int kind) {
  static constexpr const char* kQwen[3] = {"gate_proj", "up_proj", "down_proj"};
  static constexpr const char* kMixtral[3] = {"w1", "w3", "w2"};
  return mixtral ? strfmt("model.layers.%d.block_sparse_moe.experts.%d.%s.weight", layer, e, kMixtral[kind])
                 : strfmt("model.layers.%d.mlp.experts.%d.%s.weight", layer, e, kQwen[kind]);
}

class Assembler {
 public:
  Assembler(const ModelConfig& c, std::vector<TensorView>& tensors, std::vector<std::vector<uint8_t>>& owned)
      : c_(c), tensors_(tensors), owned_(owned) {
    for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  }

  Status run() {
    for (int l = c_.n_layer_dense_lead; l < c_.n_layer; ++l) MOPT_TRY(layer(l));  // DeepSeek-V2: dense first
    MOPT_TRY(check_leftovers());
    std::vector<TensorView> kept;
    for (size_t i = 0; i < tensors_.size(); ++i)
      if (!used_.count(i)) kept.push_back(std::move(tensors_[i]));
    for (TensorView& t : out_) kept.push_back(std::move(t));
    tensors_ = std::move(kept);
    return Status::ok();
  }

 private:
  const TensorView* find(const std::string& name, size_t* at = nullptr) const {
    auto it = index_.find(name);
    if (it == index_.end()) return nullptr;
    if (at) *at = it->second;
    return &tensors_[it->second];
  }

  // A new canonical tensor [ne0, ne1, n_expert] of dtype t in a fresh buffer of `bytes`.
  TensorView& add(int layer, int kind, DType t, int64_t ne0, int64_t ne1, uint8_t** buf, uint64_t bytes) {
    owned_.emplace_back(static_cast<size_t>(bytes));
    *buf = owned_.back().data();
    TensorView v;
    v.name = strfmt("blk.%d.%s", layer, kCanonical[kind]);
    v.dtype = t;
    v.n_dims = 3;
    v.ne = {ne0, ne1, c_.n_expert, 1};
    v.data = *buf;
    v.nbytes = bytes;
    out_.push_back(std::move(v));
    return out_.back();
  }

  Status check_weight(const TensorView& t) const {
    if (!dtype_traits(t.dtype).weight)
      return error("tensor %s is %s, which is no weight type", t.name.c_str(), dtype_name(t.dtype));
    return Status::ok();
  }

  Status layer(int l) {
    const int64_t H = c_.n_embd, I = c_.n_ff_exp, E = c_.n_expert;
    const std::string p = strfmt("model.layers.%d.mlp.", l);
    size_t at = 0;
    if (const TensorView* sg = find(p + "shared_expert_gate.weight"); sg && sg->n_dims == 2 && sg->ne[1] == 1)
      tensors_[index_[p + "shared_expert_gate.weight"]].n_dims = 1;  // [1, H] -> [H]
    const TensorView* gu = find(p + "experts.gate_up_proj", &at);
    if (!gu) gu = find(p + "experts.gate_up_proj.weight", &at);
    if (gu) {
      MOPT_TRY(check_weight(*gu));
      if (gu->n_dims != 3 || gu->ne[0] != H || gu->ne[1] != 2 * I || gu->ne[2] != E)
        return error("tensor %s has shape %s (ne order), expected [%lld, %lld, %lld]: [experts, 2 x "
                     "moe_intermediate_size, hidden_size] in PyTorch order", gu->name.c_str(), gu->shape_str().c_str(),
                     (long long)H, (long long)(2 * I), (long long)E);
      used_.insert(at);
      const uint64_t half = *row_bytes(gu->dtype, static_cast<uint64_t>(H)) * static_cast<uint64_t>(I);
      uint8_t *g = nullptr, *u = nullptr;
      add(l, 0, gu->dtype, H, I, &g, half * E);
      add(l, 1, gu->dtype, H, I, &u, half * E);
      const uint8_t* src = static_cast<const uint8_t*>(gu->data);
      for (int64_t e = 0; e < E; ++e) {
        std::memcpy(g + e * half, src + 2 * e * half, half);
        std::memcpy(u + e * half, src + (2 * e + 1) * half, half);
      }
      const TensorView* dn = find(p + "experts.down_proj", &at);
      if (!dn) dn = find(p + "experts.down_proj.weight", &at);
      if (!dn) return error("%s has no matching %sexperts.down_proj", gu->name.c_str(), p.c_str());
      MOPT_TRY(check_weight(*dn));
      if (dn->n_dims != 3 || dn->ne[0] != I || dn->ne[1] != H || dn->ne[2] != E)
        return error("tensor %s has shape %s (ne order), expected [%lld, %lld, %lld]: [experts, hidden_size, "
                     "moe_intermediate_size] in PyTorch order", dn->name.c_str(), dn->shape_str().c_str(),
                     (long long)I, (long long)H, (long long)E);
      used_.insert(at);
      TensorView v = *dn;
      v.name = strfmt("blk.%d.%s", l, kCanonical[2]);
      out_.push_back(std::move(v));
      return Status::ok();
    }
    const bool mixtral = c_.arch == Arch::kMixtral && find(per_expert_name(true, l, 0, 0));
    if (!find(per_expert_name(mixtral, l, 0, 0)))
      return error("layer %d has no expert weights: expected %s (per expert) or %sexperts.gate_up_proj (fused)", l,
                   per_expert_name(c_.arch == Arch::kMixtral, l, 0, 0).c_str(), p.c_str());
    for (int kind = 0; kind < 3; ++kind) {
      const int64_t ne0 = kind == 2 ? I : H, ne1 = kind == 2 ? H : I;
      uint8_t* buf = nullptr;
      uint64_t each = 0;
      for (int64_t e = 0; e < E; ++e) {
        const std::string name = per_expert_name(mixtral, l, static_cast<int>(e), kind);
        const TensorView* t = find(name, &at);
        if (!t) return error("missing tensor %s (the config has %lld experts)", name.c_str(), (long long)E);
        MOPT_TRY(check_weight(*t));
        if (t->n_dims != 2 || t->ne[0] != ne0 || t->ne[1] != ne1)
          return error("tensor %s has shape %s, expected [%lld, %lld] (ne order)", name.c_str(),
                       t->shape_str().c_str(), (long long)ne0, (long long)ne1);
        if (e == 0) {
          each = t->nbytes;
          add(l, kind, t->dtype, ne0, ne1, &buf, each * static_cast<uint64_t>(E));
        } else if (t->dtype != out_.back().dtype || t->nbytes != each) {
          return error("tensor %s is %s, expert 0 of the layer is %s: experts of a layer must share one dtype",
                       name.c_str(), dtype_name(t->dtype), dtype_name(out_.back().dtype));
        }
        std::memcpy(buf + e * each, t->data, each);
        used_.insert(at);
      }
    }
    return Status::ok();
  }

  // Expert tensors the loop did not take: indices beyond the expert count, or a second layout.
  Status check_leftovers() const {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const std::string& n = tensors_[i].name;
      if (used_.count(i)) continue;
      if (n.find(".experts.") != std::string::npos && n.find("shared_expert") == std::string::npos)
        return error("tensor %s is not used: the config has %d experts and %d layers (or the checkpoint holds two "
                     "layouts of the same experts)", n.c_str(), c_.n_expert, c_.n_layer);
    }
    return Status::ok();
  }

  const ModelConfig& c_;
  std::vector<TensorView>& tensors_;
  std::vector<std::vector<uint8_t>>& owned_;
  std::map<std::string, size_t> index_;
  std::set<size_t> used_;
  std::vector<TensorView> out_;
};

}  // namespace

Status assemble_hf_experts(const ModelConfig& c, std::vector<TensorView>& tensors,
                           std::vector<std::vector<uint8_t>>& owned) {
  if (!c.is_moe()) return Status::ok();
  return Assembler(c, tensors, owned).run();
}

std::string hf_expert_name(Arch arch, int layer, int e, int kind) {
  return per_expert_name(arch == Arch::kMixtral, layer, e, kind);
}

}  // namespace mopt
