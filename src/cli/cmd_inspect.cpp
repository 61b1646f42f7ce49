// mopt inspect MODEL [--json]: what a model file holds — format, architecture, hyperparameters, tokenizer,
// chat template, the tensor table, the parameter count, the bytes the weights take at each dtype, and
// KV-cache bytes per token.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "cli/commands.h"
#include "core/enum_name.h"
#include "core/strfmt.h"
#include "model/arch.h"
#include "model/model.h"

namespace mopt::cli {
namespace {

struct InspectArgs {
  std::string model;
  std::string tokenizer;
  bool json = false;
  bool vocab_only = false;
  bool no_tensors = false;
};

// The names `inspect` prints for enum values.
constexpr EnumName<RopeScaling> kRopeScalingNames[] = {
    {RopeScaling::kNone, "none"}, {RopeScaling::kLinear, "linear"}, {RopeScaling::kLlama3, "llama3"},
    {RopeScaling::kYarn, "yarn"}};

// Weight bytes if every matrix were stored as `t`: 1-D tensors (norms, biases) stay f32 and matrices whose
// rows are not a multiple of the block size fall back to f16, as quantizers do.
uint64_t weight_bytes_at(const Model& m, DType t) {
  uint64_t total = 0;
  for (const TensorView& v : m.tensors) {
    const uint64_t rows = static_cast<uint64_t>(v.rows()), ne0 = static_cast<uint64_t>(v.ne[0]);
    if (v.n_dims <= 1) {
      total += ne0 * 4;
      continue;
    }
    std::optional<uint64_t> rb = row_bytes(t, ne0);
    total += (rb ? *rb : ne0 * 2) * rows;
  }
  return total;
}

// The weight types of the dtype table by size per element, largest first (equal sizes: larger blocks first); types
// of the same block layout size share one entry ("f16/bf16").
struct WeightSize {
  std::string names;
  DType type;  // the first of them
  int block_elems, block_bytes;
};
std::vector<WeightSize> weight_sizes() {
  std::vector<WeightSize> out;
  for (const DTypeTraits& r : dtype_table()) {
    if (!r.weight) continue;
    auto same = std::find_if(out.begin(), out.end(), [&](const WeightSize& w) {
      return w.block_elems == r.block_elems && w.block_bytes == r.block_bytes;
    });
    if (same != out.end())
      same->names += std::string("/") + r.name;
    else
      out.push_back({r.name, r.type, r.block_elems, r.block_bytes});
  }
  std::stable_sort(out.begin(), out.end(), [](const WeightSize& a, const WeightSize& b) {
    const int64_t lhs = int64_t{a.block_bytes} * b.block_elems, rhs = int64_t{b.block_bytes} * a.block_elems;
    return lhs != rhs ? lhs > rhs : a.block_elems > b.block_elems;
  });
  return out;
}

// A float as the double with the fewest digits that rounds back to it (1e-06, not 9.99999997e-07).
double shortest(float f) {
  for (int digits = 6; digits < 10; ++digits) {
    double d = std::strtod(strfmt("%.*g", digits, static_cast<double>(f)).c_str(), nullptr);
    if (static_cast<float>(d) == f) return d;
  }
  return static_cast<double>(f);
}

std::string token_text(const VocabData& v, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= v.tokens.size()) return "";
  return v.tokens[static_cast<size_t>(id)];
}

nlohmann::ordered_json build_report(const Model& m) {
  using json = nlohmann::ordered_json;
  const ModelConfig& c = m.config;
  json r;
  r["path"] = m.path;
  r["format"] = model_format_name(m.format);
  if (!m.vocab_only) {
    r["architecture"] = arch_name(c.arch);
    r["name"] = c.name;
    r["hyperparameters"] = {
        {"n_vocab", c.n_vocab},          {"n_embd", c.n_embd},
        {"n_layer", c.n_layer},          {"n_head", c.n_head},
        {"n_head_kv", c.n_head_kv},      {"head_dim", c.head_dim},
        {"n_ff", c.n_ff},                {"context_length", c.context_length},
        {"norm_eps", shortest(c.norm_eps)}, {"rope_theta", shortest(c.rope_theta)},
        {"rope_dim", c.rope_dim},        {"rope_style", c.rope_style == RopeStyle::kNeox ? "neox" : "interleaved"},
        {"rope_scaling", name_of(c.rope_scaling, kRopeScalingNames)},
        {"qkv_bias", c.qkv_bias},        {"qk_norm", c.qk_norm},
        {"tied_embeddings", c.tied_embeddings}, {"sliding_window", c.sliding_window},
    };
    if (c.is_moe()) {
      r["hyperparameters"]["n_expert"] = c.n_expert;
      r["hyperparameters"]["n_expert_used"] = c.n_expert_used;
      r["hyperparameters"]["n_ff_exp"] = c.n_ff_exp;
      r["hyperparameters"]["n_ff_shexp"] = c.n_ff_shexp;
      r["hyperparameters"]["expert_norm_topk"] = c.expert_norm_topk;
      if (c.arch == Arch::kDeepseek2) {
        r["hyperparameters"]["n_layer_dense_lead"] = c.n_layer_dense_lead;
        r["hyperparameters"]["expert_weights_scale"] = shortest(c.expert_weights_scale);
        r["hyperparameters"]["n_expert_groups"] = c.n_expert_groups;
        r["hyperparameters"]["n_group_used"] = c.n_group_used;
      }
    }
    if (c.is_mla()) {  // multi-head latent attention; the KV cache holds K and zero-padded V per head (docs/moe.md)
      r["hyperparameters"]["q_lora_rank"] = c.q_lora_rank;
      r["hyperparameters"]["kv_lora_rank"] = c.kv_lora_rank;
      r["hyperparameters"]["qk_nope_head_dim"] = c.qk_nope_dim;
      r["hyperparameters"]["v_head_dim"] = c.v_head_dim;
      r["hyperparameters"]["kv_bytes_per_token_f16"] = c.kv_bytes_per_token(2);
    }
    if (c.rope_scaling == RopeScaling::kYarn) {
      r["hyperparameters"]["rope_original_context"] = c.rope_original_context;
      r["hyperparameters"]["rope_attn_factor"] = shortest(c.rope_attn_factor);
      r["hyperparameters"]["attn_scale_mult"] = shortest(c.attn_scale_mult);
    }
    if (c.rope_scaling != RopeScaling::kNone) r["hyperparameters"]["rope_scale_factor"] = shortest(c.rope_scale_factor);
    if (c.rope_scaling == RopeScaling::kLlama3) {
      r["hyperparameters"]["rope_low_freq_factor"] = shortest(c.rope_low_freq_factor);
      r["hyperparameters"]["rope_high_freq_factor"] = shortest(c.rope_high_freq_factor);
      r["hyperparameters"]["rope_original_context"] = c.rope_original_context;
    }
  } else {
    r["name"] = c.name;
  }
  const VocabData& v = m.vocab;
  r["tokenizer"] = {{"kind", tokenizer_kind_name(v.kind)}, {"pre", v.pre},        {"n_tokens", v.tokens.size()},
                    {"bos", v.bos},                         {"eos", v.eos},        {"bos_text", token_text(v, v.bos)},
                    {"eos_text", token_text(v, v.eos)},     {"add_bos", v.add_bos}, {"eog_ids", v.eog_ids}};
  r["chat_template"] = {{"present", !m.chat_template.empty()}, {"bytes", m.chat_template.size()}};
  json tensors = json::array();
  uint64_t stored = 0;
  for (const TensorView& t : m.tensors) {
    std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
    tensors.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", shape}, {"bytes", t.nbytes}});
    stored += t.nbytes;
  }
  r["tensors"] = tensors;
  r["n_tensors"] = m.tensors.size();
  r["n_params"] = m.n_params();
  if (!m.vocab_only) {
    r["n_active_params"] = m.n_active_params();  // per token: a MoE router's picks only
    r["bytes_read_per_token"] = m.bytes_read_per_token();
  }
  json wb;
  wb["stored"] = stored;
  for (const WeightSize& w : weight_sizes()) wb[w.names] = weight_bytes_at(m, w.type);
  r["weight_bytes"] = wb;
  // The CPU backend's instruction-set path on this machine (backend/cpu/isa.h) and what chose it.
  r["cpu_path"] = {{"isa", cpu::isa_name(cpu::isa_active())}, {"chosen_by", cpu::isa_source()}};
  if (!m.vocab_only)
    r["kv_bytes_per_token"] = {{"f32", c.kv_bytes_per_token(4)}, {"f16/bf16", c.kv_bytes_per_token(2)},
                               {"fp8/int8", c.kv_bytes_per_token(1)}};
  return r;
}

void print_text(const nlohmann::ordered_json& r, bool show_tensors) {
  auto s = [](const nlohmann::ordered_json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); };
  std::printf("model:        %s\n", s(r["path"]).c_str());
  std::printf("format:       %s\n", s(r["format"]).c_str());
  if (r.contains("architecture")) std::printf("architecture: %s\n", s(r["architecture"]).c_str());
  std::printf("name:         %s\n", s(r["name"]).c_str());
  if (r.contains("hyperparameters")) {
    std::printf("\nhyperparameters:\n");
    for (auto it = r["hyperparameters"].begin(); it != r["hyperparameters"].end(); ++it)
      std::printf("  %-24s %s\n", it.key().c_str(), s(it.value()).c_str());
  }
  const auto& t = r["tokenizer"];
  std::printf("\ntokenizer:    %s", s(t["kind"]).c_str());
  if (t["kind"] != "none")
    std::printf(" (pre %s), %s tokens, bos %s %s, eos %s %s, add_bos %s", s(t["pre"]).c_str(), s(t["n_tokens"]).c_str(),
                s(t["bos"]).c_str(), t["bos_text"].dump().c_str(), s(t["eos"]).c_str(),
                t["eos_text"].dump().c_str(), s(t["add_bos"]).c_str());
  std::printf("\nchat template: %s\n", r["chat_template"]["present"].get<bool>()
                                          ? strfmt("yes (%s bytes)", s(r["chat_template"]["bytes"]).c_str()).c_str()
                                          : "no");
  if (show_tensors && !r["tensors"].empty()) {
    std::printf("\n%-40s %-6s %-22s %12s\n", "tensor", "dtype", "shape", "bytes");
    for (const auto& x : r["tensors"])
      std::printf("%-40s %-6s %-22s %12s\n", s(x["name"]).c_str(), s(x["dtype"]).c_str(), s(x["shape"]).c_str(),
                  s(x["bytes"]).c_str());
  }
  const uint64_t n_params = r["n_params"].get<uint64_t>();
  std::printf("\ntensors:      %s\nparameters:   %" PRIu64 " (%.3f M)\n", s(r["n_tensors"]).c_str(), n_params,
              static_cast<double>(n_params) / 1e6);
  if (r.contains("n_active_params")) {
    const uint64_t active = r["n_active_params"].get<uint64_t>(), read = r["bytes_read_per_token"].get<uint64_t>();
    if (active != n_params)
      std::printf("active:       %" PRIu64 " (%.3f M) per token (the experts the router picks)\n", active,
                  static_cast<double>(active) / 1e6);
    std::printf("read/token:   %" PRIu64 " bytes (%s) of weights as stored, per decoded token\n", read,
                format_bytes(static_cast<double>(read)).c_str());
  }
  std::printf("\nweight bytes (matrices at each dtype; 1-D tensors f32):\n");
  for (auto it = r["weight_bytes"].begin(); it != r["weight_bytes"].end(); ++it) {
    const uint64_t b = it.value().get<uint64_t>();
    std::printf("  %-10s %14" PRIu64 "  %s\n", it.key().c_str(), b, format_bytes(static_cast<double>(b)).c_str());
  }
  std::printf("\nCPU path:     %s (chosen by %s)\n", s(r["cpu_path"]["isa"]).c_str(), s(r["cpu_path"]["chosen_by"]).c_str());
  if (r.contains("kv_bytes_per_token")) {
    std::printf("\nKV cache bytes per token:\n");
    for (auto it = r["kv_bytes_per_token"].begin(); it != r["kv_bytes_per_token"].end(); ++it) {
      const uint64_t b = it.value().get<uint64_t>();
      std::printf("  %-10s %14" PRIu64 "  %s\n", it.key().c_str(), b, format_bytes(static_cast<double>(b)).c_str());
    }
  }
}

