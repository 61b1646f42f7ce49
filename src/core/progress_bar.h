// A progress display on stderr for long offline jobs (mopt eval, mopt quantize): a bar redrawn in place on a
// terminal ("eval [#####.....] 52% 15.2K/29.3K tokens 940 tokens/s  elapsed 16s  ETA 15s"), or a plain line every
// few seconds when stderr is a file or a pipe (logs, CI).
#pragma once

#include <cstdint>
#include <string>

namespace mopt {

class ProgressBar {
 public:
  enum class Style { kBar, kLines, kOff };
  // kBar when stderr is a terminal, else kLines if forced (--progress), else kOff.
  static Style auto_style(bool forced);

  ProgressBar(Style style, std::string label, std::string unit, double line_interval_s = 5.0);
  // done of total units after `seconds`; redraws at most 10 times a second (bar) or once per interval (lines).
  void update(int64_t done, int64_t total, double seconds);
  void finish();  // draws the final state and ends the bar's line
  // The label of the next draws ("quantize blk.3.ffn_up.weight": what is being worked on).
  void set_label(std::string label) { label_ = std::move(label); }

 private:
  void draw(int64_t done, int64_t total, double seconds);

  Style style_;
  std::string label_, unit_;
  double line_interval_s_;
  double last_draw_s_ = -1e9;
  int64_t last_done_ = 0, last_total_ = 0;
  double last_seconds_ = 0;
  bool drawn_ = false;
};

// "29.3K", "1.20M": a count in at most 4 significant characters plus a suffix.
std::string format_count(int64_t n);

}  // namespace mopt
