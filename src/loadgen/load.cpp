#include "loadgen/load.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/http_head.h"
#include "loadgen/http_body.h"
#include "loadgen/net.h"

namespace mopt::loadgen {

using json = nlohmann::json;

std::string LoadSpec::label() const {
  if (mode == Mode::kConcurrency) return strfmt("concurrency=%d", concurrency);
  if (std::isinf(rate)) return "rate=inf";
  return strfmt("rate=%g/s", rate);
}
double LoadSpec::load_value() const { return mode == Mode::kConcurrency ? concurrency : rate; }

const char* error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::kNone: return "none";
    case ErrorKind::kConnect: return "connect";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kHttpStatus: return "http_status";
    case ErrorKind::kProtocol: return "protocol";
    case ErrorKind::kServerError: return "server_error_event";
    case ErrorKind::kClosed: return "connection_closed";
    case ErrorKind::kNoTokens: return "no_tokens";
  }
  return "unknown";
}

double RequestRecord::tpot_s() const {
  const int n = output_tokens();
  if (!ok() || n < 2 || ttft_s < 0 || e2e_s < 0) return -1;
  return (e2e_s - ttft_s) / (n - 1);
}

std::string build_request_body(const Target& t, const WorkItem& item) {
  json j;
  if (!t.model.empty()) j["model"] = t.model;
  if (t.chat) j["messages"] = json::array({{{"role", "user"}, {"content", item.prompt}}});
  else j["prompt"] = item.prompt;
  j["max_tokens"] = item.max_tokens;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  if (t.ignore_eos) j["ignore_eos"] = true;
  if (!t.extra_body.empty()) {
    json extra = json::parse(t.extra_body, nullptr, false);
    if (extra.is_object()) j.update(extra);
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

constexpr size_t kMaxErrorBody = 64 * 1024;
constexpr int64_t kTickNs = 100'000'000;  // timeouts and progress

struct Conn {
  int fd = -1;
  bool connected = false;
  bool reused = false;     // carried an earlier request (a stale keep-alive close is retried once)
  int64_t req = -1;        // index into records, -1 when idle
  bool retried = false;
  std::string out;
  size_t out_off = 0;
  std::string in;          // header bytes until the head is parsed
  http::Head head;
  bool head_done = false;
  bool sse = false;
  bool saw_done = false;
  bool got_bytes = false;
  int64_t body_left = -1;  // Content-Length bodies
  ChunkedDecoder chunked;
  SseParser sse_parser;
  std::string body;        // non-SSE body (capped)
  std::string decoded;     // scratch for chunked decoding
  int64_t start_ns = 0, last_token_ns = 0, done_ns = 0, deadline_ns = 0;
  bool epollout = false;
};

class Runner {
 public:
  Runner(const Target& t, Workload& w, const LoadSpec& s, const ProgressFn& p, const RecordFn& on_record)
      : target_(t), workload_(w), spec_(s), progress_(p), on_record_(on_record), rng_(s.seed ^ 0xa11c0de5ull) {}
  ~Runner() {
    for (auto& [fd, c] : conns_) close(fd);
    if (epfd_ >= 0) close(epfd_);
    if (timer_fd_ >= 0) close(timer_fd_);
  }

  Result<PhaseResult> run();

 private:
  bool issuing(int64_t now) const {
    if (spec_.num_requests > 0 && issued_ + static_cast<int64_t>(pending_.size()) >= spec_.num_requests) return false;
    if (spec_.duration_s > 0 && now >= phase_start_ + static_cast<int64_t>(spec_.duration_s * 1e9)) return false;
    return !stop_issuing_;
  }
  double interarrival_s() {
    if (std::isinf(spec_.rate)) return 0;
    // Gamma(shape k, scale 1/(rate k)) has mean 1/rate; k = 1 is the exponential (Poisson process).
    const double k = spec_.burstiness;
    if (k == 1) return -std::log1p(-rng_.uniform01()) / spec_.rate;
    return rng_.gamma(k) / (spec_.rate * k);
  }
  bool launch(int64_t scheduled_ns);  // false: failed at once (no socket); stop launching this round
  void start_on(Conn& c);
  Conn* new_conn();
  void close_conn(Conn& c);
  void fail(Conn& c, ErrorKind kind, std::string msg, int64_t t);
  void finish(Conn& c, int64_t t);
  void on_event(Conn& c, uint32_t ev);
  void on_writable(Conn& c);
  void on_readable(Conn& c);
  bool feed_body(Conn& c, std::string_view data, int64_t t);  // false: the connection was released
  bool on_sse_event(Conn& c, std::string_view data, int64_t t);
  void set_epollout(Conn& c, bool on);
  void tick(int64_t now);
  void arm(int64_t at);
  void report(int64_t now);
  void record_done(const RequestRecord& r);  // the RecordFn, which may stop the phase

  const Target& target_;
  Workload& workload_;
  const LoadSpec& spec_;
  const ProgressFn& progress_;
  const RecordFn& on_record_;
  Rng rng_;
  ResolvedAddr addr_;
  std::string host_header_;
  int epfd_ = -1, timer_fd_ = -1;
  std::unordered_map<int, Conn> conns_;
  std::vector<int> idle_;                // fds of idle keep-alive connections
  std::deque<int64_t> pending_;          // scheduled times of arrivals waiting for a slot
  int64_t phase_start_ = 0, next_arrival_ = 0, next_tick_ = 0, armed_ = -1;
  int64_t issued_ = 0, completed_ = 0, failed_ = 0, in_flight_ = 0, out_tokens_ = 0;
  int64_t first_issue_ = -1, last_done_ = -1;
  bool stop_issuing_ = false;
  bool stopped_early_ = false;
  int64_t not_started_ = 0;
  std::vector<RequestRecord> records_;
  std::vector<int64_t> req_start_;       // [records] start ns
  std::vector<double> lag_;
  std::string err_;                      // fatal setup error
};

Conn* Runner::new_conn() {
  auto fd = connect_nonblocking(addr_);
  if (!fd) return nullptr;
  Conn& c = conns_[*fd];
  c = Conn{};
  c.fd = *fd;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
  ev.data.fd = c.fd;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, c.fd, &ev);
  c.epollout = true;
  return &c;
}

void Runner::close_conn(Conn& c) {
  const int fd = c.fd;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  std::erase(idle_, fd);
  conns_.erase(fd);
}

void Runner::set_epollout(Conn& c, bool on) {
  if (c.epollout == on) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0u);
  ev.data.fd = c.fd;
  epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.epollout = on;
}

