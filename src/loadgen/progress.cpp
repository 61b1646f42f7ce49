#include "loadgen/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace mopt::loadgen {

ProgressPrinter::ProgressPrinter(Style style, std::string label, double line_interval_s)
    : style_(style), label_(std::move(label)), line_interval_s_(line_interval_s) {
  if (style_ == Style::kAuto) style_ = isatty(STDERR_FILENO) ? Style::kBar : Style::kLines;
}

void ProgressPrinter::update(const LiveStats& s) {
  if (style_ == Style::kOff) return;
  last_ = s;
  const int64_t done = s.completed;
  window_.push_back({s.elapsed_s, {done, s.output_tokens}});
  while (window_.size() > 2 && window_.front().first < s.elapsed_s - 2.0) window_.pop_front();
  double rps = 0, tps = 0;
  if (window_.size() >= 2) {
    const double dt = window_.back().first - window_.front().first;
    if (dt > 0) {
      rps = static_cast<double>(window_.back().second.first - window_.front().second.first) / dt;
      tps = static_cast<double>(window_.back().second.second - window_.front().second.second) / dt;
    }
  }
  double frac = -1;
  std::string target;
  if (s.target_requests > 0) {
    frac = static_cast<double>(done) / static_cast<double>(s.target_requests);
    target = strfmt("%lld/%lld", static_cast<long long>(done), static_cast<long long>(s.target_requests));
  } else if (s.target_duration_s > 0) {
    frac = s.elapsed_s / s.target_duration_s;
    target = strfmt("%lld done, %.0f/%.0fs", static_cast<long long>(done), s.elapsed_s, s.target_duration_s);
  }
  frac = std::clamp(frac, 0.0, 1.0);
  const std::string stats = strfmt("%7.1f req/s %8.0f tok/s  in-flight %lld%s  errors %lld", rps, tps,
                                   static_cast<long long>(s.in_flight),
                                   s.queued ? strfmt(" (+%lld queued)", static_cast<long long>(s.queued)).c_str() : "",
                                   static_cast<long long>(s.failed));
  if (style_ == Style::kBar) {
    if (s.elapsed_s - last_draw_s_ < 0.1) return;
    last_draw_s_ = s.elapsed_s;
    const int width = 24, filled = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r\033[K%s [%s] %3.0f%% %s %s", label_.c_str(), bar.c_str(), frac * 100, target.c_str(),
                 stats.c_str());
    std::fflush(stderr);
    drawn_ = true;
  } else if (s.elapsed_s - last_line_s_ >= line_interval_s_) {
    last_line_s_ = s.elapsed_s;
    std::fprintf(stderr, "[bench] %s %5.1fs %s %s\n", label_.c_str(), s.elapsed_s, target.c_str(), stats.c_str());
  }
}

void ProgressPrinter::finish() {
  if (style_ == Style::kBar && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace mopt::loadgen
