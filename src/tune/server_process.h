// A `mopt serve` child process on a free loopback port, for `mopt tune` (one per trial) and `mopt gate` (soaks,
// restarts, refusals). The child is this very binary (its path comes from the CLI); it listens on port 0 and the
// port is read from its log line "listening on http://HOST:PORT". Its stdout and stderr go to a log file, which
// is the trial's evidence and what a failure quotes. The child gets SIGTERM when this process dies
// (PR_SET_PDEATHSIG), so an interrupted tuner leaves no server behind.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace mopt::tune {

struct ServerLaunch {
  std::string binary;             // the mopt executable
  std::vector<std::string> args;  // after "serve" (model, engine flags, ...); --host/--port are added
  std::string log_path;           // the child's stdout + stderr
  std::vector<std::string> env;   // extra NAME=VALUE entries
};

// How a child ended.
struct ExitInfo {
  bool exited = false;     // false: still running (or never started)
  int code = -1;           // exit status when it exited normally
  int signal = 0;          // the signal that killed it, 0 if none
  bool killed_by_us = false;
  std::string describe() const;  // "exit 0", "exit 1", "killed by SIGKILL", ...
};

class ServerProcess {
 public:
  // Forks and execs `binary serve ARGS --host 127.0.0.1 --port 0`. Fails only when the process cannot start.
  static Result<ServerProcess> spawn(const ServerLaunch& launch);
  ServerProcess(ServerProcess&& o) noexcept;
  ServerProcess& operator=(ServerProcess&& o) noexcept;
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess();  // kills a child still running

  // Waits until /health answers 200 (the model is loaded and the engine runs). Errors: the child exited (its
  // status and the end of its log), or `timeout_s` passed.
  Status wait_ready(double timeout_s);
  // Polls the child; true while it runs.
  bool alive();
  // SIGTERM, then SIGKILL after `grace_s`; returns how it ended.
  ExitInfo stop(double grace_s = 10);
  // SIGKILL at once (a watchdog); safe from another thread (the pid is only signalled).
  void kill_now();
  const ExitInfo& exit_info() const { return exit_; }

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  const std::string& host() const { return host_; }
  double spawn_time_s() const { return spawn_s_; }  // monotonic seconds at fork
  const std::string& log_path() const { return log_path_; }
  // The last `max_bytes` of the log (what a failed trial quotes).
  std::string log_tail(size_t max_bytes = 2000) const;

 private:
  ServerProcess() = default;
  bool reap(bool block);  // true when the child has ended (exit_ filled)
  pid_t pid_ = -1;
  int port_ = 0;
  std::string host_ = "127.0.0.1";
  std::string log_path_;
  double spawn_s_ = 0;
  ExitInfo exit_;
};

// A process's resident memory from /proc/PID/status, bytes: all of it (VmRSS), and the part not backed by files
// (RssAnon: heap, stacks, anonymous mappings; file pages such as a mapped checkpoint or the pages of a shared
// library first used late are reclaimable by the kernel and no leak).
struct ProcessMemory {
  uint64_t rss = 0;
  uint64_t anon = 0;
};
Result<ProcessMemory> process_memory(pid_t pid);
// Monotonic seconds (CLOCK_MONOTONIC).
double monotonic_s();

}  // namespace mopt::tune
