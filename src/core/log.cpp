#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace mopt {
namespace {

LogLevel initial_level() {
  const char* e = std::getenv("MOPT_LOG");
  if (!e) return LogLevel::kInfo;
  if (!std::strcmp(e, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(e, "warn")) return LogLevel::kWarn;
  if (!std::strcmp(e, "error")) return LogLevel::kError;
  return LogLevel::kInfo;
}
std::atomic<int> g_level{static_cast<int>(initial_level())};
std::mutex g_mu;

}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

void log_msg(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) < g_level.load()) return;
  static const char* names[] = {"debug", "info", "warn", "error"};
  va_list ap;
  va_start(ap, fmt);
  std::string s = vstrfmt(fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "[mopt %s] %s\n", names[static_cast<int>(level)], s.c_str());
}

}  // namespace mopt
