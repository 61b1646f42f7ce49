// The OpenAI-compatible server: routes, auth, CORS, request validation and tokenization on HTTP threads, hand-off
// to the Engine, and per-request channels that the HTTP thread drains into SSE or JSON.
//
//   HTTP thread: parse + validate (openai.h) -> chat template -> tokenize -> Engine::add_request(spec, callback)
//   engine thread: callback(RequestOutput) -> Channel (queue + condvar)
//   HTTP thread: Channel -> SSE chunks / one JSON body; client gone -> Engine::abort
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "server/access_log.h"
#include "server/console.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/test_fault.h"
#include "server/reasoning.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace mopt::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<std::string> served_model_names;  // first = the name reported; all are accepted as "model"
  std::string api_key;                          // "" = no auth
  std::vector<std::string> allowed_origins;     // CORS; "*" = any
  HttpLimits http;
  ApiLimits api;
  double drain_grace_s = 30;    // SIGTERM: how long in-flight requests may take to finish
  double health_stall_s = 30;   // /health fails when work is pending and no engine step finished for this long
  bool web_console = true;      // GET / serves the web console (server/console.h)
  std::string root_path;        // prefix a proxy serves us under ("" or "/a/b", see check_root_path())
  TestFault test_fault = TestFault::kNone;  // test-only defects for mopt gate's tests (server/test_fault.h)
  std::shared_ptr<const TlsContext> tls;  // --ssl-certfile / --ssl-keyfile: serve HTTPS (nullptr: HTTP)
  bool metrics_compat_vllm = false;  // --metrics-compat vllm: /metrics also has vLLM's series (server/metrics.h)
  std::optional<ToolParserKind> tool_parser;     // --tool-call-parser; unset: from the chat template
  ReasoningKind reasoning = ReasoningKind::kNone;  // --reasoning-parser
  bool log_requests = true;  // one access-log line per request (server/access_log.h); --disable-log-requests
  // Where access-log lines go (tests capture them); unset: the log at level info (stderr).
  std::function<void(const std::string&)> access_log;
};

// What the server serves, attached once the model is loaded (until then generation answers 503 + Retry-After).
struct ServedModel {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  std::optional<ChatTemplate> chat_template;
  int max_model_len = 0;
  json card;  // GET /model_card (server/model_card.h)
  // Filled by attach():
  ToolParserKind tool_parser = ToolParserKind::kNone;
  bool tool_markers_special = false;       // the format's markers are control tokens: render special tokens
  bool think_markers_special = false;      // <think> / </think> are control tokens: the same with a reasoning parser
  std::shared_ptr<GrammarCache> grammars;  // structured output, per tokenizer
};

// Used when the model has no chat template and none is given with --chat-template.
extern const char* const kDefaultChatTemplate;

class Server {
 public:
  explicit Server(ServeOptions opts);
  ~Server();

  Status listen();              // binds host:port (port 0 = any; see port())
  int port() const { return http_->port(); }
  void attach(ServedModel model);
  // While loading: what the server is doing ("reading weights", "warm-up 3/40"), reported by /health's 503 body.
  void set_loading_phase(std::string phase);
  void serve();                 // accept loop; returns after begin_drain()
  // Stops accepting; in-flight requests go on. Call wait_drained() next.
  void begin_drain();
  // Waits for in-flight requests up to the grace period (or `seconds` when given); true when all finished.
  bool wait_drained();
  bool wait_drained(double seconds);
  int in_flight() const { return http_->active_connections(); }
  void close_connections() { http_->close_all(); }

  ServerMetrics& metrics() { return metrics_; }
  // Routes one request and writes its access-log line (public for tests).
  void handle(const HttpRequest& req, ResponseWriter& w);

 private:
  struct Route;
  void send_json(ResponseWriter& w, int status, const std::string& body, const HttpRequest& req,
                 Headers extra = {});
  void send_error(ResponseWriter& w, const ApiError& e, const HttpRequest& req, Headers extra = {});
  // CORS headers for an allowed Origin, and the client's X-Request-Id echoed.
  Headers response_headers(const HttpRequest& req) const;
  uint64_t response_number();  // the next response id's number (unique per instance, random across instances)
  bool authorized(const HttpRequest& req) const;
  bool model_known(const std::string& name) const;
  const ServedModel* model() const;  // null while loading

  void route(const HttpRequest& req, ResponseWriter& w, AccessRecord& rec);
  void write_access_log(const std::string& line);  // to ServeOptions::access_log, else the log
  void handle_health(const HttpRequest& req, ResponseWriter& w);
  void handle_metrics(const HttpRequest& req, ResponseWriter& w);
  void handle_console(const HttpRequest& req, ResponseWriter& w);
  void handle_models(const HttpRequest& req, ResponseWriter& w);
  void handle_tokenize(const HttpRequest& req, ResponseWriter& w);
  void handle_detokenize(const HttpRequest& req, ResponseWriter& w);
  void handle_generate(const HttpRequest& req, ResponseWriter& w, bool chat, AccessRecord& rec);
  // The chat prompt of a chat request (its messages, tools and chat_template_kwargs through the template).
  Result<std::string> render_chat_prompt(const GenerateRequest& g) const;

  ServeOptions opts_;
  std::unique_ptr<HttpServer> http_;
  ServerMetrics metrics_;
  std::unique_ptr<WebConsole> console_;  // null with --no-web-console
  FaultInjector faults_;
  std::atomic<bool> loaded_{false};
  ServedModel model_;  // written once before loaded_ is set
  std::atomic<uint64_t> next_id_{1};
  uint64_t id_salt_ = 0;  // random per instance: response ids differ between servers
  int64_t created_ = 0;
  double attach_time_ = 0;  // monotonic seconds when the model was attached
  std::mutex phase_mu_;
  std::string loading_phase_;  // under phase_mu_
};

}  // namespace mopt::server
