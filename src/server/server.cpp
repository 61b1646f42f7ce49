#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <random>

#include "core/log.h"
#include "core/rng.h"
#include "core/strfmt.h"
#include "core/strings.h"
#include "server/chat_output.h"
#include "server/prompt_logprobs.h"
#include "server/request_grammar.h"

namespace mopt::server {

const char* const kDefaultChatTemplate =
    "{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] or '' }}\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}";

namespace {

using Clock = std::chrono::steady_clock;

double monotonic_now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* finish_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: return "none";
  }
  return "none";
}

// Outputs of one HTTP request's engine requests (one per choice), filled on the engine thread.
struct Channel {
  struct Event {
    int choice;
    RequestOutput out;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> q;
};

struct Choice {
  int index = 0;
  int prompt = 0;
  uint64_t request_id = 0;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  std::string text;
  int completion_tokens = 0;
  int prompt_tokens = 0;
  json logprobs;  // accumulated (non-streaming)
  int text_offset = 0;
  bool prompt_scored = false;       // echo + logprobs: the echoed prompt's logprobs were added (first output)
  bool grammar_dead_end = false;    // kError: the grammar could not go on (the text so far is returned)
  std::unique_ptr<ChatOutput> out;  // chat: reasoning / content / tool-call split
};

// The API's finish_reason: "tool_calls" when a chat choice stopped after calling tools.
const char* finish_label(const Choice& c) {
  if (c.reason == FinishReason::kStop && c.out && c.out->has_tool_calls()) return "tool_calls";
  return finish_name(c.reason);
}

// Completions max_tokens 0 (GenerateRequest::score_only): the one token the engine sampled is not the client's.
void drop_generated(RequestOutput& o) {
  o.new_tokens.clear();
  o.text.clear();
  o.token_logprobs.clear();
  o.top_logprobs.clear();
  o.completion_tokens = 0;
  if (o.finish_reason == FinishReason::kStop) o.finish_reason = FinishReason::kLength;  // it was an end token
}

// X-Request-Id: 1 to 256 visible ASCII characters (it is echoed in a header and becomes part of the response id).
bool valid_request_id(const std::string& v) {
  return !v.empty() && v.size() <= 256 && std::all_of(v.begin(), v.end(), [](char c) { return c > 32 && c < 127; });
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

Server::Server(ServeOptions opts) : opts_(std::move(opts)), faults_(opts_.test_fault) {
  if (opts_.test_fault != TestFault::kNone)
    MOPT_LOG_WARN("--test-fault %s is armed: this server has a planted defect (a test-only switch)",
                  test_fault_name(opts_.test_fault));
  if (opts_.served_model_names.empty()) opts_.served_model_names.push_back("mopt");
  created_ = static_cast<int64_t>(std::time(nullptr));
  std::random_device rd;  // ids differ between instances started the same way
  id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  if (opts_.web_console) console_ = std::make_unique<WebConsole>(opts_.root_path);
  http_ = std::make_unique<HttpServer>(
      opts_.http, [this](const HttpRequest& req, ResponseWriter& w) { handle(req, w); },
      [this](int status, const std::string& msg, const std::string& code) {
        (status >= 500 ? metrics_.http_errors_5xx : metrics_.http_errors_4xx).fetch_add(1);
        return error_body(status, msg, code);
      },
      opts_.tls, [this](const std::string& remote, int status, const std::string& msg) {
        if (opts_.log_requests) write_access_log(access_error_line(remote, status, msg));
      });
}

Server::~Server() = default;

Status Server::listen() { return http_->listen(opts_.host, opts_.port); }

void Server::attach(ServedModel model) {
  model_ = std::move(model);
  if (opts_.tool_parser) {
    model_.tool_parser = *opts_.tool_parser;
  } else if (model_.chat_template) {
    model_.tool_parser = detect_tool_parser(model_.chat_template->source());
  }
  if (model_.tokenizer) {
    auto any_control = [&](const std::vector<std::string>& markers) {
      for (const std::string& m : markers) {
        const int32_t id = model_.tokenizer->token_id(m);
        if (id >= 0 && model_.tokenizer->is_control(id)) return true;
      }
      return false;
    };
    model_.tool_markers_special = any_control(tool_parser_markers(model_.tool_parser));
    model_.think_markers_special = any_control({"<think>", "</think>"});
    model_.grammars = std::make_shared<GrammarCache>(*model_.tokenizer);
  }
  MOPT_LOG_INFO("tool calls: %s%s; reasoning parser: %s", tool_parser_name(model_.tool_parser),
                opts_.tool_parser ? " (--tool-call-parser)" : " (from the chat template)",
                reasoning_parser_name(opts_.reasoning));
  attach_time_ = monotonic_now();
  loaded_.store(true);
}

void Server::set_loading_phase(std::string phase) {
  std::lock_guard<std::mutex> lk(phase_mu_);
  loading_phase_ = std::move(phase);
}

const ServedModel* Server::model() const { return loaded_.load() ? &model_ : nullptr; }

void Server::serve() { http_->serve(); }

void Server::begin_drain() { http_->stop_accepting(); }

bool Server::wait_drained() { return http_->wait_idle(opts_.drain_grace_s); }
bool Server::wait_drained(double seconds) { return http_->wait_idle(seconds); }

// ------------------------------------------------------------------------------------------------ helpers

uint64_t Server::response_number() {
  uint64_t s = id_salt_ + next_id_.fetch_add(1);
  return splitmix64(s);  // a bijection of the counter: no two ids of one instance are equal
}

Headers Server::response_headers(const HttpRequest& req) const {
  Headers h;
  const std::string& origin = req.header("origin");
  if (!origin.empty())
    for (const auto& o : opts_.allowed_origins)
      if (o == "*" || o == origin) {
        h = {{"Access-Control-Allow-Origin", o == "*" ? "*" : origin}, {"Vary", "Origin"}};
        break;
      }
  const std::string& rid = req.header("x-request-id");
  if (valid_request_id(rid)) h.emplace_back("X-Request-Id", rid);
  return h;
}

void Server::send_json(ResponseWriter& w, int status, const std::string& body, const HttpRequest& req,
                       Headers extra) {
  Headers h{{"Content-Type", "application/json"}};
  for (auto& kv : response_headers(req)) h.push_back(std::move(kv));
  for (auto& kv : extra) h.push_back(std::move(kv));
  if (status >= 500) metrics_.http_errors_5xx.fetch_add(1);
  else if (status >= 400) metrics_.http_errors_4xx.fetch_add(1);
  w.send(status, h, body);
}

void Server::send_error(ResponseWriter& w, const ApiError& e, const HttpRequest& req, Headers extra) {
  send_json(w, e.status, error_body(e), req, std::move(extra));
}

bool Server::authorized(const HttpRequest& req) const {
  if (opts_.api_key.empty()) return true;
  const std::string& auth = req.header("authorization");
  static const std::string kBearer = "Bearer ";
  std::string given = auth.size() > kBearer.size() && lower(auth.substr(0, kBearer.size())) == "bearer "
                          ? auth.substr(kBearer.size())
                          : std::string();
  return constant_time_equal(given, opts_.api_key);
}

bool Server::model_known(const std::string& name) const {
  return std::find(opts_.served_model_names.begin(), opts_.served_model_names.end(), name) !=
         opts_.served_model_names.end();
}

// ------------------------------------------------------------------------------------------------ routing

void Server::handle(const HttpRequest& req, ResponseWriter& w) {
  const auto start = Clock::now();
  AccessRecord rec;
  route(req, w, rec);
  if (!opts_.log_requests) return;
  write_access_log(
      access_log_line(req, w.status(), std::chrono::duration<double>(Clock::now() - start).count(), rec));
}

void Server::write_access_log(const std::string& line) {
  if (opts_.access_log) opts_.access_log(line);
  else MOPT_LOG_INFO("%s", line.c_str());
}

void Server::route(const HttpRequest& req, ResponseWriter& w, AccessRecord& rec) {
  metrics_.http_requests.fetch_add(1);
  struct RouteDef {
    const char* path;
    const char* method;
    bool needs_auth;
  };
  static const RouteDef kRoutes[] = {
      {"/health", "GET", false},         {"/metrics", "GET", false},          {"/v1/models", "GET", true},
      {"/tokenize", "POST", true},       {"/detokenize", "POST", true},       {"/v1/completions", "POST", true},
      {"/v1/chat/completions", "POST", true},
      {"/", "GET", false},               {"/model_card", "GET", true},
  };
  if (req.has_header("x-request-id") && !valid_request_id(req.header("x-request-id")))
    return send_error(w, bad_request("the X-Request-Id header must be 1 to 256 visible ASCII characters (no spaces "
                                     "or control characters)", "", "invalid_request_id"), req);
  const std::string path = strip_root_path(req.path, opts_.root_path);
  const RouteDef* route = nullptr;
  for (const auto& r : kRoutes)
    if (path == r.path && (console_ || path != "/")) route = &r;
  if (!route) {
    const std::string msg =
        "no route " + req.path + " (see /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics" +
        (path == "/" ? "; the web console is off: --no-web-console)" : ")");
    return send_error(w, api_error(404, msg, "not_found"), req);
  }
  if (http_->draining()) w.set_close();
  if (req.method == "OPTIONS") {  // CORS preflight
    Headers h = response_headers(req);
    h.emplace_back("Allow", std::string(route->method) + ", OPTIONS");
    if (!h.empty() && h.front().first == "Access-Control-Allow-Origin") {
      h.emplace_back("Access-Control-Allow-Methods", std::string(route->method) + ", OPTIONS");
      h.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id");
      h.emplace_back("Access-Control-Max-Age", "600");
    }
    w.send(204, h, "");
    return;
  }
  bool method_ok = req.method == route->method || (req.method == "HEAD" && std::string(route->method) == "GET");
  if (!method_ok) {
    const std::string msg =
        strfmt("method %s is not allowed on %s (use %s)", req.method.c_str(), req.path.c_str(), route->method);
    return send_error(w, api_error(405, msg, "method_not_allowed"), req,
                      {{"Allow", std::string(route->method) + ", OPTIONS"}});
  }
  if (route->needs_auth && !authorized(req)) {
    const char* msg = "invalid or missing API key: send the header 'Authorization: Bearer <key>'";
    return send_error(w, api_error(401, msg, "invalid_api_key"), req, {{"WWW-Authenticate", "Bearer"}});
  }
  if (std::string(route->method) == "POST") {
    std::string ct = lower(req.header("content-type"));
    if (ct.compare(0, 16, "application/json") != 0) {
      const std::string msg = "the body must be JSON: send 'Content-Type: application/json'" +
                              (ct.empty() ? std::string() : " (got '" + req.header("content-type") + "')");
      return send_error(w, api_error(415, msg, "unsupported_media_type"), req);
    }
  }
  if (path == "/health") return handle_health(req, w);
  if (path == "/metrics") return handle_metrics(req, w);
  if (path == "/") return handle_console(req, w);
  if (!model()) {
    return send_error(w, api_error(503, "the model is still loading; retry shortly", "model_loading"), req,
                      {{"Retry-After", "2"}});
  }
  if (path == "/v1/models") return handle_models(req, w);
  if (path == "/model_card") return send_json(w, 200, dump(model_.card), req);
  if (path == "/tokenize") return handle_tokenize(req, w);
  if (path == "/detokenize") return handle_detokenize(req, w);
  handle_generate(req, w, path == "/v1/chat/completions", rec);
}

Result<std::string> Server::render_chat_prompt(const GenerateRequest& g) const {
  const Tokenizer& tok = *model_.tokenizer;
  std::string bos = tok.valid_id(tok.bos()) ? tok.vocab().tokens[tok.bos()] : "";
  std::string eos = tok.valid_id(tok.eos()) ? tok.vocab().tokens[tok.eos()] : "";
  jinja::Value extra{jinja::Dict{}};
  if (g.template_kwargs.is_dict())
    for (const auto& [k, v] : g.template_kwargs.dict()) extra.set(k, v);
  if (!g.tools.is_undefined()) extra.set("tools", g.tools);
  return model_.chat_template->render_chat(g.messages, g.add_generation_prompt, bos, eos, extra);
}

void Server::handle_health(const HttpRequest& req, ResponseWriter& w) {
  const ServedModel* m = model();
  if (!m) {
    std::string phase;
    {
      std::lock_guard<std::mutex> lk(phase_mu_);
      phase = loading_phase_;
    }
    json body{{"status", "loading"}};
    if (!phase.empty()) body["phase"] = phase;
    return send_json(w, 503, dump(body), req, {{"Retry-After", "2"}});
  }
  if (http_->draining()) return send_json(w, 503, R"({"status":"draining"})", req);
  EngineStats s = m->engine->stats();
  if (m->engine->has_unfinished()) {
    double last = std::max(s.last_step_time_s, attach_time_);
    double stalled = monotonic_now() - last;
    if (stalled > opts_.health_stall_s)
      return send_json(w, 503,
                       dump(json{{"status", "stalled"},
                                 {"message", strfmt("no engine step finished for %.1f s with %d requests pending",
                                                    stalled, s.running + s.waiting)}}),
                       req);
  }
  send_json(w, 200, R"({"status":"ok"})", req);
}

void Server::handle_metrics(const HttpRequest& req, ResponseWriter& w) {
  const ServedModel* m = model();
  EngineStats s = m ? m->engine->stats() : EngineStats{};
  Headers h{{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}};
  w.send(200, h, metrics_.render(s, m ? &m->engine->config() : nullptr,
                                 {opts_.metrics_compat_vllm, opts_.served_model_names[0]}));
}

void Server::handle_console(const HttpRequest& req, ResponseWriter& w) {
  w.send(200, console_->headers(), console_->page());
}

void Server::handle_models(const HttpRequest& req, ResponseWriter& w) {
  json data = json::array();
  for (const auto& name : opts_.served_model_names)
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", created_},
                    {"owned_by", "mopt"},
                    {"max_model_len", model_.max_model_len}});
  send_json(w, 200, dump(json{{"object", "list"}, {"data", data}}), req);
}