bool Runner::launch(int64_t scheduled_ns) {
  const WorkItem item = workload_.next();
  RequestRecord r;
  r.index = static_cast<int64_t>(records_.size());
  r.expected_prompt_tokens = item.expected_prompt_tokens;
  r.max_tokens = item.max_tokens;
  r.scheduled_s = static_cast<double>(scheduled_ns - phase_start_) * 1e-9;
  records_.push_back(std::move(r));
  const std::string body = build_request_body(target_, item);
  std::string req = "POST " + target_.path + " HTTP/1.1\r\nHost: " + host_header_ +
                    "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n";
  if (!target_.api_key.empty()) req += "Authorization: Bearer " + target_.api_key + "\r\n";
  req += strfmt("Content-Length: %zu\r\n\r\n", body.size());
  req += body;
  ++issued_;
  ++in_flight_;
  const int64_t now = now_ns();
  req_start_.push_back(now);
  if (first_issue_ < 0) first_issue_ = now;
  Conn* c = nullptr;
  if (!idle_.empty()) {
    c = &conns_.at(idle_.back());
    idle_.pop_back();
  } else {
    c = new_conn();
  }
  const int saved_errno = errno;
  if (!c) {
    // No socket at all (fd limit or unreachable address family): fail this request.
    RequestRecord& rec = records_.back();
    rec.error = ErrorKind::kConnect;
    rec.error_message = strfmt("cannot open a connection to %s: %s", host_header_.c_str(), std::strerror(saved_errno));
    rec.start_s = static_cast<double>(now - phase_start_) * 1e-9;
    --in_flight_;
    ++failed_;
    last_done_ = now;
    return false;
  }
  c->req = records_.back().index;
  c->retried = false;
  c->out = std::move(req);
  start_on(*c);
  return true;
}

