// The window plan against hand-derived layouts of the Hugging Face sliding-window protocol.
#include <gtest/gtest.h>

#include "eval/windows.h"

namespace mopt::eval {
namespace {

struct W {
  int64_t begin, end, score_from;
};

void expect_plan(int64_t n, int ctx, int stride, const std::vector<W>& want) {
  SCOPED_TRACE(testing::Message() << "n " << n << " ctx " << ctx << " stride " << stride);
  auto p = plan_windows(n, ctx, stride);
  ASSERT_TRUE(p) << p.message();
  ASSERT_EQ(p->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*p)[i].begin, want[i].begin) << "window " << i;
    EXPECT_EQ((*p)[i].end, want[i].end) << "window " << i;
    EXPECT_EQ((*p)[i].score_from, want[i].score_from) << "window " << i;
  }
}

TEST(EvalWindows, SideBySideSkipsEachWindowsFirstToken) {
  expect_plan(10, 4, 4, {{0, 4, 1}, {4, 8, 5}, {8, 10, 9}});
  expect_plan(8, 4, 4, {{0, 4, 1}, {4, 8, 5}});  // ends exactly: no empty window
  expect_plan(3, 1024, 1024, {{0, 3, 1}});       // a text shorter than a window
  expect_plan(2, 2, 2, {{0, 2, 1}});
}

TEST(EvalWindows, OverlappingWindowsScoreEveryTokenOnce) {
  // Hugging Face: trg_len = end - prev_end; the first window scores all but token 0.
  expect_plan(10, 4, 2, {{0, 4, 1}, {2, 6, 4}, {4, 8, 6}, {6, 10, 8}});
  expect_plan(11, 4, 3, {{0, 4, 1}, {3, 7, 4}, {6, 10, 7}, {9, 11, 10}});
  for (int ctx : {2, 3, 5, 16})
    for (int stride = 1; stride < ctx; ++stride) {
      auto p = plan_windows(50, ctx, stride);
      ASSERT_TRUE(p) << p.message();
      std::vector<int> scored(50, 0);
      for (const Window& w : *p) {
        EXPECT_GE(w.score_from, w.begin + 1);
        EXPECT_LE(w.end - w.begin, ctx);
        EXPECT_EQ(w.prompt_len(), w.end - w.begin - 1);
        EXPECT_EQ(w.first_row(), w.score_from - 1 - w.begin);
        for (int64_t j = w.score_from; j < w.end; ++j) ++scored[static_cast<size_t>(j)];
      }
      EXPECT_EQ(scored[0], 0);
      for (int j = 1; j < 50; ++j)
        EXPECT_EQ(scored[static_cast<size_t>(j)], 1) << "ctx " << ctx << " stride " << stride << " token " << j;
    }
}

TEST(EvalWindows, BadArguments) {
  EXPECT_NE(plan_windows(10, 1, 1).message().find("--ctx"), std::string::npos);
  EXPECT_NE(plan_windows(10, 4, 0).message().find("--stride"), std::string::npos);
  EXPECT_NE(plan_windows(10, 4, 5).message().find("--stride"), std::string::npos);
  EXPECT_NE(plan_windows(1, 4, 4).message().find("at least 2"), std::string::npos);
  EXPECT_NE(plan_windows(0, 4, 4).message().find("0 tokens"), std::string::npos);
}

}  // namespace
}  // namespace mopt::eval