void Server::handle_tokenize(const HttpRequest& req, ResponseWriter& w) {
  auto parsed = parse_json_body(req.body, opts_.api.max_json_depth);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(w, *e, req);
  const json& body = std::get<json>(parsed);
  const Tokenizer& tok = *model_.tokenizer;
  bool add_special = true;
  if (auto it = body.find("add_special_tokens"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return send_error(w, bad_request("'add_special_tokens' must be a boolean", "add_special_tokens"), req);
    add_special = it->get<bool>();
  }
  if (auto it = body.find("model"); it != body.end() && !it->is_null() &&
                                    (!it->is_string() || !model_known(it->get<std::string>()))) {
    const std::string msg =
        "the model '" + (it->is_string() ? it->get<std::string>() : it->dump()) + "' does not exist";
    return send_error(w, api_error(404, msg, "model_not_found", "model"), req);
  }
  std::vector<int32_t> ids;
  if (auto it = body.find("prompt"); it != body.end() && it->is_string()) {
    ids = tok.encode(it->get<std::string>(), add_special, false);
  } else if (body.contains("messages")) {
    json chat_body = body;
    chat_body["model"] = opts_.served_model_names[0];
    auto r = parse_generate_request(chat_body, true, opts_.api);
    if (auto* e = std::get_if<ApiError>(&r)) return send_error(w, *e, req);
    auto text = render_chat_prompt(std::get<GenerateRequest>(r));
    if (!text) return send_error(w, bad_request(text.message(), "messages", "chat_template_error"), req);
    bool tmpl_has_bos = model_.chat_template->source().find("bos_token") != std::string::npos;
    ids = tok.encode(*text, add_special && !tmpl_has_bos, true);
  } else {
    return send_error(w, bad_request("give 'prompt' (a string) or 'messages'", "prompt"), req);
  }
  json toks = json::array();
  for (int32_t id : ids) toks.push_back(id);
  send_json(w, 200, dump(json{{"count", ids.size()}, {"max_model_len", model_.max_model_len}, {"tokens", toks}}), req);
}

void Server::handle_detokenize(const HttpRequest& req, ResponseWriter& w) {
  auto parsed = parse_json_body(req.body, opts_.api.max_json_depth);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(w, *e, req);
  const json& body = std::get<json>(parsed);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array())
    return send_error(w, bad_request("'tokens' must be an array of token ids", "tokens"), req);
  const Tokenizer& tok = *model_.tokenizer;
  std::vector<int32_t> ids;
  for (const auto& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab() ||
        (t.is_number_unsigned() && t.get<uint64_t>() >= static_cast<uint64_t>(tok.n_vocab())))
      return send_error(w, bad_request(strfmt("'tokens' contains %s, not a token id in [0, %d)", t.dump().c_str(),
                                              tok.n_vocab()), "tokens", "invalid_token_id"), req);
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  send_json(w, 200, dump(json{{"prompt", tok.decode(ids)}}), req);
}

