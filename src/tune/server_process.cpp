#include "tune/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/strfmt.h"
#include "loadgen/net.h"

namespace mopt::tune {

double monotonic_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string ExitInfo::describe() const {
  if (!exited) return "running";
  if (signal) return strfmt("killed by %s%s", sigabbrev_np(signal) ? ("SIG" + std::string(sigabbrev_np(signal))).c_str()
                                                                     : strfmt("signal %d", signal).c_str(),
                            killed_by_us ? " (sent by the tuner)" : "");
  return strfmt("exit %d", code);
}

Result<ServerProcess> ServerProcess::spawn(const ServerLaunch& l) {
  if (l.binary.empty()) return error("no mopt binary to start the server with");
  std::vector<std::string> argv_s{l.binary, "serve"};
  argv_s.insert(argv_s.end(), l.args.begin(), l.args.end());
  for (const char* a : {"--host", "127.0.0.1", "--port", "0"}) argv_s.emplace_back(a);
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  env_s.insert(env_s.end(), l.env.begin(), l.env.end());
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);

  const int log_fd = open(l.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return error("cannot write the server log '%s': %s", l.log_path.c_str(), std::strerror(errno));
  const pid_t parent = getpid();
  ServerProcess p;
  p.spawn_s_ = monotonic_s();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return error("fork: %s", std::strerror(errno));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // the parent died before prctl
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    close_range(3, ~0u, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    const char msg[] = "mopt tune: exec of the server binary failed\n";
    [[maybe_unused]] ssize_t w = write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  close(log_fd);
  p.pid_ = pid;
  p.log_path_ = l.log_path;
  return p;
}

ServerProcess::ServerProcess(ServerProcess&& o) noexcept { *this = std::move(o); }

ServerProcess& ServerProcess::operator=(ServerProcess&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0 && !exit_.exited) stop(0);
    pid_ = o.pid_;
    port_ = o.port_;
    host_ = std::move(o.host_);
    log_path_ = std::move(o.log_path_);
    spawn_s_ = o.spawn_s_;
    exit_ = o.exit_;
    o.pid_ = -1;
  }
  return *this;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && !exit_.exited) stop(0);
}

bool ServerProcess::reap(bool block) {
  if (pid_ <= 0) return true;
  if (exit_.exited) return true;
  int st = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &st, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return false;
  exit_.exited = true;
  if (r < 0) return true;  // not our child any more (should not happen): treat as gone
  if (WIFEXITED(st)) exit_.code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) exit_.signal = WTERMSIG(st);
  return true;
}

bool ServerProcess::alive() { return pid_ > 0 && !reap(false); }

void ServerProcess::kill_now() {
  if (pid_ > 0 && !exit_.exited) {
    exit_.killed_by_us = true;
    ::kill(pid_, SIGKILL);
  }
}

ExitInfo ServerProcess::stop(double grace_s) {
  if (pid_ <= 0 || reap(false)) return exit_;
  ::kill(pid_, SIGTERM);
  const double deadline = monotonic_s() + grace_s;
  while (monotonic_s() < deadline) {
    if (reap(false)) return exit_;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  exit_.killed_by_us = true;
  ::kill(pid_, SIGKILL);
  reap(true);
  return exit_;
}

std::string ServerProcess::log_tail(size_t max_bytes) const {
  std::ifstream f(log_path_, std::ios::binary);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_bytes) s = "..." + s.substr(s.size() - max_bytes);
  return s;
}

Status ServerProcess::wait_ready(double timeout_s) {
  const double deadline = monotonic_s() + timeout_s;
  const std::string marker = "listening on http://";
  for (;;) {
    if (!alive())
      return error("the server ended (%s) before it was ready; its log ends with:\n%s", exit_.describe().c_str(),
                   log_tail(1500).c_str());
    if (port_ == 0) {
      const std::string log = log_tail(1 << 16);
      if (size_t at = log.find(marker); at != std::string::npos) {
        const size_t colon = log.find(':', at + marker.size());
        if (colon != std::string::npos) port_ = std::atoi(log.c_str() + colon + 1);
      }
    }
    if (port_ > 0) {
      auto h = loadgen::http_get(host_, port_, "/health", 2.0);
      if (h && h->status == 200) return Status::ok();
    }
    if (monotonic_s() > deadline)
      return error("the server was not ready within %.0f s (--startup-timeout); its log ends with:\n%s", timeout_s,
                   log_tail(1500).c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(port_ > 0 ? 50 : 20));
  }
}

Result<ProcessMemory> process_memory(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  if (!f) return error("cannot read /proc/%d/status (has the process ended?)", static_cast<int>(pid));
  ProcessMemory m;
  bool rss = false, anon = false;
  std::string line;
  auto kib = [&line](size_t skip) {
    return static_cast<uint64_t>(std::strtoull(line.c_str() + skip, nullptr, 10)) * 1024;
  };
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) m.rss = kib(6), rss = true;
    if (line.rfind("RssAnon:", 0) == 0) m.anon = kib(8), anon = true;
  }
  if (!rss || !anon) return error("/proc/%d/status has no VmRSS or RssAnon line", static_cast<int>(pid));
  return m;
}

}  // namespace mopt::tune
