#include "loadgen/fake_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/http_head.h"
#include "loadgen/net.h"
#include "core/log.h"

namespace mopt::loadgen {

using json = nlohmann::json;

namespace {

constexpr size_t kMaxRequestBytes = 16u << 20;
constexpr size_t kMaxOutBytes = 64u << 20;
const char* const kWords[] = {" the", " cat", " sat", " on", " a", " mat", " and", " then", " it", " ran",
                              " to", " see", " big", " red", " ball", " in", " park", " with", " her", " dog"};

struct ServerConn {
  int fd = -1;
  uint64_t gen = 0;
  std::string in;   // bytes received, not yet consumed
  std::string out;  // bytes to send
  size_t out_off = 0;
  bool busy = false;         // a request is being answered
  bool close_after = false;  // close once `out` is flushed
  bool epollout = false;
  bool dirty = false;
};

struct Stream {
  uint64_t idx = 0;
  int fd = -1;
  uint64_t conn_gen = 0;
  bool chat = false, stream = true, usage = false;
  int max_tokens = 16, sent = 0, prompt_tokens = 0;
  Rng rng{1};
  int64_t next_ns = 0;     // scheduled time of the next token
  int64_t arrived_ns = 0;  // request parsed
  int64_t last_sent_ns = 0;
  std::string text;        // non-streaming: accumulated completion
};

int count_words(const std::string& s) {
  int n = 0;
  bool in_word = false;
  for (char c : s) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (!space && !in_word) ++n;
    in_word = !space;
  }
  return n;
}

std::string chunk(std::string_view payload) {
  return strfmt("%zx\r\n", payload.size()) + std::string(payload) + "\r\n";
}

}  // namespace

struct FakeServer::Impl {
  FakeServerOptions opts;
  FakeServer* owner = nullptr;
  int listen_fd = -1, epfd = -1, timer_fd = -1, stop_fd = -1;
  uint64_t next_gen = 1;
  uint64_t next_idx = 0;
  std::unordered_map<int, ServerConn> conns;
  std::unordered_map<uint64_t, Stream> streams;
  using Ev = std::pair<int64_t, uint64_t>;  // (time ns, stream idx)
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> events;
  std::deque<uint64_t> waiting;  // streams waiting for a slot
  int running = 0;
  std::vector<int> dirty;
  int64_t armed_ns = -1;

  // Metrics (served on /metrics).
  uint64_t m_prompt_tokens = 0, m_generation_tokens = 0, m_success = 0, m_failed = 0;
  static constexpr double kTtftBuckets[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
  uint64_t m_ttft_counts[std::size(kTtftBuckets) + 1] = {};
  double m_ttft_sum = 0;

  mutable std::mutex rec_mu;
  std::vector<InjectedRequest> recs;

  ~Impl() {
    for (auto& [fd, c] : conns) close(fd);
    for (int fd : {listen_fd, epfd, timer_fd, stop_fd})
      if (fd >= 0) close(fd);
  }

  void add_fd(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
  }

  void run() {
    std::vector<epoll_event> evs(256);
    for (;;) {
      // Fire due token events first, then arm the timer for the next one.
      const int64_t now = now_ns();
      while (!events.empty() && events.top().first <= now) {
        const uint64_t idx = events.top().second;
        events.pop();
        on_token(idx);
      }
      flush_dirty();
      const int timeout = (!events.empty() && events.top().first <= now_ns()) ? 0 : -1;
      if (!events.empty() && timeout < 0) arm(events.top().first);
      const int n = epoll_wait(epfd, evs.data(), static_cast<int>(evs.size()), timeout);
      if (n < 0 && errno != EINTR) {
        MOPT_LOG_ERROR("fake server: epoll_wait: %s", std::strerror(errno));
        return;
      }
      for (int i = 0; i < n; ++i) {
        const int fd = evs[i].data.fd;
        if (fd == stop_fd) return;
        if (fd == timer_fd) {
          uint64_t x;
          [[maybe_unused]] ssize_t r = read(timer_fd, &x, sizeof x);
          armed_ns = -1;
          continue;
        }
        if (fd == listen_fd) {
          accept_all();
          continue;
        }
        auto it = conns.find(fd);
        if (it == conns.end()) continue;
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(it->second);
        it = conns.find(fd);
        if (it != conns.end() && (evs[i].events & EPOLLOUT)) flush(it->second);
      }
      flush_dirty();
    }
  }

  void arm(int64_t at_ns) {
    if (armed_ns == at_ns) return;
    armed_ns = at_ns;
    arm_timer(timer_fd, at_ns);
  }

  void accept_all() {
    for (;;) {
      const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ServerConn c;
      c.fd = fd;
      c.gen = next_gen++;
      conns[fd] = std::move(c);
      add_fd(fd, EPOLLIN | EPOLLRDHUP);
    }
  }

  void close_conn(int fd) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    conns.erase(fd);
  }

