// Hugging Face folders from loaded models (hf_save.h).
#include "quant/hf_save.h"

#include <dirent.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/mmap.h"
#include "model/arch.h"
#include "quant/safetensors_writer.h"

namespace mopt::quant {

namespace {

// Files a model folder carries besides its weights, their index and config.json.
bool side_file(const std::string& n) {
  if (n.empty() || n[0] == '.' || n == "config.json") return false;
  for (const char* ext : {".safetensors", ".safetensors.index.json", ".bin", ".pt", ".pth", ".gguf", ".h5",
                          ".msgpack", ".onnx", ".ckpt"})
    if (n.ends_with(ext)) return false;
  return true;
}

}  // namespace

std::string hf_config_json(const ModelConfig& c, DType dtype) {
  const ArchInfo& a = arch_info(c.arch);
  nlohmann::ordered_json j = {{"architectures", {a.hf_class}},
                              {"model_type", a.hf_model_type},
                              {"vocab_size", c.n_vocab},
                              {"hidden_size", c.n_embd},
                              {"intermediate_size", c.n_ff},
                              {"num_hidden_layers", c.n_layer},
                              {"num_attention_heads", c.n_head},
                              {"num_key_value_heads", c.n_head_kv},
                              {"head_dim", c.head_dim},
                              {"max_position_embeddings", c.context_length},
                              {"rms_norm_eps", c.norm_eps},
                              {"rope_theta", c.rope_theta},
                              {"hidden_act", "silu"},
                              {"tie_word_embeddings", c.tied_embeddings}};
  if (const char* torch = dtype_traits(dtype).torch_name) j["torch_dtype"] = torch;
  if (c.qkv_bias && !a.qkv_bias) j["attention_bias"] = true;
  if (c.rope_scaling == RopeScaling::kLinear) j["rope_scaling"] = {{"type", "linear"}, {"factor", c.rope_scale_factor}};
  if (c.rope_scaling == RopeScaling::kLlama3)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scale_factor},
                         {"low_freq_factor", c.rope_low_freq_factor},
                         {"high_freq_factor", c.rope_high_freq_factor},
                         {"original_max_position_embeddings", c.rope_original_context}};
  if (c.sliding_window > 0) {
    j["sliding_window"] = c.sliding_window;
    if (c.arch != Arch::kMistral) j["use_sliding_window"] = true;
  }
  return j.dump(2) + "\n";
}

Status copy_side_files(const std::string& in_dir, OutputDir& out) {
  DIR* d = ::opendir(in_dir.c_str());
  if (!d) return error("cannot read the folder %s", in_dir.c_str());
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.push_back(e->d_name);
  ::closedir(d);
  for (const std::string& n : names) {
    struct stat st {};
    const std::string p = in_dir + "/" + n;
    if (!side_file(n) || ::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    MOPT_ASSIGN_OR_RETURN(std::string content, read_file(p));
    MOPT_TRY(out.write_file(n, content));
  }
  return Status::ok();
}

Status save_hf_folder(const Model& m, const std::string& dir, const std::string& side_files_dir) {
  MOPT_TRY(check_destination(dir, /*is_dir=*/true, /*force=*/false));
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  std::vector<const TensorView*> order;
  for (const TensorView& t : m.tensors) {
    const DTypeTraits& r = dtype_traits(t.dtype);
    if (!r.safetensors_name || r.quantized)
      return error("tensor %s is %s: save_hf_folder writes float tensors only", t.name.c_str(), r.name);
    std::vector<int64_t> shape;
    for (int d = t.n_dims - 1; d >= 0; --d) shape.push_back(t.ne[static_cast<size_t>(d)]);
    w.add_tensor(canonical_to_hf_name(t.name).value_or(t.name), t.dtype, shape);
    order.push_back(&t);
  }
  MOPT_ASSIGN_OR_RETURN(std::unique_ptr<OutputDir> out, OutputDir::create(dir));
  MOPT_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> f, out->file("model.safetensors"));
  MOPT_TRY(w.write_header(*f));
  for (size_t i = 0; i < order.size(); ++i) MOPT_TRY(w.write_tensor(*f, i, order[i]->data, order[i]->nbytes));
  MOPT_TRY(f->commit());
  MOPT_TRY(out->write_file("config.json", hf_config_json(m.config, m.find("token_embd.weight")->dtype)));
  MOPT_TRY(copy_side_files(side_files_dir, *out));
  return out->commit();
}

}  // namespace mopt::quant