void Runner::start_on(Conn& c) {
  c.out_off = 0;
  c.in.clear();
  c.head_done = false;
  c.sse = false;
  c.saw_done = false;
  c.got_bytes = false;
  c.body_left = -1;
  c.chunked = ChunkedDecoder();
  c.sse_parser = SseParser();
  c.body.clear();
  const int64_t now = now_ns();
  c.start_ns = now;
  c.last_token_ns = 0;
  c.deadline_ns = now + static_cast<int64_t>(target_.timeout_s * 1e9);
  req_start_[static_cast<size_t>(c.req)] = now;
  records_[static_cast<size_t>(c.req)].start_s = static_cast<double>(now - phase_start_) * 1e-9;
  if (c.connected) on_writable(c);
}

void Runner::on_writable(Conn& c) {
  if (!c.connected) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
      if (c.req >= 0)
        return fail(c, ErrorKind::kConnect,
                    strfmt("cannot connect to %s: %s", host_header_.c_str(), std::strerror(err)), now_ns());
      return close_conn(c);
    }
    c.connected = true;
  }
  while (c.out_off < c.out.size()) {
    const ssize_t n = send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return set_epollout(c, true);
    if (c.req >= 0 && c.reused && !c.retried && !c.got_bytes) {
      // The server closed this keep-alive connection: retry once on a fresh one.
      return on_readable(c);
    }
    return fail(c, ErrorKind::kClosed, strfmt("send failed: %s", std::strerror(errno)), now_ns());
  }
  set_epollout(c, false);
}

void Runner::fail(Conn& c, ErrorKind kind, std::string msg, int64_t t) {
  if (c.req >= 0) {
    RequestRecord& r = records_[static_cast<size_t>(c.req)];
    r.error = kind;
    r.error_message = std::move(msg);
    r.e2e_s = static_cast<double>(t - c.start_ns) * 1e-9;
    c.req = -1;
    --in_flight_;
    ++failed_;
    last_done_ = t;
    record_done(r);
  }
  close_conn(c);
}

void Runner::record_done(const RequestRecord& r) {
  if (on_record_ && !stopped_early_ && on_record_(r)) {
    stopped_early_ = true;
    stop_issuing_ = true;
  }
}

void Runner::finish(Conn& c, int64_t t) {
  RequestRecord& r = records_[static_cast<size_t>(c.req)];
  const int64_t end = c.saw_done ? c.done_ns : t;
  r.e2e_s = static_cast<double>(end - c.start_ns) * 1e-9;
  if (r.http_status != 200) {
    std::string msg = strfmt("HTTP %d", r.http_status);
    json j = json::parse(c.body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("error")) {
      const json& e = j["error"];
      msg += ": " + (e.is_object() && e.contains("message") && e["message"].is_string()
                         ? e["message"].get<std::string>() : e.dump());
    } else if (!c.body.empty()) {
      msg += ": " + c.body.substr(0, 200);
    }
    r.error = ErrorKind::kHttpStatus;
    r.error_message = std::move(msg);
  } else if (!c.sse) {
    // A non-streaming JSON answer (the server ignored "stream"): the whole completion arrives at once.
    json j = json::parse(c.body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      r.error = ErrorKind::kProtocol;
      r.error_message = "200 response is neither text/event-stream nor a JSON object";
    } else {
      if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
        r.usage_prompt_tokens = u->value("prompt_tokens", -1);
        r.usage_completion_tokens = u->value("completion_tokens", -1);
      }
      r.content_events = 1;
      r.ttft_s = r.e2e_s;
    }
  } else if (r.error == ErrorKind::kNone && r.content_events == 0 && r.output_tokens() <= 0) {
    r.error = ErrorKind::kNoTokens;
    r.error_message = c.saw_done ? "stream finished without any text" : "stream ended without data: [DONE] or text";
  }
  if (r.ok()) out_tokens_ += r.output_tokens();
  else ++failed_;
  ++completed_;
  --in_flight_;
  last_done_ = end;
  c.req = -1;
  record_done(r);
  const bool keep = c.head.keep_alive && (c.head.chunked || c.head.content_length >= 0);
  if (keep) {
    c.reused = true;
    idle_.push_back(c.fd);
  } else {
    close_conn(c);
  }
}