int inspect(const InspectArgs& a) {
  LoadOptions opts;
  opts.tokenizer_path = a.tokenizer;
  opts.vocab_only = a.vocab_only;
  auto m = load_model(a.model, opts);
  if (!m) {
    std::fprintf(stderr, "mopt inspect: %s\n", m.message().c_str());
    return 1;
  }
  nlohmann::ordered_json r = build_report(**m);
  if (a.json) {
    if (a.no_tensors) r.erase("tensors");
    std::printf("%s\n", r.dump(2).c_str());
  } else {
    print_text(r, !a.no_tensors);
  }
  return 0;
}

Registration reg("inspect", 10, [](CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect", "Show a model's format, architecture, tokenizer, tensors and sizes");
  cmd->add_option("model", args->model, "A GGUF file, a Hugging Face folder, or a llama2.c checkpoint")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer .bin for llama2.c checkpoints (default: beside the model)");
  cmd->add_flag("--json", args->json, "Print the report as JSON");
  cmd->add_flag("--vocab-only", args->vocab_only, "GGUF: read only the tokenizer (vocab-only files)");
  cmd->add_flag("--no-tensors", args->no_tensors, "Leave out the tensor table");
  cmd->callback([args] { set_exit_code(inspect(*args)); });
});

}  // namespace
}  // namespace mopt::cli
