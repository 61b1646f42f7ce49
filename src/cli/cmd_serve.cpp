// mopt serve: the OpenAI-compatible server (src/server). Listens first (so /health says "loading"), loads the
// model, warms the engine up (GEMM tuning, graph capture: /health stays 503 "loading" with the phase), then serves
// until SIGTERM/SIGINT: stop accepting, let in-flight requests finish within --drain-timeout, abort the rest, exit 0.
// Startup failures (port in use, bad model, bad template) exit 1 with the reason.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/device_facts.h"
#include "cli/model_args.h"
#include "cli/startup.h"
#include "core/log.h"
#include "core/malloc_arenas.h"
#include "engine/engine.h"
#include "loadgen/stats.h"
#include "plan/memory_fit.h"
#include "cli/engine_flags.h"
#include "cli/vllm_serve_flags.h"
#include "server/model_card.h"
#include "server/server.h"
#include "server/stats_log.h"

namespace mopt::cli {
namespace {

struct ServeArgs {
  ModelArgs model;
  EngineConfig engine;
  server::ServeOptions opts;
  std::string chat_template_file;
  std::string ssl_certfile, ssl_keyfile;
  std::string config_file;
  std::string test_fault = "none";
  std::string memory_limit;  // --memory-limit SIZE ("" = the cgroup's limit, if any)
  std::string tool_call_parser, reasoning_parser;
  VllmServeFlags vllm;
  size_t max_body = 4 * 1024 * 1024;
  size_t max_header = 16 * 1024;
  double read_timeout = 30, idle_timeout = 30, write_timeout = 30;
};

// Applies `key = value` settings of a TOML/INI file to the options of `cmd` that the command line did not set.
// (CLI11 2.1 reads config files for the main app only, so the serve subcommand applies its own.)
Status apply_config_file(CLI::App& cmd, const std::string& path) {
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    return error("--config %s: %s", path.c_str(), e.what());
  }
  for (const auto& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    std::string key = item.parents.empty() || item.parents == std::vector<std::string>{"serve"}
                          ? item.name : std::string();
    CLI::Option* opt = key.empty() || key == "config" ? nullptr : cmd.get_option_no_throw("--" + key);
    if (!opt) return error("--config %s: unknown setting '%s' (use the long flag names of mopt serve)", path.c_str(),
                           item.fullname().c_str());
    if (opt->count() > 0) continue;  // the command line wins
    try {
      for (const auto& v : item.inputs) opt->add_result(v);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return error("--config %s: %s: %s", path.c_str(), key.c_str(), e.what());
    }
  }
  return Status::ok();
}

// --chat-template: a file, or (as vLLM takes it) the template itself when no such file exists.
Result<std::string> chat_template_source(const std::string& arg) {
  std::ifstream f(arg, std::ios::binary);
  if (!f) {
    if (arg.find("{{") != std::string::npos || arg.find("{%") != std::string::npos) return arg;
    return error("cannot read --chat-template file '%s' (give a file, or the Jinja template itself)", arg.c_str());
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Refuses to start (an error) when the planned footprint does not fit the host memory limit (--memory-limit, or
// the cgroup's), and sizes the KV cache to what the limit leaves. CPU only: a CUDA server's weights and KV cache
// live in device memory, planned by --gpu-memory-utilization.
Status check_memory_limit(ServeArgs& a) {
  uint64_t explicit_limit = 0;
  if (!a.memory_limit.empty()) {
    auto b = loadgen::parse_bytes(a.memory_limit);
    if (!b || !(*b > 0)) return error("--memory-limit '%s': expected a size (e.g. 2GiB, 512MiB)", a.memory_limit.c_str());
    explicit_limit = static_cast<uint64_t>(*b);
  }
  const DeviceKind dev = resolve_device(a.engine.runner.device);
  if (dev == DeviceKind::kCuda) {
    if (explicit_limit)
      return error("--memory-limit plans host memory for the CPU backend; on CUDA size device memory with "
                   "--gpu-memory-utilization or --kv-cache-memory");
    return Status::ok();
  }
  const plan::HostLimit limit = plan::host_memory_limit(explicit_limit);
  if (!limit.bytes) return Status::ok();
  MOPT_ASSIGN_OR_RETURN(plan::ModelShape shape, plan::read_model_shape(a.model.model));
  const char* kv = a.engine.runner.kv_cache_dtype == KvCacheDtype::kFloat32 ? "fp32"
                   : a.engine.runner.kv_cache_dtype == KvCacheDtype::kFloat16 ? "fp16" : "auto";
  EngineConfig e = a.engine;
  e.runner.device = DeviceKind::kCpu;
  // A draft model (speculative decoding) takes its weights, workspace and KV cache out of the same limit.
  std::optional<plan::ModelShape> draft;
  if (e.speculative.method == SpecMethod::kDraftModel && !e.speculative.model.empty()) {
    auto d = plan::read_model_shape(e.speculative.model);
    if (!d) return d.status().with_context("--speculative-config: reading the draft model");
    draft = std::move(d).value();
  }
  MOPT_ASSIGN_OR_RETURN(plan::MemoryFit fit, plan::fit_memory_limit(shape, e, kv, limit, draft ? &*draft : nullptr));
  if (fit.kv_cache_memory) a.engine.kv_cache_memory = fit.kv_cache_memory;
  std::fprintf(stderr, "mopt serve: memory: %s%s\n", fit.describe().c_str(),
               fit.kv_cache_memory ? "; the KV cache is sized to what the limit leaves" : "");
  return Status::ok();
}

int serve(ServeArgs& a) {
  // Before any thread starts: one malloc arena (core/malloc_arenas.h says why).
  const std::string arenas = bound_malloc_arenas(1);
  // Signals go to one waiting thread (sigwait), never to the HTTP or engine threads that inherit this mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // One socket per connection: allow as many open files as the hard limit permits (often 1024 by default).
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }

  auto& o = a.opts;
  if (!a.tool_call_parser.empty()) o.tool_parser = server::tool_parser_from_name(a.tool_call_parser);
  if (!a.reasoning_parser.empty()) o.reasoning = *server::reasoning_parser_from_name(a.reasoning_parser);
  o.http.max_body_bytes = a.max_body;
  o.http.max_header_bytes = a.max_header;
  o.http.read_timeout_ms = static_cast<int>(a.read_timeout * 1000);
  o.http.idle_timeout_ms = static_cast<int>(a.idle_timeout * 1000);
  o.http.write_timeout_ms = static_cast<int>(a.write_timeout * 1000);
  if (o.served_model_names.empty()) {
    std::string base = a.model.model;
    while (!base.empty() && base.back() == '/') base.pop_back();
    base = base.substr(base.find_last_of('/') + 1);
    o.served_model_names.push_back(base.empty() ? "mopt" : base);
  }
  std::optional<ChatTemplate> override_tmpl;
  if (!a.chat_template_file.empty()) {
    auto src = chat_template_source(a.chat_template_file);
    if (!src) {
      std::fprintf(stderr, "mopt serve: %s\n", src.message().c_str());
      return 1;
    }
    auto t = ChatTemplate::compile(*src);
    if (!t) {
      std::fprintf(stderr, "mopt serve: --chat-template: %s\n", t.message().c_str());
      return 1;
    }
    override_tmpl = std::move(*t);
  }

  if (a.ssl_certfile.empty() != a.ssl_keyfile.empty()) {
    std::fprintf(stderr, "mopt serve: HTTPS needs both --ssl-certfile and --ssl-keyfile (%s was not given)\n",
                 a.ssl_certfile.empty() ? "--ssl-certfile" : "--ssl-keyfile");
    return 1;
  }
  if (!a.ssl_certfile.empty()) {
    auto tls = server::TlsContext::create(a.ssl_certfile, a.ssl_keyfile);
    if (!tls) {
      std::fprintf(stderr, "mopt serve: %s\n", tls.message().c_str());
      return 1;
    }
    o.tls = std::move(*tls);
  }
  server::Server srv(o);
  if (Status s = srv.listen(); !s) {
    std::fprintf(stderr, "mopt serve: %s\n", s.message().c_str());
    return 1;
  }
  std::thread http_thread([&] { srv.serve(); });
  std::fprintf(stderr, "mopt serve: listening on %s://%s:%d (loading %s)\n", o.tls ? "https" : "http",
               o.host.c_str(), srv.port(), a.model.model.c_str());

  std::atomic<int> sig{0};
  std::thread sig_thread([&] {
    int s = 0;
    sigwait(&sigs, &s);
    sig = s;
  });
  auto fail = [&](const std::string& msg) {
    std::fprintf(stderr, "mopt serve: %s\n", msg.c_str());
    srv.begin_drain();
    http_thread.join();
    pthread_kill(sig_thread.native_handle(), SIGTERM);
    sig_thread.join();
    return 1;
  };

  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  StartupTimes startup;
  srv.set_loading_phase("reading weights");
  const auto t_read = Clock::now();
  auto loaded = load_model_and_tokenizer(a.model);
  startup.read_s = since(t_read);
  if (!loaded) return fail(loaded.message());
  if (!loaded->tokenizer) return fail("the model has no tokenizer (dummy weights?); serving needs one");
  server::ServedModel sm;
  if (override_tmpl) {
    sm.chat_template = std::move(override_tmpl);
  } else {
    const std::string& src = loaded->model->chat_template.empty() ? std::string(server::kDefaultChatTemplate)
                                                                  : loaded->model->chat_template;
    if (loaded->model->chat_template.empty())
      MOPT_LOG_INFO("the model has no chat template; chat uses a plain 'Role: content' template "
                    "(give one with --chat-template)");
    auto t = ChatTemplate::compile(src);
    if (!t) return fail("the model's chat template: " + t.message() + " (override it with --chat-template FILE)");
    sm.chat_template = std::move(*t);
  }
  srv.set_loading_phase("creating the engine (weight upload, KV cache)");
  const auto t_engine = Clock::now();
  auto engine = create_engine(*loaded->model, *loaded->tokenizer, a.engine,
                              [&srv](const std::string& p) { srv.set_loading_phase(p); });
  if (!engine) return fail(engine.message());
  startup.engine_s = since(t_engine);
  // Tuning and graph capture before /health reports ready, so no request pays for them.
  if (Status st = warm_up_engine(**engine, startup, [&srv](const std::string& p) { srv.set_loading_phase(p); }); !st)
    return fail(st.message());
  MOPT_LOG_INFO("%s", format_startup(startup).c_str());
  MOPT_LOG_INFO("%s; %d in use after start-up", arenas.c_str(), malloc_arenas_in_use());
  (*engine)->start();
  std::optional<server::StatsLogger> stats_log;  // vLLM's periodic stats line; --disable-log-stats
  if (a.vllm.log_stats)
    stats_log.emplace([e = engine->get()] { return e->stats(); },
                      [](const std::string& line) { MOPT_LOG_INFO("%s", line.c_str()); }, 10.0);
  sm.engine = engine->get();
  sm.tokenizer = loaded->tokenizer.get();
  sm.max_model_len = (*engine)->config().max_model_len;
  sm.card = server::model_card(*loaded->model, (*engine)->config(), (*engine)->stats(),
                               device_facts((*engine)->config().runner.device));
  srv.attach(std::move(sm));
  std::fprintf(stderr, "mopt serve: ready: model '%s', max_model_len %d\n", o.served_model_names[0].c_str(),
               (*engine)->config().max_model_len);

  sig_thread.join();  // until SIGTERM / SIGINT
  std::fprintf(stderr, "mopt serve: signal %d: draining (up to %.0f s)\n", sig.load(), o.drain_grace_s);
  srv.begin_drain();
  http_thread.join();  // the listening socket is closed: new connections are refused from here on
  std::fprintf(stderr, "mopt serve: no longer accepting connections; %d open\n", srv.in_flight());
  bool drained = srv.wait_drained();
  if (!drained) std::fprintf(stderr, "mopt serve: grace period over; aborting the remaining requests\n");
  stats_log.reset();
  (*engine)->stop();  // aborts whatever is left; their handlers finish with finish_reason "abort"
  // Let the handlers write that abort and [DONE] (each wakes within 50 ms of it), up to 2 s for clients that
  // stopped reading; then cut whatever is still open.
  if (!drained) srv.wait_drained(2.0);
  srv.close_connections();
  srv.wait_drained();  // no handler may still use the engine when it is destroyed
  std::fprintf(stderr, "mopt serve: stopped\n");
  return 0;
}

Registration reg("serve", 30, [](CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)");
  add_model_flags(cmd, args->model);
  // --model may come from --config, so it is checked after the config file is applied.
  cmd->get_option("--model")->required(false);
  cmd->add_option("--config", args->config_file,
                  "TOML/INI file with these settings (keys are the long flag names; the command line wins)")
      ->check(CLI::ExistingFile);
  add_engine_flags(*cmd, args->engine);
  auto& o = args->opts;
  const std::string g = "Server";
  cmd->add_option("--host", o.host, "address to listen on")->capture_default_str()->group(g);
  cmd->add_option("--port", o.port, "TCP port (0 = any free port)")->check(CLI::Range(0, 65535))
      ->capture_default_str()->group(g);
  cmd->add_option("--served-model-name", o.served_model_names,
                  "model name(s) clients use (default: the model file's name)")->group(g);
  cmd->add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' on /v1, tokenize and /model_card routes")
      ->envname("MOPT_API_KEY")->group(g);
  cmd->add_option("--allowed-origins", o.allowed_origins, "CORS origins allowed (\"*\" = any; default none)")
      ->group(g);
  cmd->add_flag_callback("--no-web-console", [&o] { o.web_console = false; },
                         "do not serve the web console page at /")->group(g);
  cmd->add_option("--root-path", o.root_path,
                  "path prefix a reverse proxy serves this server under (e.g. /llm); routes answer with and without it")
      ->group(g);
  cmd->add_option_function<std::string>(
         "--metrics-compat", [&o](const std::string& v) { o.metrics_compat_vllm = v == "vllm"; },
         "vllm: /metrics also exports vLLM's series (vllm:..., model_name label) for dashboards written for vLLM")
      ->check(CLI::IsMember({"none", "vllm"}))->group(g);
  cmd->add_option("--ssl-certfile", args->ssl_certfile, "PEM certificate (chain): serve HTTPS (with --ssl-keyfile)")
      ->group(g);
  cmd->add_option("--ssl-keyfile", args->ssl_keyfile, "PEM private key of --ssl-certfile (unencrypted)")->group(g);
  cmd->add_option("--chat-template", args->chat_template_file,
                  "Jinja chat template overriding the model's: a file, or the template itself")->group(g);
  cmd->add_option("--tool-call-parser", args->tool_call_parser,
                  "tool-call format of the model's output (default: from the chat template's markers)")
      ->check(CLI::IsMember({"hermes", "llama3_json", "mistral", "deepseek_v3"}))->group(g);
  cmd->add_option("--reasoning-parser", args->reasoning_parser,
                  "return <think>...</think> as reasoning_content (default: none)")
      ->check(CLI::IsMember({"deepseek_r1", "qwen3"}))->group(g);
  cmd->add_option("--max-waiting", args->engine.max_waiting,
                  "most queued requests; beyond it requests get 429 + Retry-After (0 = unbounded)")
      ->check(CLI::Range(0, 1 << 24))->group(g);
  cmd->add_option("--drain-timeout", o.drain_grace_s, "SIGTERM: seconds in-flight requests may take to finish")
      ->check(CLI::Range(0.0, 3600.0))->capture_default_str()->group(g);
  cmd->add_option("--health-stall-timeout", o.health_stall_s,
                  "/health fails when requests are pending and no engine step finished for this many seconds")
      ->check(CLI::Range(0.1, 3600.0))->capture_default_str()->group(g);
  cmd->add_option("--max-body-bytes", args->max_body, "largest request body (413 beyond)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))->capture_default_str()->group(g);
  cmd->add_option("--max-header-bytes", args->max_header, "largest request head (431 beyond)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 20))->capture_default_str()->group(g);
  cmd->add_option("--read-timeout", args->read_timeout, "seconds to receive a whole request (408 beyond)")
      ->check(CLI::Range(0.1, 3600.0))->capture_default_str()->group(g);
  cmd->add_option("--idle-timeout", args->idle_timeout, "seconds an idle keep-alive connection is kept")
      ->check(CLI::Range(0.1, 3600.0))->capture_default_str()->group(g);
  cmd->add_option("--write-timeout", args->write_timeout, "seconds a blocked write may take before the client is dropped")
      ->check(CLI::Range(0.1, 3600.0))->capture_default_str()->group(g);
  cmd->add_option("--max-connections", o.http.max_connections, "open connections (503 beyond)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str()->group(g);
  cmd->add_option("--max-n", o.api.max_n, "largest n (choices per prompt)")->check(CLI::Range(1, 128))
      ->capture_default_str()->group(g);
  cmd->add_option("--memory-limit", args->memory_limit,
                  "host memory the server must fit in (CPU), e.g. 4GiB; it refuses to start when the planned "
                  "weights + workspace + KV cache do not fit (default: the cgroup's limit, if any)")
      ->group(g);
  add_vllm_serve_flags(cmd, args->vllm);
  // Hidden: planted defects for mopt gate's tests (src/server/test_fault.h). Never in production.
  cmd->add_option("--test-fault", args->test_fault, "TEST ONLY: plant a defect: none, leak, slow or error")
      ->group("");
  cmd->callback([args, cmd] {
    if (!args->config_file.empty()) {
      if (Status st = apply_config_file(*cmd, args->config_file); !st) {
        std::fprintf(stderr, "mopt serve: %s\n", st.message().c_str());
        set_exit_code(1);
        return;
      }
    }
    if (Status st = server::check_root_path(args->opts.root_path); !st) {
      std::fprintf(stderr, "mopt serve: %s\n", st.message().c_str());
      set_exit_code(1);
      return;
    }
    auto fault = server::parse_test_fault(args->test_fault);
    if (!fault) {
      std::fprintf(stderr, "mopt serve: %s\n", fault.message().c_str());
      set_exit_code(1);
      return;
    }
    args->opts.test_fault = *fault;
    if (Status st = resolve_vllm_serve_flags(args->vllm, args->model, args->engine); !st) {
      std::fprintf(stderr, "mopt serve: %s\n", st.message().c_str());
      set_exit_code(1);
      return;
    }
    args->opts.log_requests = args->vllm.log_requests;
    if (args->model.model.empty()) {
      std::fprintf(stderr, "mopt serve: --model (or a positional MODEL) is required (on the command line or in "
                   "--config)\n");
      set_exit_code(1);
      return;
    }
    if (Status st = check_memory_limit(*args); !st) {
      std::fprintf(stderr, "mopt serve: refusing to start: %s\n", st.message().c_str());
      set_exit_code(1);
      return;
    }
    set_exit_code(serve(*args));
  });
});

}  // namespace
}  // namespace mopt::cli