// ------------------------------------------------------------------------------------------------ generation

void Server::handle_generate(const HttpRequest& req, ResponseWriter& w, bool chat, AccessRecord& rec) {
  const auto arrival = Clock::now();
  auto parsed = parse_json_body(req.body, opts_.api.max_json_depth);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(w, *e, req);
  auto pr = parse_generate_request(std::get<json>(parsed), chat, opts_.api);
  if (auto* e = std::get_if<ApiError>(&pr)) return send_error(w, *e, req);
  GenerateRequest& g = std::get<GenerateRequest>(pr);
  if (!model_known(g.model)) {
    const std::string msg = strfmt("the model '%s' does not exist; this server serves '%s'", g.model.c_str(),
                                   opts_.served_model_names[0].c_str());
    return send_error(w, api_error(404, msg, "model_not_found", "model"), req);
  }
  const Tokenizer& tok = *model_.tokenizer;
  Engine& engine = *model_.engine;
  const int max_len = model_.max_model_len;

  // ---- prompts -> token ids
  struct Prompt {
    std::vector<int32_t> ids;
    std::string echo_text;
  };
  std::vector<Prompt> prompts;
  bool prompt_in_thinking = false;  // the chat prompt leaves a <think> block open
  if (chat) {
    auto text = render_chat_prompt(g);
    if (!text) return send_error(w, bad_request(text.message(), "messages", "chat_template_error"), req);
    prompt_in_thinking = prompt_opens_thinking(*text);
    bool tmpl_has_bos = model_.chat_template->source().find("bos_token") != std::string::npos;
    prompts.push_back({tok.encode(*text, !tmpl_has_bos, true), ""});
  } else {
    for (auto& p : g.prompts) {
      if (p.is_tokens) {
        for (int32_t id : p.tokens)
          if (!tok.valid_id(id))
            return send_error(w, bad_request(strfmt("'prompt' contains the token id %d, which is not in the "
                                                    "vocabulary [0, %d)", id, tok.n_vocab()),
                                             "prompt", "invalid_token_id"), req);
        prompts.push_back({p.tokens, g.echo ? tok.decode(p.tokens) : ""});
      } else {
        prompts.push_back({tok.encode(p.text, true, false), p.text});
      }
    }
  }
  for (int32_t id : g.params.stop_token_ids)
    if (!tok.valid_id(id))
      return send_error(w, bad_request(strfmt("'stop_token_ids' contains %d, which is not in the vocabulary", id),
                                       "stop_token_ids", "invalid_token_id"), req);
  int min_room = max_len;
  for (const auto& p : prompts) {
    if (p.ids.empty())
      return send_error(w, bad_request("the prompt is empty after tokenization", chat ? "messages" : "prompt"), req);
    int n = static_cast<int>(p.ids.size());
    if (n >= max_len || (g.max_tokens_given && static_cast<int64_t>(n) + g.params.max_tokens > max_len))
      return send_error(w, bad_request(strfmt("this model's maximum context length is %d tokens; the prompt has %d "
                                              "tokens%s. Shorten the prompt or lower max_tokens.", max_len, n,
                                              g.max_tokens_given ? strfmt(" and max_tokens is %d",
                                                                          g.params.max_tokens).c_str() : ""),
                                       chat ? "messages" : "prompt", "context_length_exceeded"), req);
    min_room = std::min(min_room, max_len - n);
  }
  if (!g.max_tokens_given) g.params.max_tokens = chat ? min_room : std::min(16, min_room);
  rec.prompt_tokens = 0;
  for (const auto& p : prompts) rec.prompt_tokens += static_cast<int>(p.ids.size());

  if (auto fault = faults_.before_request()) return send_error(w, *fault, req);
  if (g.priority != 0 && engine.config().policy != SchedulingPolicy::kPriority)
    return send_error(w, bad_request(strfmt("'priority' (%d) orders requests only under --scheduling-policy "
                                            "priority; this server schedules first come, first served (omit it "
                                            "or send 0)", g.priority), "priority"), req);

  // ---- structured output and tool calls: one grammar for all choices
  auto rg = request_grammar(g, model_, opts_.reasoning, prompt_in_thinking);
  if (auto* e = std::get_if<ApiError>(&rg)) return send_error(w, *e, req);
  const std::shared_ptr<grammar::CompiledGrammar> compiled = std::get<RequestGrammar>(rg).compiled;
  const ToolParserKind tool_parser = std::get<RequestGrammar>(rg).tool_parser;

  // ---- submit one engine request per (prompt, choice)
  auto ch = std::make_shared<Channel>();
  std::vector<Choice> choices;
  const int n_choices = static_cast<int>(prompts.size()) * g.n;
  choices.resize(static_cast<size_t>(n_choices));
  ServerMetrics* metrics = &metrics_;
  auto abort_all = [&] {
    for (auto& c : choices)
      if (c.request_id != 0 && !c.finished) engine.abort(c.request_id);
  };
  for (int i = 0; i < n_choices; ++i) {
    Choice& c = choices[static_cast<size_t>(i)];
    c.index = i;
    c.prompt = i / g.n;
    RequestSpec spec;
    spec.prompt = prompts[static_cast<size_t>(c.prompt)].ids;
    spec.params = g.params;
    if (spec.params.seed && g.n > 1) spec.params.seed = *spec.params.seed + static_cast<uint64_t>(i % g.n);
    spec.priority = g.priority;
    spec.grammar = compiled;
    if (chat) c.out = std::make_unique<ChatOutput>(opts_.reasoning, prompt_in_thinking, tool_parser);
    struct Track {
      Clock::time_point arrival, last;
      bool first = true;
    };
    auto track = std::make_shared<Track>(Track{arrival, arrival, true});
    AddResult ar = engine.add_request(std::move(spec), [ch, i, track, metrics](const RequestOutput& o) {
      auto now = Clock::now();
      if (!o.new_tokens.empty()) {
        if (track->first) {
          double t = std::chrono::duration<double>(now - track->arrival).count();
          metrics->ttft.observe(t);
          if (o.queue_seconds >= 0) metrics->queue_time.observe(o.queue_seconds);
          track->first = false;
        } else {
          double dt = std::chrono::duration<double>(now - track->last).count() / o.new_tokens.size();
          for (size_t k = 0; k < o.new_tokens.size(); ++k) metrics->itl.observe(dt);
        }
        track->last = now;
      }
      if (o.finished) {
        metrics->finish_request(o);
        metrics->e2e.observe(std::chrono::duration<double>(now - track->arrival).count());
      }
      {
        std::lock_guard<std::mutex> lk(ch->mu);
        ch->q.push_back({i, o});
      }
      ch->cv.notify_one();
    });
    if (ar.error != AddError::kNone) {
      abort_all();
      ApiError e;
      Headers extra;
      switch (ar.error) {
        case AddError::kQueueFull:
          e.status = 429;
          e.type = "rate_limit_error";
          e.code = "queue_full";
          extra.emplace_back("Retry-After", "1");
          metrics_.rejected_queue_full.fetch_add(1);
          break;
        case AddError::kTooLong:
          e.status = 400;
          e.code = "context_length_exceeded";
          e.param = chat ? "messages" : "prompt";
          break;
        case AddError::kInvalid:
          e.status = 400;
          break;
        case AddError::kStopped:
          e.status = 503;
          e.type = "service_unavailable";
          e.code = "shutting_down";
          extra.emplace_back("Retry-After", "5");
          break;
        case AddError::kNone: break;
      }
      e.message = ar.message;
      return send_error(w, e, req, extra);
    }
    c.request_id = ar.request_id;
  }

  // ---- drain the channel into SSE or one JSON body
  // The client's X-Request-Id when it sent one (as vLLM does), else a per-instance sequence.
  const std::string& rid = req.header("x-request-id");
  const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") +
                         (rid.empty() ? strfmt("%016llx", static_cast<unsigned long long>(
                                                              response_number()))
                                      : rid);
  rec.id = id;
  const std::string model_name = g.model;
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const char* object = chat ? (g.stream ? "chat.completion.chunk" : "chat.completion")
                            : "text_completion";
  auto chunk_base = [&]() {
    return json{{"id", id}, {"object", object}, {"created", created}, {"model", model_name}};
  };
  auto logprob_entries = [&](const RequestOutput& o, Choice& c, json& dst) {
    // chat: dst is the "content" array; completions: dst has tokens/token_logprobs/top_logprobs/text_offset
    for (size_t k = 0; k < o.new_tokens.size() && k < o.token_logprobs.size(); ++k) {
      std::string t = tok.token_bytes(o.new_tokens[k]);
      if (chat) {
        json top = json::array();
        if (k < o.top_logprobs.size())
          for (const auto& alt : o.top_logprobs[k]) {
            std::string at = tok.token_bytes(alt.id);
            top.push_back({{"token", at}, {"logprob", alt.logprob}, {"bytes", bytes_of(at)}});
          }
        dst.push_back({{"token", t}, {"logprob", o.token_logprobs[k].logprob}, {"bytes", bytes_of(t)},
                       {"top_logprobs", top}});
      } else {
        json top = json::object();
        if (k < o.top_logprobs.size())
          for (const auto& alt : o.top_logprobs[k]) top[tok.token_bytes(alt.id)] = alt.logprob;
        dst["tokens"].push_back(t);
        dst["token_logprobs"].push_back(o.token_logprobs[k].logprob);
        dst["top_logprobs"].push_back(top);
        dst["text_offset"].push_back(c.text_offset);
        c.text_offset += static_cast<int>(t.size());
      }
    }
  };
  auto empty_logprobs = [&]() {
    return chat ? json{{"content", json::array()}}
                : json{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
                       {"text_offset", json::array()}};
  };
  auto usage = [&]() {
    int pt = 0, ct = 0;
    for (const auto& p : prompts) pt += static_cast<int>(p.ids.size());
    for (const auto& c : choices) ct += c.completion_tokens;
    return json{{"prompt_tokens", pt}, {"completion_tokens", ct}, {"total_tokens", pt + ct}};
  };

  bool stream_ok = true;
  if (g.stream) {
    Headers h{{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-cache"}};
    for (auto& kv : response_headers(req)) h.push_back(std::move(kv));
    stream_ok = w.begin_stream(200, h);
    if (stream_ok && chat) {  // role first, as OpenAI does
      std::string out;
      for (const auto& c : choices) {
        json j = chunk_base();
        j["choices"] = json::array({{{"index", c.index}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr}, {"finish_reason", nullptr}}});
        if (g.include_usage) j["usage"] = g.continuous_usage ? usage() : json(nullptr);
        out += "data: " + dump(j) + "\n\n";
      }
      stream_ok = w.write_chunk(out);
    }
    if (stream_ok && g.echo && g.logprobs < 0) {  // with logprobs, the echo comes with the first output
      std::string out;
      for (const auto& c : choices) {
        json j = chunk_base();
        j["choices"] = json::array({{{"index", c.index}, {"text", prompts[static_cast<size_t>(c.prompt)].echo_text},
                                     {"logprobs", nullptr}, {"finish_reason", nullptr}}});
        if (g.include_usage) j["usage"] = g.continuous_usage ? usage() : json(nullptr);
        out += "data: " + dump(j) + "\n\n";
      }
      stream_ok = w.write_chunk(out);
    }
  } else if (g.echo) {
    for (auto& c : choices) c.text = prompts[static_cast<size_t>(c.prompt)].echo_text;
  }
  if (g.logprobs >= 0)
    for (auto& c : choices) c.logprobs = empty_logprobs();

  int unfinished = n_choices;
  while (unfinished > 0) {
    std::deque<Channel::Event> batch;
    {
      std::unique_lock<std::mutex> lk(ch->mu);
      ch->cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return !ch->q.empty(); });
      batch.swap(ch->q);
    }
    if (!stream_ok || w.client_gone()) {
      abort_all();
      rec.client_gone = true;
      metrics_.client_disconnects.fetch_add(1);
      w.set_close();
      MOPT_LOG_DEBUG("client %s went away; aborted %s", req.remote.c_str(), id.c_str());
      return;
    }
    std::string out;
    for (auto& ev : batch) {
      Choice& c = choices[static_cast<size_t>(ev.choice)];
      RequestOutput& o = ev.out;
      if (c.finished) continue;
      if (rec.ttft_s < 0 && !o.new_tokens.empty())
        rec.ttft_s = std::chrono::duration<double>(Clock::now() - arrival).count();
      if (g.score_only) drop_generated(o);
      if (g.echo && g.logprobs >= 0 && !c.prompt_scored) {
        c.prompt_scored = true;
        const Prompt& p = prompts[static_cast<size_t>(c.prompt)];
        if (g.stream) {
          json plp = empty_logprobs();
          c.text_offset = append_prompt_logprobs(tok, p.ids, o, plp);
          json j = chunk_base();
          j["choices"] = json::array({{{"index", c.index}, {"text", p.echo_text}, {"logprobs", std::move(plp)},
                                       {"finish_reason", nullptr}}});
          if (g.include_usage) j["usage"] = g.continuous_usage ? usage() : json(nullptr);
          out += "data: " + dump(j) + "\n\n";
        } else {
          c.text_offset = append_prompt_logprobs(tok, p.ids, o, c.logprobs);
        }
      }
      c.completion_tokens = o.completion_tokens;
      c.prompt_tokens = o.prompt_tokens;
      json lp = nullptr;
      if (g.logprobs >= 0 && !o.new_tokens.empty()) {
        if (g.stream) {
          lp = empty_logprobs();
          logprob_entries(o, c, chat ? lp["content"] : lp);
        } else {
          logprob_entries(o, c, chat ? c.logprobs["content"] : c.logprobs);
        }
      }
      if (o.finished) {
        c.finished = true;
        c.reason = o.finish_reason;
        c.error = o.error;
        c.grammar_dead_end = o.grammar_dead_end;
        --unfinished;
        if (o.grammar_dead_end) MOPT_LOG_WARN("request %s choice %d: %s", id.c_str(), c.index, o.error.c_str());
      }
      if (!g.stream) {
        c.text += o.text;
        continue;
      }
      if (o.finish_reason == FinishReason::kError && !o.grammar_dead_end) {
        MOPT_LOG_ERROR("request %s choice %d failed: %s", id.c_str(), c.index, o.error.c_str());
        json err = json::parse(error_body(500, "generation failed (see the server log)", "internal_error"));
        out += "data: " + dump(err) + "\n\n";
        continue;
      }
      json delta;
      if (chat) {
        delta = c.out->delta(o.text, o.finished);
        if (delta.empty() && !o.finished && lp.is_null()) continue;
        if (delta.empty() && !o.finished) delta["content"] = "";
      } else if (o.text.empty() && !o.finished && lp.is_null()) {
        continue;
      }
      json j = chunk_base();
      json choice = {{"index", c.index}};
      if (chat) choice["delta"] = std::move(delta);
      else choice["text"] = o.text;
      choice["logprobs"] = lp;
      choice["finish_reason"] = o.finished ? json(finish_label(c)) : json(nullptr);
      j["choices"] = json::array({choice});
      if (g.include_usage) j["usage"] = g.continuous_usage ? usage() : json(nullptr);
      out += "data: " + dump(j) + "\n\n";
    }
    if (g.stream && !out.empty()) stream_ok = w.write_chunk(out);
  }
  rec.completion_tokens = 0;
  for (const auto& c : choices) rec.completion_tokens += c.completion_tokens;
  rec.finish = finish_label(choices[0]);  // streaming: the deltas parsed the tool calls already
  if (g.stream) {
    if (!stream_ok) {
      rec.client_gone = true;
      metrics_.client_disconnects.fetch_add(1);
      return;
    }
    std::string out;
    if (g.include_usage) {
      json j = chunk_base();
      j["choices"] = json::array();
      j["usage"] = usage();
      out += "data: " + dump(j) + "\n\n";
    }
    out += "data: [DONE]\n\n";
    if (w.write_chunk(out)) w.end_stream();
    return;
  }
  for (const auto& c : choices)
    if (c.reason == FinishReason::kError && !c.grammar_dead_end) {
      MOPT_LOG_ERROR("request %s choice %d failed: %s", id.c_str(), c.index, c.error.c_str());
      return send_error(w, api_error(500, "generation failed (see the server log)", "internal_error"), req);
    }
  json arr = json::array();
  for (const auto& c : choices) {
    json item = {{"index", c.index}};
    if (chat) item["message"] = c.out->message(c.text);
    else item["text"] = c.text;
    item["logprobs"] = g.logprobs >= 0 ? c.logprobs : json(nullptr);
    item["finish_reason"] = finish_label(c);
    arr.push_back(std::move(item));
  }
  rec.finish = finish_label(choices[0]);  // after message(): tool calls are parsed
  json body = chunk_base();
  body["choices"] = std::move(arr);
  body["usage"] = usage();
  send_json(w, 200, dump(body), req);
}

}  // namespace mopt::server
