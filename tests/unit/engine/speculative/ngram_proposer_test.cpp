// propose_ngram: longest recurring suffix, most recent occurrence, a draft as long as the match minus one, truncation
// at k and at the context's end.
#include <gtest/gtest.h>

#include <vector>

#include "engine/speculative/ngram_proposer.h"

namespace mopt {
namespace {

std::vector<int32_t> propose(const std::vector<int32_t>& ctx, int n_min, int n_max, int k) {
  std::vector<int32_t> out{99};  // must be cleared
  propose_ngram(ctx, n_min, n_max, k, out);
  return out;
}

TEST(NgramProposer, CopiesWhatFollowedTheSuffix) {
  // Suffix "7 1 2" occurs at 0..2, followed by 3 4 5: a 3-token match proposes 2 tokens.
  EXPECT_EQ(propose({7, 1, 2, 3, 4, 5, 9, 7, 1, 2}, 1, 3, 3), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(propose({7, 1, 2, 3, 4, 5, 9, 7, 1, 2}, 1, 3, 1), (std::vector<int32_t>{3}));
}

TEST(NgramProposer, DraftLengthFollowsTheMatchPastNMax) {
  // "1 2" (n_max = 2) recurs at 4..5, and the match goes on back through "12 13" (4 tokens; 11 != 99 ends it):
  // 3 tokens proposed, or k when fewer.
  const std::vector<int32_t> ctx = {10, 11, 12, 13, 1, 2, 3, 4, 5, 6, 99, 12, 13, 1, 2};
  EXPECT_EQ(propose(ctx, 1, 2, 4), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(propose(ctx, 1, 2, 8), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(propose(ctx, 1, 2, 2), (std::vector<int32_t>{3, 4}));
  // A one-token match still proposes one token.
  EXPECT_EQ(propose({1, 2, 3, 4, 9, 1}, 1, 4, 4), (std::vector<int32_t>{2}));
}

TEST(NgramProposer, FindNgramGivesTheMatchAndItsFollowedLength) {
  const std::vector<int32_t> ctx = {10, 11, 12, 13, 1, 2, 3, 4, 5, 6, 99, 12, 13, 1, 2};
  NgramMatch m = find_ngram(ctx, 1, 2, 0);  // follow 0: the length as found, at most n_max
  EXPECT_EQ(m.end, 5);
  EXPECT_EQ(m.length, 2);
  m = find_ngram(ctx, 1, 2, 64);  // followed back through "12 13" to 11 != 99
  EXPECT_EQ(m.end, 5);
  EXPECT_EQ(m.length, 4);
  EXPECT_EQ(find_ngram(ctx, 1, 2, 3).length, 3);
  EXPECT_EQ(find_ngram(std::vector<int32_t>{1, 2, 3}, 1, 4, 8).end, -1);  // nothing recurs
  EXPECT_EQ(find_ngram(std::vector<int32_t>{1, 2, 3, 4, 2}, 2, 4, 8).end, -1);  // only one token recurs, two asked
  EXPECT_EQ(find_ngram(std::vector<int32_t>{5}, 1, 1, 8).end, -1);
}

TEST(NgramProposer, PrefersTheLongestMatchThenTheMostRecent) {
  // "7 8" (2 tokens) occurs at 0..1 followed by 1; only "8" (1 token) recurs at 4, followed by 2.
  EXPECT_EQ(propose({7, 8, 1, 5, 8, 2, 6, 7, 8}, 1, 3, 1), (std::vector<int32_t>{1}));
  // With n_max = 1 the most recent "8" wins.
  EXPECT_EQ(propose({7, 8, 1, 5, 8, 2, 6, 7, 8}, 1, 1, 1), (std::vector<int32_t>{2}));
  // Two equally long matches: the most recent one.
  EXPECT_EQ(propose({4, 5, 1, 4, 5, 2, 4, 5}, 2, 2, 1), (std::vector<int32_t>{2}));
}

TEST(NgramProposer, NothingBelowTheMinimumLength) {
  // Only "2" recurs; n_min = 2 asks for two tokens.
  EXPECT_TRUE(propose({1, 2, 3, 4, 2}, 2, 4, 3).empty());
  EXPECT_EQ(propose({1, 2, 3, 4, 2}, 1, 4, 3), (std::vector<int32_t>{3}));
  EXPECT_TRUE(propose({1, 2, 3}, 1, 4, 3).empty());   // nothing recurs
  EXPECT_TRUE(propose({5}, 1, 1, 3).empty());         // too short
  EXPECT_TRUE(propose({5, 5}, 1, 1, 0).empty());      // k = 0
}

TEST(NgramProposer, StopsAtTheEndOfTheContext) {
  // A run of one token: the most recent earlier "5 5" ends just before the last token, so one token follows it.
  EXPECT_EQ(propose({5, 5, 5, 5}, 1, 2, 4), (std::vector<int32_t>{5}));
  // "1 2 1 2" against the suffix, n_max 8: the match at 0..1 is capped by its start (2 tokens: 1 proposed); a
  // longer context lets it run to 4 tokens, and the 3 proposed stop at the context's end after 2.
  EXPECT_EQ(propose({1, 2, 1, 2}, 1, 8, 4), (std::vector<int32_t>{1}));
  EXPECT_EQ(propose({3, 1, 2, 1, 2, 1, 2}, 1, 2, 4), (std::vector<int32_t>{1, 2}));
}

}  // namespace
}  // namespace mopt
