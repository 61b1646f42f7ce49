#include "core/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/strfmt.h"

namespace mopt {

ProgressBar::Style ProgressBar::auto_style(bool forced) {
  if (isatty(STDERR_FILENO)) return Style::kBar;
  return forced ? Style::kLines : Style::kOff;
}

ProgressBar::ProgressBar(Style style, std::string label, std::string unit, double line_interval_s)
    : style_(style), label_(std::move(label)), unit_(std::move(unit)), line_interval_s_(line_interval_s) {}

std::string format_count(int64_t n) {
  const double v = static_cast<double>(n);
  if (n < 10000) return strfmt("%lld", static_cast<long long>(n));
  if (n < 1000000) return strfmt("%.1fK", v / 1e3);
  if (n < 1000000000) return strfmt("%.2fM", v / 1e6);
  return strfmt("%.2fG", v / 1e9);
}

void ProgressBar::draw(int64_t done, int64_t total, double seconds) {
  const double frac = total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0) : 0.0;
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  std::string eta = "--";
  if (done >= total) {
    eta = strfmt("done in %.1fs", seconds);
  } else if (rate > 0) {
    eta = strfmt("elapsed %.0fs  ETA %.0fs", seconds, static_cast<double>(total - done) / rate);
  }
  const std::string text = strfmt("%s/%s %s  %s %s/s  %s", format_count(done).c_str(), format_count(total).c_str(),
                                  unit_.c_str(), format_count(std::llround(rate)).c_str(), unit_.c_str(), eta.c_str());
  if (style_ == Style::kBar) {
    const int width = 24, filled = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r\033[K%s [%s] %3.0f%% %s", label_.c_str(), bar.c_str(), frac * 100, text.c_str());
  } else {
    std::fprintf(stderr, "[%s] %3.0f%% %s\n", label_.c_str(), frac * 100, text.c_str());
  }
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::update(int64_t done, int64_t total, double seconds) {
  if (style_ == Style::kOff) return;
  last_done_ = done;
  last_total_ = total;
  last_seconds_ = seconds;
  const double interval = style_ == Style::kBar ? 0.1 : line_interval_s_;
  if (seconds - last_draw_s_ < interval) return;
  last_draw_s_ = seconds;
  draw(done, total, seconds);
}

void ProgressBar::finish() {
  if (style_ == Style::kOff) return;
  draw(last_done_, last_total_, last_seconds_);
  if (style_ == Style::kBar) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace mopt