  void on_readable(ServerConn& c) {
    char buf[65536];
    for (;;) {
      const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > kMaxRequestBytes) {
          respond_error(c, 413, "request exceeds 16 MiB");
          c.close_after = true;
          c.in.clear();
          return;
        }
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        close_conn(c.fd);  // streams on it notice the missing connection and stop
        return;
      }
      if (errno == EAGAIN) break;
    }
    process_input(c);
  }

  void process_input(ServerConn& c) {
    while (!c.busy && !c.close_after && !c.in.empty()) {
      http::Head head;
      const http::HeadParse parsed = http::parse_head(c.in, http::HeadKind::kRequest, {}, &head);
      if (!parsed.ok()) {
        respond_error(c, parsed.error_status, parsed.error);
        c.close_after = true;
        return;
      }
      if (parsed.used == 0) return;
      if (head.chunked) {
        respond_error(c, 411, "chunked request bodies are not supported; send Content-Length");
        c.close_after = true;
        return;
      }
      const size_t body_len = head.content_length < 0 ? 0 : static_cast<size_t>(head.content_length);
      if (body_len > kMaxRequestBytes) {
        respond_error(c, 413, "request body exceeds 16 MiB");
        c.close_after = true;
        return;
      }
      if (c.in.size() < parsed.used + body_len) return;
      std::string body = c.in.substr(parsed.used, body_len);
      c.in.erase(0, parsed.used + body_len);
      if (!head.keep_alive) c.close_after = true;
      handle(c, head, body);
    }
  }

  void send_bytes(ServerConn& c, std::string_view s) {
    if (c.out.size() - c.out_off + s.size() > kMaxOutBytes) {
      c.close_after = true;  // the client does not read; give up on it
      return;
    }
    c.out.append(s);
    if (!c.dirty) {
      c.dirty = true;
      dirty.push_back(c.fd);
    }
  }

  void respond(ServerConn& c, int status, const char* reason, const char* ctype, const std::string& body) {
    send_bytes(c, strfmt("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n", status, reason, ctype,
                         body.size(), c.close_after ? "Connection: close\r\n" : ""));
    send_bytes(c, body);
  }
  void respond_error(ServerConn& c, int status, const std::string& msg) {
    json j = {{"error", {{"message", msg}, {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                         {"code", status}}}};
    respond(c, status, http::reason_phrase(status), "application/json", j.dump());
  }

  void flush_dirty() {
    for (int fd : dirty) {
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      it->second.dirty = false;
      flush(it->second);
    }
    dirty.clear();
  }

  void flush(ServerConn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n = send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EAGAIN) {
        if (!c.epollout) {
          epoll_event ev{};
          ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
          ev.data.fd = c.fd;
          epoll_ctl(epfd, EPOLL_CTL_MOD, c.fd, &ev);
          c.epollout = true;
        }
        return;
      }
      if (n < 0 && errno == EINTR) continue;
      close_conn(c.fd);
      return;
    }
    c.out.clear();
    c.out_off = 0;
    if (c.epollout) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = c.fd;
      epoll_ctl(epfd, EPOLL_CTL_MOD, c.fd, &ev);
      c.epollout = false;
    }
    if (c.close_after && !c.busy) close_conn(c.fd);
  }

  std::string metrics_text() const {
    std::string s;
    s += "# HELP mopt:prompt_tokens_total Prompt tokens processed.\n# TYPE mopt:prompt_tokens_total counter\n";
    s += strfmt("mopt:prompt_tokens_total %llu\n", static_cast<unsigned long long>(m_prompt_tokens));
    s += "# HELP mopt:generation_tokens_total Tokens generated.\n# TYPE mopt:generation_tokens_total counter\n";
    s += strfmt("mopt:generation_tokens_total %llu\n", static_cast<unsigned long long>(m_generation_tokens));
    s += "# TYPE mopt:request_success_total counter\n";
    s += strfmt("mopt:request_success_total{finished_reason=\"length\"} %llu\n", static_cast<unsigned long long>(m_success));
    s += "# TYPE mopt:request_failure_total counter\n";
    s += strfmt("mopt:request_failure_total %llu\n", static_cast<unsigned long long>(m_failed));
    s += "# TYPE mopt:num_requests_running gauge\n";
    s += strfmt("mopt:num_requests_running %d\n", running);
    s += "# TYPE mopt:num_requests_waiting gauge\n";
    s += strfmt("mopt:num_requests_waiting %zu\n", waiting.size());
    s += "# HELP mopt:time_to_first_token_seconds Injected first-token delay.\n";
    s += "# TYPE mopt:time_to_first_token_seconds histogram\n";
    uint64_t cum = 0;
    for (size_t i = 0; i < std::size(kTtftBuckets); ++i) {
      cum += m_ttft_counts[i];
      s += strfmt("mopt:time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", kTtftBuckets[i],
                  static_cast<unsigned long long>(cum));
    }
    cum += m_ttft_counts[std::size(kTtftBuckets)];
    s += strfmt("mopt:time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n", static_cast<unsigned long long>(cum));
    s += strfmt("mopt:time_to_first_token_seconds_sum %.9g\n", m_ttft_sum);
    s += strfmt("mopt:time_to_first_token_seconds_count %llu\n", static_cast<unsigned long long>(cum));
    return s;
  }

  void handle(ServerConn& c, const http::Head& head, const std::string& body) {
    std::string path = head.target.substr(0, head.target.find('?'));
    if (head.method == "GET" && path == "/health") return respond(c, 200, "OK", "text/plain", "ok\n");
    if (head.method == "GET" && path == "/metrics")
      return respond(c, 200, "OK", "text/plain; version=0.0.4", metrics_text());
    if (head.method == "GET" && path == "/v1/models")
      return respond(c, 200, "OK", "application/json",
                     R"({"object":"list","data":[{"id":"fake","object":"model","owned_by":"mopt"}]})");
    const bool chat = path == "/v1/chat/completions";
    if (!(path == "/v1/completions" || chat)) return respond_error(c, 404, "no route " + head.method + " " + path);
    if (head.method != "POST") return respond_error(c, 404, "use POST for " + path);
    json req = json::parse(body, nullptr, false);
    if (req.is_discarded() || !req.is_object()) return respond_error(c, 400, "request body is not a JSON object");
    Stream s;
    s.chat = chat;
    s.arrived_ns = now_ns();
    s.max_tokens = opts.default_max_tokens;
    for (const char* key : {"max_tokens", "max_completion_tokens"}) {
      auto it = req.find(key);
      if (it == req.end() || it->is_null()) continue;
      if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 1000000)
        return respond_error(c, 400, std::string(key) + " must be an integer in [1, 1000000]");
      s.max_tokens = static_cast<int>(it->get<int64_t>());
    }
    s.stream = req.value("stream", false);
    if (auto so = req.find("stream_options"); so != req.end() && so->is_object())
      s.usage = so->value("include_usage", false);
    if (chat) {
      auto m = req.find("messages");
      if (m == req.end() || !m->is_array() || m->empty())
        return respond_error(c, 400, "'messages' must be a non-empty array");
      for (const auto& msg : *m)
        if (msg.is_object() && msg.contains("content") && msg["content"].is_string())
          s.prompt_tokens += count_words(msg["content"].get<std::string>());
    } else {
      auto p = req.find("prompt");
      if (p == req.end() || !p->is_string()) return respond_error(c, 400, "'prompt' must be a string");
      s.prompt_tokens = count_words(p->get<std::string>());
    }
    s.idx = next_idx++;
    s.fd = c.fd;
    s.conn_gen = c.gen;
    s.rng = Rng(opts.seed * 0x9e3779b97f4a7c15ull + s.idx + 1);
    InjectedRequest rec;
    rec.id = strfmt("cmpl-fake-%llu", static_cast<unsigned long long>(s.idx));
    rec.prompt_tokens = s.prompt_tokens;
    if (opts.error_rate > 0 && s.rng.uniform01() < opts.error_rate) {
      rec.failed = true;
      ++m_failed;
      record(std::move(rec));
      owner->served_++;
      return respond_error(c, 500, "injected failure (fake server --error-rate)");
    }
    rec.ttft_s = opts.ttft.sample(s.rng);
    s.next_ns = static_cast<int64_t>(rec.ttft_s * 1e9);  // relative until started
    record(std::move(rec));
    c.busy = true;
    const uint64_t idx = s.idx;
    streams.emplace(idx, std::move(s));
    if (opts.max_running > 0 && running >= opts.max_running) waiting.push_back(idx);
    else start_stream(idx);
  }

  void record(InjectedRequest r) {
    if (!opts.record) return;
    std::lock_guard<std::mutex> lk(rec_mu);
    recs.push_back(std::move(r));
  }
  template <class F>
  void with_record(uint64_t idx, F f) {
    if (!opts.record) return;
    std::lock_guard<std::mutex> lk(rec_mu);
    if (idx < recs.size()) f(recs[idx]);
  }

  ServerConn* conn_of(const Stream& s) {
    auto it = conns.find(s.fd);
    return (it == conns.end() || it->second.gen != s.conn_gen) ? nullptr : &it->second;
  }

  void start_stream(uint64_t idx) {
    Stream& s = streams.at(idx);
    ++running;
    const int64_t now = now_ns();
    with_record(idx, [&](InjectedRequest& r) { r.queue_s = static_cast<double>(now - s.arrived_ns) * 1e-9; });
    s.next_ns += now;
    events.emplace(s.next_ns, idx);
    ServerConn* c = conn_of(s);
    if (!c || !s.stream) return;
    send_bytes(*c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n");
    if (s.chat) {
      json j = base_chunk(s);
      j["choices"] = json::array({{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"finish_reason", nullptr}}});
      send_event(*c, j);
    }
  }

  json base_chunk(const Stream& s) const {
    json j = {{"id", strfmt("cmpl-fake-%llu", static_cast<unsigned long long>(s.idx))},
              {"object", s.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", 0},
              {"model", "fake"}};
    return j;
  }

  void send_event(ServerConn& c, json& j) {
    if (opts.echo_timestamps) j["mopt_sent_ns"] = now_ns();
    send_bytes(c, chunk("data: " + j.dump() + "\n\n"));
  }

  void finish_stream(uint64_t idx, bool conn_alive) {
    Stream& s = streams.at(idx);
    --running;
    m_prompt_tokens += static_cast<uint64_t>(s.prompt_tokens);
    m_generation_tokens += static_cast<uint64_t>(s.sent);
    if (conn_alive) ++m_success;
    else ++m_failed;
    with_record(idx, [&](InjectedRequest& r) { r.completion_tokens = s.sent; });
    if (ServerConn* c = conn_of(s)) {
      c->busy = false;
      const int fd = c->fd;
      streams.erase(idx);
      process_input(*c);
      if (auto it = conns.find(fd); it != conns.end() && it->second.close_after && !it->second.dirty)
        flush(it->second);
    } else {
      streams.erase(idx);
    }
    owner->served_++;
    while (!waiting.empty() && (opts.max_running <= 0 || running < opts.max_running)) {
      const uint64_t next = waiting.front();
      waiting.pop_front();
      start_stream(next);
    }
  }

  void on_token(uint64_t idx) {
    auto it = streams.find(idx);
    if (it == streams.end()) return;
    Stream& s = it->second;
    ServerConn* c = conn_of(s);
    if (!c) return finish_stream(idx, false);
    const std::string word = kWords[s.rng.next_u64() % std::size(kWords)];
    const bool last = s.sent + 1 >= s.max_tokens;
    const int64_t sent_ns = now_ns();
    with_record(idx, [&](InjectedRequest& r) {
      if (s.sent == 0) r.sent_ttft_s = static_cast<double>(sent_ns - s.arrived_ns) * 1e-9;
      else r.sent_itl_s.push_back(static_cast<double>(sent_ns - s.last_sent_ns) * 1e-9);
    });
    s.last_sent_ns = sent_ns;
    if (s.sent == 0) {
      const double ttft = static_cast<double>(sent_ns - s.arrived_ns) * 1e-9;
      size_t b = 0;
      while (b < std::size(kTtftBuckets) && ttft > kTtftBuckets[b]) ++b;
      ++m_ttft_counts[b];
      m_ttft_sum += ttft;
    }
    ++s.sent;
    if (s.stream) {
      json j = base_chunk(s);
      json choice = {{"index", 0}, {"finish_reason", last ? json("length") : json(nullptr)}};
      if (s.chat) choice["delta"] = {{"content", word}};
      else choice["text"] = word;
      j["choices"] = json::array({choice});
      send_event(*c, j);
    } else {
      s.text += word;
    }
    if (!last) {
      double gap = opts.itl.sample(s.rng);
      with_record(idx, [&](InjectedRequest& r) { r.itl_s.push_back(gap); });
      gap += opts.itl_per_running_s * running;
      s.next_ns += static_cast<int64_t>(gap * 1e9);
      events.emplace(s.next_ns, idx);
      return;
    }
    const int total = s.prompt_tokens + s.sent;
    json usage = {{"prompt_tokens", s.prompt_tokens}, {"completion_tokens", s.sent}, {"total_tokens", total}};
    if (s.stream) {
      if (s.usage) {
        json j = base_chunk(s);
        j["choices"] = json::array();
        j["usage"] = usage;
        send_event(*c, j);
      }
      send_bytes(*c, chunk("data: [DONE]\n\n"));
      send_bytes(*c, "0\r\n\r\n");
    } else {
      json j = base_chunk(s);
      j["object"] = s.chat ? "chat.completion" : "text_completion";
      if (s.chat)
        j["choices"] = json::array({{{"index", 0}, {"message", {{"role", "assistant"}, {"content", s.text}}},
                                     {"finish_reason", "length"}}});
      else
        j["choices"] = json::array({{{"index", 0}, {"text", s.text}, {"finish_reason", "length"}}});
      j["usage"] = usage;
      respond(*c, 200, "OK", "application/json", j.dump());
    }
    finish_stream(idx, true);
  }
};