bool Runner::on_sse_event(Conn& c, std::string_view data, int64_t t) {
  RequestRecord& r = records_[static_cast<size_t>(c.req)];
  if (data == "[DONE]") {
    c.saw_done = true;
    c.done_ns = t;
    return true;
  }
  json j = json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    r.error = ErrorKind::kProtocol;
    r.error_message = "stream event is not a JSON object: " + std::string(data.substr(0, 120));
    return false;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    r.error = ErrorKind::kServerError;
    r.error_message = "error event: " + (e->is_object() && e->contains("message") && (*e)["message"].is_string()
                                             ? (*e)["message"].get<std::string>() : e->dump());
    return true;
  }
  if (r.response_id.empty())
    if (auto id = j.find("id"); id != j.end() && id->is_string()) r.response_id = id->get<std::string>();
  if (auto s = j.find("mopt_sent_ns"); s != j.end() && s->is_number_integer())
    lag_.push_back(static_cast<double>(t - s->get<int64_t>()) * 1e-9);
  if (auto ch = j.find("choices"); ch != j.end() && ch->is_array() && !ch->empty() && (*ch)[0].is_object()) {
    const json& c0 = (*ch)[0];
    const json* text = nullptr;
    if (auto it = c0.find("text"); it != c0.end()) text = &*it;
    else if (auto d = c0.find("delta"); d != c0.end() && d->is_object())
      if (auto it2 = d->find("content"); it2 != d->end()) text = &*it2;
    if (text && text->is_string() && !text->get_ref<const std::string&>().empty()) {
      if (r.content_events == 0) r.ttft_s = static_cast<double>(t - c.start_ns) * 1e-9;
      else r.itl_s.push_back(static_cast<double>(t - c.last_token_ns) * 1e-9);
      c.last_token_ns = t;
      ++r.content_events;
    }
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    auto num = [&](const char* k) {
      auto it = u->find(k);
      return it != u->end() && it->is_number_integer() ? static_cast<int>(it->get<int64_t>()) : -1;
    };
    r.usage_prompt_tokens = num("prompt_tokens");
    r.usage_completion_tokens = num("completion_tokens");
  }
  return true;
}

bool Runner::feed_body(Conn& c, std::string_view data, int64_t t) {
  std::string_view payload = data;
  bool complete = false;
  if (c.head.chunked) {
    c.decoded.clear();
    if (Status s = c.chunked.feed(data, &c.decoded); !s) {
      fail(c, ErrorKind::kProtocol, s.message(), t);
      return false;
    }
    payload = c.decoded;
    complete = c.chunked.done();
  } else if (c.body_left >= 0) {
    payload = data.substr(0, static_cast<size_t>(std::min<int64_t>(c.body_left, static_cast<int64_t>(data.size()))));
    c.body_left -= static_cast<int64_t>(payload.size());
    complete = c.body_left == 0;
  }
  if (c.sse) {
    Status s = c.sse_parser.feed(payload, [&](std::string_view ev) { return on_sse_event(c, ev, t); });
    if (!s) {
      fail(c, ErrorKind::kProtocol, s.message(), t);
      return false;
    }
    if (records_[static_cast<size_t>(c.req)].error == ErrorKind::kProtocol) {
      fail(c, ErrorKind::kProtocol, records_[static_cast<size_t>(c.req)].error_message, t);
      return false;
    }
  } else if (c.body.size() < kMaxErrorBody) {
    c.body.append(payload.substr(0, kMaxErrorBody - c.body.size()));
  }
  if (complete) {
    finish(c, t);
    return false;
  }
  return true;
}

