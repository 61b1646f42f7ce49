#include "engine/stop_strings.h"

#include <algorithm>

namespace mopt {

StopScan scan_stop_strings(std::string_view held, const std::vector<std::string>& stops) {
  StopScan r;
  size_t first = std::string_view::npos;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    size_t pos = held.find(s);
    if (pos < first) first = pos;
  }
  if (first != std::string_view::npos) {
    r.stopped = true;
    r.emit = first;
    return r;
  }
  size_t hold = 0;
  for (const std::string& s : stops) {
    const size_t max_len = std::min(held.size(), s.size() - 1);
    for (size_t len = max_len; len > hold; --len) {
      if (held.substr(held.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  r.emit = held.size() - hold;
  return r;
}

}  // namespace mopt