Result<std::unique_ptr<FakeServer>> FakeServer::start(const FakeServerOptions& opts) {
  if (opts.error_rate < 0 || opts.error_rate > 1) return error("fake server: --error-rate must be in [0, 1]");
  if (opts.default_max_tokens < 1) return error("fake server: default max tokens must be >= 1");
  std::unique_ptr<FakeServer> srv(new FakeServer());
  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  impl->owner = srv.get();
  MOPT_ASSIGN_OR_RETURN(ResolvedAddr addr, resolve(opts.host, opts.port));
  impl->listen_fd = socket(addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (impl->listen_fd < 0) return error("fake server: socket(): %s", std::strerror(errno));
  int one = 1;
  setsockopt(impl->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(impl->listen_fd, reinterpret_cast<const sockaddr*>(addr.storage), addr.len) != 0)
    return error("fake server: cannot bind %s:%d: %s (is the port in use?)", opts.host.c_str(), opts.port,
                 std::strerror(errno));
  if (listen(impl->listen_fd, 4096) != 0) return error("fake server: listen(): %s", std::strerror(errno));
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  getsockname(impl->listen_fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  srv->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  impl->epfd = epoll_create1(EPOLL_CLOEXEC);
  impl->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  impl->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->epfd < 0 || impl->timer_fd < 0 || impl->stop_fd < 0)
    return error("fake server: epoll/timerfd/eventfd setup failed: %s", std::strerror(errno));
  impl->add_fd(impl->listen_fd, EPOLLIN);
  impl->add_fd(impl->timer_fd, EPOLLIN);
  impl->add_fd(impl->stop_fd, EPOLLIN);
  srv->impl_ = std::move(impl);
  Impl* p = srv->impl_.get();
  srv->thread_ = std::thread([p] { p->run(); });
  return srv;
}

void FakeServer::stop() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t r = write(impl_->stop_fd, &one, sizeof one);
  thread_.join();
}

FakeServer::~FakeServer() { stop(); }

std::vector<InjectedRequest> FakeServer::injected() const {
  std::lock_guard<std::mutex> lk(impl_->rec_mu);
  return impl_->recs;
}

}  // namespace mopt::loadgen