void Runner::on_readable(Conn& c) {
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
    const int64_t t = now_ns();
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      // EOF or reset.
      const std::string why = n == 0 ? "the server closed the connection" : std::string(std::strerror(errno));
      if (c.req < 0) return close_conn(c);  // an idle keep-alive connection went away
      if (c.reused && !c.retried && !c.got_bytes) {
        // Stale keep-alive connection: resend the request once on a new connection.
        const int64_t req = c.req;
        std::string out = std::move(c.out);
        c.req = -1;
        close_conn(c);
        Conn* nc = new_conn();
        if (!nc) {
          RequestRecord& r = records_[static_cast<size_t>(req)];
          r.error = ErrorKind::kConnect;
          r.error_message = "reconnect failed";
          --in_flight_;
          ++failed_;
          return;
        }
        nc->req = req;
        nc->retried = true;
        nc->out = std::move(out);
        return start_on(*nc);
      }
      if (c.head_done && !c.head.chunked && c.head.content_length < 0) return void(finish(c, t));  // close-delimited
      const RequestRecord& r = records_[static_cast<size_t>(c.req)];
      return fail(c, ErrorKind::kClosed,
                  strfmt("%s mid-response (after %d text events)", why.c_str(), r.content_events), t);
    }
    if (c.req < 0) return close_conn(c);  // bytes on an idle connection: protocol violation, drop it
    c.got_bytes = true;
    std::string_view data(buf, static_cast<size_t>(n));
    if (!c.head_done) {
      c.in.append(data);
      const http::HeadParse parsed = http::parse_head(c.in, http::HeadKind::kResponse, {}, &c.head);
      if (!parsed.ok()) return fail(c, ErrorKind::kProtocol, parsed.error, t);
      if (parsed.used == 0) continue;
      c.head_done = true;
      RequestRecord& r = records_[static_cast<size_t>(c.req)];
      r.http_status = c.head.status;
      const std::string* ct = c.head.find("content-type");
      c.sse = c.head.status == 200 && ct && ct->rfind("text/event-stream", 0) == 0;
      c.body_left = c.head.chunked ? -1 : c.head.content_length;
      const std::string rest = c.in.substr(parsed.used);
      c.in.clear();
      if (c.body_left == 0 && !c.head.chunked) return finish(c, t);
      if (!rest.empty() && !feed_body(c, rest, t)) return;
      continue;
    }
    if (!feed_body(c, data, t)) return;
  }
}

void Runner::on_event(Conn& c, uint32_t ev) {
  const int fd = c.fd;
  if (ev & EPOLLOUT) {
    on_writable(c);
    if (!conns_.count(fd)) return;
  }
  if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) on_readable(conns_.at(fd));
}

void Runner::tick(int64_t now) {
  std::vector<int> expired;
  for (auto& [fd, c] : conns_)
    if (c.req >= 0 && now > c.deadline_ns) expired.push_back(fd);
  for (int fd : expired)
    fail(conns_.at(fd), ErrorKind::kTimeout, strfmt("no complete response within %.1fs (--timeout)", target_.timeout_s),
         now);
  report(now);
}

void Runner::report(int64_t now) {
  if (!progress_) return;
  LiveStats s;
  s.elapsed_s = static_cast<double>(now - phase_start_) * 1e-9;
  s.issued = issued_;
  s.completed = issued_ - in_flight_;
  s.failed = failed_;
  s.in_flight = in_flight_;
  s.queued = static_cast<int64_t>(pending_.size());
  s.output_tokens = out_tokens_;
  s.target_requests = spec_.num_requests;
  s.target_duration_s = spec_.duration_s;
  progress_(s);
}

void Runner::arm(int64_t at) {
  if (at == armed_) return;
  armed_ = at;
  arm_timer(timer_fd_, at);
}

