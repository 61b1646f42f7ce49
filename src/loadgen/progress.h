// Progress display on stderr: a live bar redrawn in place on a terminal; plain periodic lines otherwise
// (logs, CI). Shows completed/target, live throughput (last ~2 s), output tokens/s, in-flight and errors.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "loadgen/load.h"

namespace mopt::loadgen {

class ProgressPrinter {
 public:
  enum class Style { kAuto, kBar, kLines, kOff };
  ProgressPrinter(Style style, std::string label, double line_interval_s = 5.0);
  void update(const LiveStats& s);
  void finish();  // ends the bar line

 private:
  Style style_;
  std::string label_;
  double line_interval_s_;
  double last_line_s_ = -1e9;
  double last_draw_s_ = -1e9;
  bool drawn_ = false;
  std::deque<std::pair<double, std::pair<int64_t, int64_t>>> window_;  // (t, (done, tokens))
  LiveStats last_;
};

}  // namespace mopt::loadgen
