// mopt quantize: writes a model's weights in a smaller format (quant/quantize.h, docs/quantize.md).
//   mopt quantize MODEL -o OUT --to FORMAT [--method awq|gptq|rtn] [--calib FILE] [--calib-tokens N] [--damp F]
//                 [--act-order] [--fp8-scale channel|tensor] [--force] [--threads N] [--progress] [--json]
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "core/progress_bar.h"
#include "core/strfmt.h"
#include "quant/quantize.h"

namespace mopt::cli {
namespace {

struct QuantizeArgs {
  std::string model, output, to, method, calib, fp8_scale = "channel";
  bool force = false, progress = false, json = false, act_order = false;
  int threads = 0, calib_tokens = 0;
  double damp = 0;
};

int quantize(const QuantizeArgs& a) {
  std::optional<quant::Target> target = quant::target_from_name(a.to);
  if (!target) {
    std::fprintf(stderr, "mopt quantize: --to %s is not a format mopt writes (choose one of: %s)\n", a.to.c_str(),
                 quant::target_names().c_str());
    return 2;
  }
  quant::QuantizeOptions o;
  o.input = a.model;
  o.output = a.output;
  o.target = *target;
  o.method = a.method == "awq"    ? quant::Method::kAwq
             : a.method == "gptq" ? quant::Method::kGptq
             : a.method == "rtn"  ? quant::Method::kRtn
                                  : quant::Method::kDefault;
  o.act_order = a.act_order;
  o.calib_tokens = a.calib_tokens;
  o.damp = a.damp;
  o.calib_path = a.calib;
  o.force = a.force;
  o.fp8_per_tensor = a.fp8_scale == "tensor";
  o.threads = a.threads;
  ProgressBar bar(ProgressBar::auto_style(a.progress), "quantize", "params");
  const auto t0 = std::chrono::steady_clock::now();
  Result<quant::QuantizeReport> rep = quant::quantize_model(o, [&](const quant::Progress& p) {
    bar.set_label(p.tensor.empty() ? "quantize" : p.stage + " " + p.tensor);
    bar.update(static_cast<int64_t>(p.done), static_cast<int64_t>(p.total),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
  bar.finish();
  if (!rep) {
    std::fprintf(stderr, "mopt quantize: %s\n", rep.message().c_str());
    return 1;
  }
  if (a.json) {
    nlohmann::ordered_json j = {{"output", a.output}, {"format", a.to},        {"params", rep->params},
                                {"bytes", rep->out_bytes}, {"seconds", rep->seconds}, {"tensors", nlohmann::json::array()}};
    for (const quant::TensorRecord& t : rep->tensors)
      j["tensors"].push_back({{"name", t.name}, {"type", t.type}, {"params", t.params}});
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("wrote %s (%s): %.1f M parameters, %.1f MiB, %.1f s\n", a.output.c_str(), a.to.c_str(),
                static_cast<double>(rep->params) / 1e6, static_cast<double>(rep->out_bytes) / (1 << 20), rep->seconds);
  }
  return 0;
}

Registration reg("quantize", 44, [](CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand("quantize", "Write a model's weights as GGUF quants, fp8, int8 or AWQ int4");
  cmd->add_option("model", args->model, "Model: a Hugging Face folder (f32/f16/bf16 safetensors) or a GGUF file")
      ->required();
  cmd->add_option("-o,--output", args->output, "Output: a GGUF file (GGUF formats) or a folder (fp8, int8, awq)")
      ->required();
  std::string formats;
  for (const quant::TargetInfo& t : quant::targets()) formats += strfmt("\n  %-7s %s", t.name, t.summary);
  cmd->add_option("--to", args->to, "Format:" + formats)->required();
  cmd->add_option("--method", args->method, "awq: activation-aware scales and clipping on calibration text "
                                            "(default for --to awq); gptq: GPTQ's error-compensating rounding on "
                                            "calibration text (int8, q8_0, q4_0, awq); rtn: round to nearest")
      ->check(CLI::IsMember({"awq", "gptq", "rtn"}));
  cmd->add_option("--calib", args->calib, "Calibration text for AWQ and GPTQ (default: the bundled sample)");
  cmd->add_option("--calib-tokens", args->calib_tokens, "GPTQ: calibration tokens used at most (default 2048)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--damp", args->damp, "GPTQ: dampening added to H's diagonal, a fraction of its mean (default "
                                        "1)")
      ->check(CLI::Range(1e-6, 10.0));  // 0 would otherwise read as "not given" (the default)
  cmd->add_flag("--act-order", args->act_order, "GPTQ: quantize columns by decreasing input energy (group scales "
                                                "from the original weights)");
  cmd->add_option("--fp8-scale", args->fp8_scale, "fp8 weight scales: one per output channel or one per tensor")
      ->check(CLI::IsMember({"channel", "tensor"}));
  cmd->add_flag("--force", args->force, "Replace an existing output");
  cmd->add_option("--threads", args->threads, "Threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--progress", args->progress, "Progress lines on stderr even when it is not a terminal");
  cmd->add_flag("--json", args->json, "Print the result (tensor types included) as JSON");
  cmd->callback([args]() { set_exit_code(quantize(*args)); });
});

}  // namespace
}  // namespace mopt::cli
