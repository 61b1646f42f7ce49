// How the tuner narrows its candidates (screening after a first round of timings), and how a one-row fused decode
// plan is chosen when verification rows are weighed too (RunnerOptions::one_row_plan_eps; docs/speculative.md,
// "One-row plans with the verification rows in view"). Host code only.
//
// A speculative verification step computes each of its rows with a tiling of the one-row decode plan's
// reduction order (Gemm::run_fused's row_invariant), so the one-row plan also decides what 2 .. 8 rows cost. Every
// engine, speculative or not, must choose its one-row plans alike (else plain and speculative greedy output part
// at near-ties), so the rule below depends only on timings, never on a speculative config.
#pragma once

#include <map>
#include <span>
#include <vector>

namespace mopt::cuda {

// Screening (Gemm::time_cold_l2): net_us[c] is candidate c's time in the first round (+inf or NaN: it did not run).
// Returns which candidates the later rounds time again: every one within ratio x the fastest time plus slack_us,
// and the min_keep fastest whatever their times (ties: the lower index). The others keep their first-round time:
// far slower tilings need no median to be ranked below the fast ones. All that ran, when at most min_keep did.
std::vector<char> keep_after_first_round(std::span<const float> net_us, float ratio, float slack_us, int min_keep);

// us1[v], us8[v]: isolated times of tiling v for 1 and 8 rows (+inf or NaN: it did not run); order[v]: its
// reduction order (skinny_reduction_order). Among the tilings whose one-row time is within (1 + eps) of the
// fastest one-row time, returns the one whose reduction order has the fastest 8-row time (over every tiling of that
// order, in or out of the window: verification rows take the fastest of the order); ties go to the faster one-row
// time, then the lower index. eps <= 0, or no finite 8-row time in the window: the fastest one-row tiling. -1 when
// no tiling ran for one row. The spans have equal sizes.
int choose_one_row_variant(std::span<const float> us1, std::span<const float> us8, std::span<const int> order,
                           float eps);

// Which tilings to time at 8 rows: marks[v] is true for every tiling of a reduction order that has a tiling whose
// one-row time us1 is within (1 + window) of the fastest finite one (orders further off are neither chosen by
// choose_one_row_variant nor tried by the in-graph refinement). No finite one-row time: all false.
std::vector<bool> tilings_of_near_orders(std::span<const float> us1, std::span<const int> order, float window);

// Each reduction order's fastest finite 8-row time over the tilings (us8[v], order[v] as above).
std::map<int, float> fastest_per_order(std::span<const float> us8, std::span<const int> order);

// The in-graph refinement of a one-row plan chosen with eps (runner_graphs.cpp), where the whole step is timed
// with one tiling swapped: what a switch from the tiling in use to another must save (us per launch; the caller
// multiplies by the plan's launches in the step) beyond the refinement's own margin. eps x the current tiling's
// isolated one-row time (cur_us1) when the other's reduction order is slower at 8 rows (to_us8 > cur_us8), minus
// that when it is faster (the switch may then cost up to that much: the window of choose_one_row_variant, in the
// step), 0 for equal 8-row times or eps <= 0; +inf when either order's 8-row time or cur_us1 is unknown (not
// finite), so that the switch is not tried.
float one_row_switch_cost_us(float cur_us1, float cur_us8, float to_us8, float eps);

}  // namespace mopt::cuda
