// keep_after_first_round, choose_one_row_variant, tilings_of_near_orders, fastest_per_order and
// one_row_switch_cost_us (backend/cuda/plan_choice.h): host code, runs without a GPU.
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cuda/plan_choice.h"

namespace mopt {
namespace {

using cuda::choose_one_row_variant;
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(TunerScreening, KeepsTheNearOnesAndTheFastestFew) {
  using cuda::keep_after_first_round;
  const float nan = std::nanf("");
  // Fastest 10 us: the limit is 10 x 1.5 + 1 = 16 us.
  const std::vector<float> t = {30.f, 10.f, 16.f, 16.5f, kInf, 12.f, nan, 40.f};
  EXPECT_EQ(keep_after_first_round(t, 1.5f, 1.f, 2), (std::vector<char>{0, 1, 1, 0, 0, 1, 0, 0}));
  // The min_keep fastest stay whatever their times: 16.5 and 30 are the 4th and 5th fastest.
  EXPECT_EQ(keep_after_first_round(t, 1.5f, 1.f, 5), (std::vector<char>{1, 1, 1, 1, 0, 1, 0, 0}));
  // At most min_keep ran: all of them.
  EXPECT_EQ(keep_after_first_round(t, 1.f, 0.f, 6), (std::vector<char>{1, 1, 1, 1, 0, 1, 0, 1}));
  // Equal times: the lower index first.
  EXPECT_EQ(keep_after_first_round(std::vector<float>{5.f, 5.f, 5.f}, 1.f, -1.f, 2), (std::vector<char>{1, 1, 0}));
  // A negative fastest time (noise on a tiny kernel) widens the window by |t|, not less.
  EXPECT_EQ(keep_after_first_round(std::vector<float>{-2.f, 0.5f, 0.f, 3.f}, 1.5f, 1.f, 1),
            (std::vector<char>{1, 0, 1, 0}));
  EXPECT_EQ(keep_after_first_round(std::vector<float>{kInf, nan}, 1.5f, 1.f, 1), (std::vector<char>{0, 0}));
  EXPECT_TRUE(keep_after_first_round(std::vector<float>{}, 1.5f, 1.f, 1).empty());
}

TEST(OneRowPlanChoice, ZeroEpsTakesTheFastestOneRowTiling) {
  const std::vector<float> us1 = {5.0f, 4.0f, 4.1f}, us8 = {6.f, 20.f, 5.f};
  const std::vector<int> order = {1, 2, 3};
  EXPECT_EQ(choose_one_row_variant(us1, us8, order, 0.f), 1);
  EXPECT_EQ(choose_one_row_variant(us1, us8, order, -1.f), 1);
}

TEST(OneRowPlanChoice, WithinTheWindowTheCheapestOrderAtEightRowsWins) {
  // Tiling 2 is 2.5% slower for one row and its order is far cheaper at 8 rows.
  const std::vector<float> us1 = {5.0f, 4.0f, 4.1f, 4.3f}, us8 = {6.f, 20.f, 5.f, 4.f};
  const std::vector<int> order = {1, 2, 3, 4};
  EXPECT_EQ(choose_one_row_variant(us1, us8, order, 0.03f), 2);
  EXPECT_EQ(choose_one_row_variant(us1, us8, order, 0.02f), 1);  // 4.1 > 1.02 * 4.0
  EXPECT_EQ(choose_one_row_variant(us1, us8, order, 0.1f), 3);   // 4.3 <= 4.4, and 4 < 5 at 8 rows
  EXPECT_EQ(choose_one_row_variant(us1, us8, order, 1.0f), 3);   // tiling 0 is in, but 6 > 4
}

TEST(OneRowPlanChoice, AnOrderIsJudgedByItsFastestTilingAtEightRows) {
  // Tiling 0 (fastest for one row) shares order 7 with tiling 3, outside the window, which is cheap at 8 rows:
  // verification rows take tiling 3, so tiling 0 keeps the plan against tiling 1 (order 8, 8-row time 9).
  const std::vector<float> us1 = {4.0f, 4.05f, 9.f, 9.f}, us8 = {30.f, 9.f, 1.f, 2.f};
  const std::vector<int> order = {7, 8, 9, 7};
  EXPECT_EQ(choose_one_row_variant(us1, us8, order, 0.05f), 0);
  // Equal 8-row costs of their orders: the faster one-row time.
  const std::vector<float> us8b = {30.f, 2.f, 1.f, 2.f};
  EXPECT_EQ(choose_one_row_variant(us1, us8b, order, 0.05f), 0);
  const std::vector<float> us1b = {4.05f, 4.0f, 9.f, 9.f};
  EXPECT_EQ(choose_one_row_variant(us1b, us8b, order, 0.05f), 1);
}

TEST(OneRowPlanChoice, TilingsThatDidNotRunAreSkipped) {
  const std::vector<float> us1 = {kInf, 4.0f, 4.1f}, us8 = {1.f, kInf, kInf};
  const std::vector<int> order = {1, 2, 3};
  EXPECT_EQ(choose_one_row_variant(us1, us8, order, 0.5f), 1);  // no 8-row time in the window: the fastest
  const std::vector<float> none = {kInf, kInf};
  EXPECT_EQ(choose_one_row_variant(none, none, std::vector<int>{1, 2}, 0.5f), -1);
  EXPECT_EQ(choose_one_row_variant(us1, none, order, 0.5f), -1);  // sizes differ
}

// Only the orders with a tiling near the fastest one-row time are timed at 8 rows, every tiling of them.
TEST(OneRowPlanChoice, TilingsOfNearOrders) {
  using cuda::tilings_of_near_orders;
  const std::vector<float> us1 = {4.0f, 4.5f, 4.7f, 9.f, kInf, 4.1f};
  const std::vector<int> order = {1, 2, 3, 2, 4, 1};
  // Limit 4.6: orders 1 and 2 are near (tiling 3 too, 9 us alone: its order is), order 3 (4.7) and 4 are not.
  EXPECT_EQ(tilings_of_near_orders(us1, order, 0.15f),
            (std::vector<bool>{true, true, false, true, false, true}));
  EXPECT_EQ(tilings_of_near_orders(us1, order, 0.1f),
            (std::vector<bool>{true, false, false, false, false, true}));
  EXPECT_EQ(tilings_of_near_orders(us1, order, 0.f), (std::vector<bool>{true, false, false, false, false, true}));
  const std::vector<float> none = {kInf, kInf};
  EXPECT_EQ(tilings_of_near_orders(none, std::vector<int>{1, 2}, 1.f), (std::vector<bool>{false, false}));
}

TEST(OneRowPlanChoice, FastestPerOrder) {
  const std::vector<float> us8 = {30.f, 9.f, kInf, 2.f, std::nanf("")};
  const std::vector<int> order = {7, 8, 9, 7, 8};
  const auto best = cuda::fastest_per_order(us8, order);
  ASSERT_EQ(best.size(), 2u);  // order 9 never ran at 8 rows
  EXPECT_EQ(best.at(7), 2.f);
  EXPECT_EQ(best.at(8), 9.f);
}

// In-graph refinement under eps: a switch to an order that is slower at 8 rows must save eps x the current
// tiling's one-row time per launch in the step; one to an order faster at 8 rows may cost that much; between
// orders equally fast at 8 rows, nothing either way.
TEST(OneRowPlanChoice, SwitchCostInTheGraph) {
  using cuda::one_row_switch_cost_us;
  EXPECT_FLOAT_EQ(one_row_switch_cost_us(10.f, 5.f, 8.f, 0.05f), 0.5f);
  EXPECT_EQ(one_row_switch_cost_us(10.f, 5.f, 5.f, 0.05f), 0.f);
  EXPECT_FLOAT_EQ(one_row_switch_cost_us(10.f, 5.f, 4.f, 0.05f), -0.5f);
  EXPECT_EQ(one_row_switch_cost_us(10.f, 5.f, 8.f, 0.f), 0.f);  // eps 0: the fastest in the step wins
  EXPECT_EQ(one_row_switch_cost_us(10.f, 5.f, 4.f, 0.f), 0.f);
  EXPECT_EQ(one_row_switch_cost_us(10.f, kInf, 8.f, 0.05f), kInf);  // an order's 8-row time unknown: not tried
  EXPECT_EQ(one_row_switch_cost_us(10.f, 5.f, kInf, 0.05f), kInf);
  EXPECT_EQ(one_row_switch_cost_us(kInf, 5.f, 8.f, 0.05f), kInf);
  EXPECT_EQ(one_row_switch_cost_us(kInf, 5.f, 4.f, 0.05f), kInf);
}

}  // namespace
}  // namespace mopt
#endif
