// printf-style string formatting (g++ 12 has no <format>).
#pragma once

#include <cstdarg>
#include <string>

namespace mopt {

std::string vstrfmt(const char* fmt, va_list ap);

[[gnu::format(printf, 1, 2)]] inline std::string strfmt(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vstrfmt(fmt, ap);
  va_end(ap);
  return s;
}
inline std::string strfmt() { return std::string(); }

// Human-readable byte count: "1.50 GiB".
std::string format_bytes(double bytes);

}  // namespace mopt
