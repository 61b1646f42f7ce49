// quantize_model(): option checks, the destination, the model, then the output path of the target (pipeline.h).
#include "quant/quantize.h"

#include <sys/stat.h>

#include <chrono>

#include "core/strfmt.h"
#include "model/arch.h"
#include "quant/output.h"
#include "quant/pipeline.h"

namespace mopt::quant {

namespace {

// The same file or folder (device and inode), for paths that exist.
bool same_path(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

std::string gib(uint64_t b) { return strfmt("%.2f GiB", static_cast<double>(b) / (1ull << 30)); }

}  // namespace

Status check_free_space(const std::string& path, uint64_t need) {
  MOPT_ASSIGN_OR_RETURN(uint64_t free, free_bytes_near(path));
  const uint64_t margin = 16ull << 20;
  if (free < need + margin)
    return error("output %s needs %s but its file system has %s free; free space or choose another -o", path.c_str(),
                 gib(need).c_str(), gib(free).c_str());
  return Status::ok();
}

Status begin_layer_of(WeightTransform* t, const std::string& canonical, int n_layer, OutputLog& log, int& begun) {
  const std::optional<int> layer = layer_of_tensor(canonical);
  if (!t || !layer || *layer == begun) return Status::ok();
  log.begin("calibrating", strfmt("layer %d/%d", *layer + 1, n_layer));
  begun = *layer;
  return t->begin_layer(*layer);
}

Result<QuantizeReport> quantize_model(const QuantizeOptions& o, const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const TargetInfo& ti = target_info(o.target);
  if (o.method == Method::kAwq && o.target != Target::kAwq)
    return error("--method awq applies to --to awq only (%s is quantized round-to-nearest)", ti.name);
  if (o.method == Method::kGptq && o.target != Target::kInt8 && o.target != Target::kQ8_0 &&
      o.target != Target::kQ4_0 && o.target != Target::kAwq)
    return error("--method gptq is implemented for --to int8, q8_0, q4_0 and awq only, not --to %s (its blocks are "
                 "not GPTQ's grids yet); use one of those, or --method rtn", ti.name);
  const bool calibrated = o.method == Method::kGptq || (o.target == Target::kAwq && o.method != Method::kRtn);
  if (!o.calib_path.empty() && !calibrated)
    return error("--calib is calibration text for AWQ and GPTQ (--to awq with --method awq, or --method gptq); %s "
                 "does not use it", o.target == Target::kAwq ? "--method rtn" : ti.name);
  if (o.act_order && o.method != Method::kGptq) return error("--act-order applies to --method gptq only");
  if (o.calib_tokens != 0 && o.method != Method::kGptq) return error("--calib-tokens applies to --method gptq only");
  if (o.damp != 0 && o.method != Method::kGptq) return error("--damp applies to --method gptq only");
  if (o.damp < 0 || o.damp > 10) return error("--damp %g: give a fraction of the mean diagonal in (0, 10]", o.damp);
  if (o.fp8_per_tensor && o.target != Target::kFp8)
    return error("--fp8-scale tensor applies to --to fp8 only");
  if (same_path(o.input, o.output)) return error("output %s is the input; choose another -o", o.output.c_str());
  MOPT_TRY(check_destination(o.output, !ti.gguf, o.force));
  Result<std::unique_ptr<Model>> loaded = load_model(o.input);
  if (!loaded) return loaded.status().with_context("reading " + o.input);
  const Model& m = **loaded;
  if (m.config.is_moe())
    return error("%s is a mixture-of-experts model (%s), which mopt quantize does not write yet; the CPU backend runs "
                 "MoE GGUF files quantized by llama.cpp", o.input.c_str(), arch_name(m.config.arch));
  if (!ti.gguf && m.format != ModelFormat::kHuggingFace)
    return error("--to %s writes a Hugging Face folder from a Hugging Face folder (its config.json and tokenizer "
                 "files are carried over); %s is not one. GGUF targets: q8_0, q4_0, q4_k_m, q5_k_m, q6_k",
                 ti.name, o.input.c_str());
  ThreadPool pool(o.threads);
  Result<QuantizeReport> rep = ti.gguf ? write_gguf(m, o, pool, progress) : write_hf(m, o, pool, progress);
  if (!rep) return rep;
  rep->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace mopt::quant
