#include "model/random_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/mmap.h"
#include "core/strfmt.h"
#include "model/hf_experts.h"
#include "model/loaders.h"
#include "model/safetensors_write.h"
#include "model/synthetic_tokenizer.h"

namespace mopt {

namespace {

// bos_token_id / eos_token_id of config.json (the first of a list), or -1.
int config_token_id(const nlohmann::json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return -1;
  const nlohmann::json& v = it->is_array() && !it->empty() ? (*it)[0] : *it;
  return v.is_number_integer() ? v.get<int>() : -1;
}

}  // namespace

Result<RandomCheckpoint> write_random_checkpoint(const RandomCheckpointOptions& opt) {
  namespace fs = std::filesystem;
  if (!dummy_dtype_supported(opt.dtype) || !dtype_traits(opt.dtype).safetensors_name)
    return error("--dtype %s: random checkpoints are written in bf16, f16 or f32", dtype_name(opt.dtype));
  std::error_code ec;
  const std::string cfg_path = fs::is_directory(opt.config_path, ec) ? opt.config_path + "/config.json"
                                                                     : opt.config_path;
  MOPT_ASSIGN_OR_RETURN(std::string cfg_text, read_file(cfg_path));
  MOPT_ASSIGN_OR_RETURN(ModelConfig config, parse_hf_config(cfg_text, cfg_path));
  if (fs::exists(opt.out_dir + "/config.json", ec))
    return error("'%s' already holds a checkpoint: give an empty or new directory", opt.out_dir.c_str());
  fs::create_directories(opt.out_dir, ec);
  if (ec) return error("cannot create '%s': %s", opt.out_dir.c_str(), ec.message().c_str());

  // Tokenizer first: its checks are cheap, the weights are not. The config's BOS / EOS ids are kept where they can be
  // special tokens of the synthetic vocabulary (Llama-3's 128000 / 128001); otherwise (Qwen2's 0, a byte token
  // there) the last two ids take those roles and config.json says so.
  nlohmann::json cfg = nlohmann::json::parse(cfg_text);  // parse_hf_config accepted it
  const int n_text = synthetic_text_tokens(opt.words);
  int bos = config_token_id(cfg, "bos_token_id"), eos = config_token_id(cfg, "eos_token_id");
  if (bos == eos || std::min(bos, eos) < n_text || std::max(bos, eos) >= config.n_vocab) {
    bos = config.n_vocab - 2;
    eos = config.n_vocab - 1;
    cfg["bos_token_id"] = bos;
    cfg["eos_token_id"] = eos;
    cfg_text = cfg.dump(2) + "\n";
  }
  MOPT_ASSIGN_OR_RETURN(TokenizerFiles tok, synthetic_tokenizer(config.n_vocab, opt.words, bos, eos));
  RandomCheckpoint out;
  for (const auto& [name, text] : {std::pair<const char*, const std::string&>{"config.json", cfg_text},
                                   {"tokenizer.json", tok.tokenizer_json},
                                   {"tokenizer_config.json", tok.tokenizer_config_json}}) {
    out.files.push_back(opt.out_dir + "/" + name);
    MOPT_TRY(write_file(out.files.back(), text));
  }

  const std::vector<TensorSpec> specs = expected_tensors(config);
  std::vector<safetensors::OutTensor> tensors;
  // Stacked expert tensors are written one tensor per expert, as released checkpoints hold them: the stacked tensor is
  // filled once (the values --load-format dummy makes) and each expert's tensor copies its slice.
  auto stacked = std::make_shared<std::pair<size_t, std::vector<uint8_t>>>(SIZE_MAX, std::vector<uint8_t>());
  const uint64_t elem = static_cast<uint64_t>(dtype_traits(opt.dtype).block_bytes);
  for (size_t k = 0; k < specs.size(); ++k) {
    const TensorSpec& s = specs[k];
    if (s.n_dims == 3) {  // blk.N.ffn_{gate,up,down}_exps.weight [ne0, ne1, n_expert]
      const std::optional<int> layer = layer_of_tensor(s.name);
      const int kind = s.name.find("ffn_gate_exps") != std::string::npos ? 0
                       : s.name.find("ffn_up_exps") != std::string::npos ? 1 : 2;
      const uint64_t slice = static_cast<uint64_t>(s.ne[0] * s.ne[1]) * elem;
      for (int64_t e = 0; e < s.ne[2]; ++e) {
        safetensors::OutTensor t;
        t.name = hf_expert_name(config.arch, *layer, static_cast<int>(e), kind);
        t.dtype = opt.dtype;
        t.shape = {s.ne[1], s.ne[0]};
        t.fill = [&s, k, e, slice, stacked, &opt](void* dst) {
          if (stacked->first != k) {
            stacked->second.resize(static_cast<size_t>(slice * static_cast<uint64_t>(s.ne[2])));
            fill_dummy_tensor(stacked->second.data(), opt.dtype, s, k, opt.seed);
            stacked->first = k;
          }
          std::memcpy(dst, stacked->second.data() + static_cast<uint64_t>(e) * slice, slice);
        };
        tensors.push_back(std::move(t));
      }
      continue;
    }
    auto hf = canonical_to_hf_name(s.name);
    if (!hf) return error("tensor '%s' has no Hugging Face name", s.name.c_str());
    safetensors::OutTensor t;
    t.name = *hf;
    if (config.arch == Arch::kMixtral && t.name.find(".mlp.gate.") != std::string::npos)
      t.name.replace(t.name.find(".mlp.gate."), 10, ".block_sparse_moe.gate.");  // Mixtral's classic spelling
    if (config.arch == Arch::kDeepseek2 && t.name.find(".mlp.shared_expert.") != std::string::npos)
      t.name.replace(t.name.find(".mlp.shared_expert."), 19, ".mlp.shared_experts.");  // DeepSeek's spelling
    t.dtype = opt.dtype;
    for (int d = s.n_dims; d-- > 0;) t.shape.push_back(s.ne[static_cast<size_t>(d)]);  // ne order -> PyTorch order
    if (s.name.find("ffn_gate_inp_shexp") != std::string::npos) t.shape = {1, s.ne[0]};  // nn.Linear(H, 1)
    t.fill = [&s, k, &opt](void* dst) { fill_dummy_tensor(dst, opt.dtype, s, k, opt.seed); };
    tensors.push_back(std::move(t));
  }
  MOPT_ASSIGN_OR_RETURN(safetensors::Written w, safetensors::write_checkpoint(opt.out_dir, tensors,
                                                                              opt.max_shard_bytes));
  out.files.insert(out.files.end(), w.files.begin(), w.files.end());
  out.weight_bytes = w.data_bytes;
  out.n_tensors = static_cast<int>(tensors.size());
  return out;
}

}  // namespace mopt
