#include "backend/cuda/plan_choice.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace mopt::cuda {

std::vector<char> keep_after_first_round(std::span<const float> net_us, float ratio, float slack_us, int min_keep) {
  std::vector<int> ran;  // candidates with a finite time, fastest first
  for (size_t c = 0; c < net_us.size(); ++c)
    if (std::isfinite(net_us[c])) ran.push_back(static_cast<int>(c));
  std::stable_sort(ran.begin(), ran.end(), [&](int a, int b) { return net_us[a] < net_us[b]; });
  std::vector<char> keep(net_us.size(), 0);
  if (ran.empty()) return keep;
  const float best = net_us[static_cast<size_t>(ran[0])];
  const float limit = best + (ratio - 1.f) * std::fabs(best) + slack_us;
  for (size_t i = 0; i < ran.size(); ++i)
    keep[static_cast<size_t>(ran[i])] = static_cast<int>(i) < min_keep || net_us[static_cast<size_t>(ran[i])] <= limit;
  return keep;
}

int choose_one_row_variant(std::span<const float> us1, std::span<const float> us8, std::span<const int> order,
                           float eps) {
  const size_t n = us1.size();
  if (us8.size() != n || order.size() != n) return -1;
  auto finite = [](float x) { return std::isfinite(x); };
  int fastest = -1;
  for (size_t v = 0; v < n; ++v)
    if (finite(us1[v]) && (fastest < 0 || us1[v] < us1[static_cast<size_t>(fastest)])) fastest = static_cast<int>(v);
  if (fastest < 0 || !(eps > 0.f)) return fastest;
  const std::map<int, float> best8 = fastest_per_order(us8, order);
  const float limit = us1[static_cast<size_t>(fastest)] * (1.f + eps);
  int pick = fastest;
  float pick8 = std::numeric_limits<float>::infinity();
  if (auto it = best8.find(order[static_cast<size_t>(fastest)]); it != best8.end()) pick8 = it->second;
  for (size_t v = 0; v < n; ++v) {
    if (!finite(us1[v]) || us1[v] > limit) continue;
    const auto it = best8.find(order[v]);
    if (it == best8.end()) continue;
    const float t8 = it->second;
    const size_t p = static_cast<size_t>(pick);
    if (t8 < pick8 || (t8 == pick8 && (us1[v] < us1[p] || (us1[v] == us1[p] && static_cast<int>(v) < pick)))) {
      pick = static_cast<int>(v);
      pick8 = t8;
    }
  }
  return pick;
}

std::vector<bool> tilings_of_near_orders(std::span<const float> us1, std::span<const int> order, float window) {
  const size_t n = std::min(us1.size(), order.size());
  std::vector<bool> marks(n, false);
  float fastest = std::numeric_limits<float>::infinity();
  for (size_t v = 0; v < n; ++v)
    if (std::isfinite(us1[v])) fastest = std::min(fastest, us1[v]);
  if (!std::isfinite(fastest)) return marks;
  std::set<int> near;
  for (size_t v = 0; v < n; ++v)
    if (std::isfinite(us1[v]) && us1[v] <= fastest * (1.f + window)) near.insert(order[v]);
  for (size_t v = 0; v < n; ++v) marks[v] = near.count(order[v]) > 0;
  return marks;
}

std::map<int, float> fastest_per_order(std::span<const float> us8, std::span<const int> order) {
  std::map<int, float> best8;
  for (size_t v = 0; v < us8.size() && v < order.size(); ++v) {
    if (!std::isfinite(us8[v])) continue;
    auto [it, fresh] = best8.try_emplace(order[v], us8[v]);
    if (!fresh && us8[v] < it->second) it->second = us8[v];
  }
  return best8;
}

float one_row_switch_cost_us(float cur_us1, float cur_us8, float to_us8, float eps) {
  if (!std::isfinite(cur_us8) || !std::isfinite(to_us8)) return std::numeric_limits<float>::infinity();
  if (!(eps > 0.f) || to_us8 == cur_us8) return 0.f;
  if (!std::isfinite(cur_us1) || !(cur_us1 > 0.f)) return std::numeric_limits<float>::infinity();
  return to_us8 > cur_us8 ? eps * cur_us1 : -eps * cur_us1;
}

}  // namespace mopt::cuda
