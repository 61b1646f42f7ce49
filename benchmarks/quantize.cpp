// mopt quantize speed on a generated 1.1B-parameter Llama (TinyLlama's shape: d 2048, ff 5632, 22 layers, 32/4
// heads, vocab 32000; random bf16 weights written as a Hugging Face folder with code-qwen2-25m's tokenizer files).
// For each target: wall time, seconds per billion parameters, and the ratio to a reference pass measured in the
// same run that reads every weight of the folder into fp32 (the floor of any conversion: mmap reads and bf16 ->
// fp32 on the same thread pool).
// Usage: bench_quantize [--models DIR] [--work DIR] [--threads N] [--targets q4_k_m,awq]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "core/thread_pool.h"
#include "model/loaders.h"
#include "quant/convert.h"
#include "quant/hf_save.h"
#include "quant/quantize.h"

using namespace mopt;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kConfig = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
  "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
  "num_key_value_heads": 4, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void die(const std::string& what, const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), msg.c_str());
  std::exit(1);
}

void remove_tree(const std::string& dir) {  // the folders this program writes hold files only
  const std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = MOPT_MODELS_DIR, work = "/tmp", targets = "q4_k_m,awq";
  int threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--models")) models = argv[i + 1];
    else if (!std::strcmp(argv[i], "--work")) work = argv[i + 1];
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--targets")) targets = argv[i + 1];
    else die("usage", "bench_quantize [--models DIR] [--work DIR] [--threads N] [--targets q4_k_m,awq]");
  }
  const std::string dir = work + "/mopt_bench_quantize_" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  const std::string src = dir + "/llama-1.1b";

  // The input: random weights, written once.
  {
    const auto t0 = Clock::now();
    FILE* f = std::fopen((dir + "/config.json").c_str(), "w");
    std::fputs(kConfig, f);
    std::fclose(f);
    LoadOptions o;
    o.dummy = true;
    o.dummy_dtype = DType::BF16;
    auto m = load_dummy_model(dir + "/config.json", o);
    if (!m) die("generating the model", m.message());
    Status s = quant::save_hf_folder(**m, src, models + "/code-qwen2-25m");
    if (!s) die("writing the model", s.message());
    std::printf("generated %s: %.3f B parameters (bf16) in %.1f s\n", src.c_str(), (*m)->n_params() / 1e9,
                seconds_since(t0));
  }

  // Reference: every weight read into fp32.
  ThreadPool pool(threads);
  double ref_s = 0, params_b = 0;
  {
    auto m = load_model(src);
    if (!m) die("loading the model", m.message());
    const auto t0 = Clock::now();
    double sink = 0;
    for (const TensorView& t : (*m)->tensors) sink += quant::to_f32(t, pool)[0];
    ref_s = seconds_since(t0);
    params_b = static_cast<double>((*m)->n_params()) / 1e9;
    std::printf("reference: read all weights into fp32: %.2f s (%.2f s per billion parameters) [%g]\n", ref_s,
                ref_s / params_b, sink);
  }
  std::printf("%-8s %10s %14s %12s %10s\n", "target", "seconds", "s / B params", "x reference", "MiB");
  size_t pos = 0;
  while (pos <= targets.size()) {
    const size_t comma = std::min(targets.find(',', pos), targets.size());
    const std::string name = targets.substr(pos, comma - pos);
    pos = comma + 1;
    const auto t = quant::target_from_name(name);
    if (!t) die("--targets", name + " is not a target (" + quant::target_names() + ")");
    quant::QuantizeOptions o;
    o.input = src;
    o.output = dir + "/out-" + name;
    o.target = *t;
    o.threads = threads;
    auto rep = quant::quantize_model(o);
    if (!rep) die("quantize " + name, rep.message());
    std::printf("%-8s %10.1f %14.1f %12.1f %10.0f\n", name.c_str(), rep->seconds, rep->seconds / params_b,
                rep->seconds / ref_s, static_cast<double>(rep->out_bytes) / (1 << 20));
    std::fflush(stdout);
    remove_tree(o.output);
  }
  remove_tree(dir);
  return 0;
}
