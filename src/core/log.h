// Minimal leveled logging to stderr. Level from $MOPT_LOG (debug|info|warn|error), default info.
#pragma once

#include "core/strfmt.h"

namespace mopt {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_log_level(LogLevel level);
[[gnu::format(printf, 2, 3)]] void log_msg(LogLevel level, const char* fmt, ...);

}  // namespace mopt

#define MOPT_LOG_DEBUG(...) ::mopt::log_msg(::mopt::LogLevel::kDebug, __VA_ARGS__)
#define MOPT_LOG_INFO(...) ::mopt::log_msg(::mopt::LogLevel::kInfo, __VA_ARGS__)
#define MOPT_LOG_WARN(...) ::mopt::log_msg(::mopt::LogLevel::kWarn, __VA_ARGS__)
#define MOPT_LOG_ERROR(...) ::mopt::log_msg(::mopt::LogLevel::kError, __VA_ARGS__)