Result<PhaseResult> Runner::run() {
  if (spec_.mode == LoadSpec::Mode::kConcurrency && spec_.concurrency < 1) return error("--concurrency must be >= 1");
  if (spec_.mode == LoadSpec::Mode::kRate && !(spec_.rate > 0)) return error("--rate must be > 0 requests/s");
  if (spec_.mode == LoadSpec::Mode::kRate && std::isinf(spec_.rate) && spec_.num_requests <= 0)
    return error("--rate inf needs --num-requests (all requests are sent at once)");
  if (!(spec_.burstiness > 0)) return error("--burstiness must be > 0 (1 = Poisson)");
  if (spec_.num_requests <= 0 && !(spec_.duration_s > 0))
    return error("give --num-requests or --duration to bound the run");
  if (!(target_.timeout_s > 0)) return error("--timeout must be > 0");
  MOPT_ASSIGN_OR_RETURN(addr_, resolve(target_.host, target_.port));
  host_header_ = target_.host.find(':') != std::string::npos ? "[" + target_.host + "]" : target_.host;
  host_header_ += ":" + std::to_string(target_.port);
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epfd_ < 0 || timer_fd_ < 0) return error("epoll/timerfd setup failed: %s", std::strerror(errno));
  epoll_event tev{};
  tev.events = EPOLLIN;
  tev.data.fd = timer_fd_;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, timer_fd_, &tev);

  phase_start_ = now_ns();
  next_tick_ = phase_start_ + kTickNs;
  const bool open_loop = spec_.mode == LoadSpec::Mode::kRate;
  next_arrival_ = phase_start_ + (open_loop ? static_cast<int64_t>(interarrival_s() * 1e9) : 0);
  const int64_t end_ns =
      spec_.duration_s > 0 ? phase_start_ + static_cast<int64_t>(spec_.duration_s * 1e9) : std::numeric_limits<int64_t>::max();
  const int64_t cap = open_loop ? (spec_.max_concurrency > 0 ? spec_.max_concurrency : std::numeric_limits<int64_t>::max())
                                : spec_.concurrency;
  std::vector<epoll_event> evs(512);
  for (;;) {
    int64_t now = now_ns();
    if (open_loop) {
      while (issuing(now) && next_arrival_ <= now) {
        pending_.push_back(next_arrival_);
        next_arrival_ += static_cast<int64_t>(interarrival_s() * 1e9);
      }
      while (!pending_.empty() && in_flight_ < cap) {
        const int64_t sched = pending_.front();
        pending_.pop_front();
        if (!launch(sched)) break;
      }
    } else {
      while (issuing(now) && in_flight_ < cap)
        if (!launch(now)) break;
    }
    if (now >= end_ns && !stop_issuing_) stop_issuing_ = true;
    if (!issuing(now) && in_flight_ == 0 && pending_.empty()) break;
    if (now >= next_tick_) {
      tick(now);
      next_tick_ = now + kTickNs;
    }
    int64_t wake = next_tick_;
    if (open_loop && issuing(now)) wake = std::min(wake, next_arrival_);
    if (spec_.duration_s > 0 && !stop_issuing_) wake = std::min(wake, end_ns);
    arm(wake);
    const int n = epoll_wait(epfd_, evs.data(), static_cast<int>(evs.size()), -1);
    if (n < 0 && errno != EINTR) return error("epoll_wait: %s", std::strerror(errno));
    for (int i = 0; i < n; ++i) {
      const int fd = evs[i].data.fd;
      if (fd == timer_fd_) {
        uint64_t x;
        [[maybe_unused]] ssize_t r = read(timer_fd_, &x, sizeof x);
        armed_ = -1;
        continue;
      }
      auto it = conns_.find(fd);
      if (it != conns_.end()) on_event(it->second, evs[i].events);
    }
    // Duration over: queued arrivals that never got a slot are dropped (reported as not started).
    if (stop_issuing_ && !pending_.empty()) {
      not_started_ += static_cast<int64_t>(pending_.size());
      pending_.clear();
    }
  }
  report(now_ns());
  PhaseResult res;
  res.records = std::move(records_);
  res.wall_s = first_issue_ >= 0 && last_done_ >= first_issue_ ? static_cast<double>(last_done_ - first_issue_) * 1e-9 : 0;
  res.not_started = not_started_;
  res.client_lag_s = std::move(lag_);
  res.stopped_early = stopped_early_;
  return res;
}

}  // namespace

Result<PhaseResult> run_phase(const Target& target, Workload& workload, const LoadSpec& spec,
                              const ProgressFn& progress, const RecordFn& on_record) {
  Runner r(target, workload, spec, progress, on_record);
  return r.run();
}

}  // namespace mopt::loadgen
