// Stop strings over streamed text: text that could still turn into a stop string is held back, and a matched
// stop string (and anything after it) is never emitted.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mopt {

struct StopScan {
  bool stopped = false;  // a stop string occurs in the held text
  size_t emit = 0;       // bytes of the held text that can be emitted now (up to the match when stopped)
};

// held: text decoded but not yet emitted. When no stop string occurs, the longest suffix of `held` that is a
// proper prefix of some stop string is held back; the rest can be emitted.
StopScan scan_stop_strings(std::string_view held, const std::vector<std::string>& stops);

}  // namespace mopt
