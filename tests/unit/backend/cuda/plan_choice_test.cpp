// choose_one_row_variant (backend/cuda/plan_choice.h): host code, runs without a GPU.
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "backend/cuda/plan_choice.h"

namespace mopt {
namespace {

using cuda::choose_one_row_variant;
constexpr float kInf = std::numeric_limits<float>::infinity();

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

}  // namespace
}  // namespace mopt
#endif
