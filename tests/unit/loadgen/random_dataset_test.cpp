// mopt bench --dataset random (loadgen/random_prompts.h): lengths drawn as vLLM's benchmark draws them, prompts that
// the tokenizer counts at exactly the drawn length. (The flags: tests/unit/cli/vllm_flags_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "loadgen/random_prompts.h"

namespace mopt::loadgen {
namespace {

// A stand-in tokenizer: BOS, then two tokens for a word of more than 3 letters and one for a shorter one, except
// that "the cat" is one token (a merge, as BPE has) and "a" is two (so the first filler does not fit): a word count
// is not a token count, and the prompt maker must measure.
Result<int> count_tokens(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  int n = 1;
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == "the" && i + 1 < words.size() && words[i + 1] == "cat") ++i;
    n += words[i].size() > 3 || words[i] == "a" ? 2 : 1;
  }
  return n;
}

TEST(RandomDataset, LengthsAreVllmsRanges) {
  EXPECT_EQ(random_length_range(1024, 0, "x").value(), std::make_pair(1024, 1024));
  EXPECT_EQ(random_length_range(100, 0.5, "x").value(), std::make_pair(50, 150));
  EXPECT_EQ(random_length_range(3, 0.9, "x").value(), std::make_pair(1, 6));  // at least 1 token
  EXPECT_FALSE(random_length_range(100, 1.0, "x"));
  EXPECT_FALSE(random_length_range(100, -0.1, "x"));
  EXPECT_FALSE(random_length_range(0, 0, "x"));
}

TEST(RandomDataset, PromptsHaveExactlyTheDrawnTokenCount) {
  RandomDatasetOptions o;
  o.input_len = 40;
  o.output_len = 10;
  o.range_ratio = 0.5;
  o.num_prompts = 200;
  int calls = 0;
  auto items = random_prompts(o, [&](const std::string& t) { ++calls; return count_tokens(t); });
  ASSERT_TRUE(items) << items.message();
  ASSERT_EQ(items->size(), 200u);
  std::map<int, int> in_hist;
  for (const WorkItem& w : *items) {
    EXPECT_EQ(count_tokens(w.prompt).value(), w.expected_prompt_tokens);
    EXPECT_GE(w.expected_prompt_tokens, 20);
    EXPECT_LE(w.expected_prompt_tokens, 60);
    EXPECT_GE(w.max_tokens, 5);
    EXPECT_LE(w.max_tokens, 15);
    ++in_hist[w.expected_prompt_tokens];
  }
  // Uniform over 41 lengths: both ends are drawn, and no length takes a large share.
  EXPECT_TRUE(in_hist.count(20) || in_hist.count(21));
  EXPECT_TRUE(in_hist.count(60) || in_hist.count(59));
  for (const auto& [len, n] : in_hist) EXPECT_LT(n, 30) << len;
  EXPECT_LT(calls, 200 * 12) << "a few /tokenize calls per prompt";
  // The same seed gives the same prompts.
  auto again = random_prompts(o, count_tokens);
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)[7].prompt, (*items)[7].prompt);
}

// With no range every prompt has exactly --random-input-len tokens, however the words tokenize.
TEST(RandomDataset, ExactLengthWithoutRange) {
  RandomDatasetOptions o;
  o.input_len = 37;
  o.output_len = 9;
  o.num_prompts = 50;
  auto items = random_prompts(o, count_tokens);
  ASSERT_TRUE(items) << items.message();
  for (const WorkItem& w : *items) {
    EXPECT_EQ(count_tokens(w.prompt).value(), 37) << w.prompt;
    EXPECT_EQ(w.expected_prompt_tokens, 37);
    EXPECT_EQ(w.max_tokens, 9);
  }
}

TEST(RandomDataset, ServerErrorsPropagate) {
  RandomDatasetOptions o;
  o.num_prompts = 2;
  auto r = random_prompts(o, [](const std::string&) -> Result<int> { return error("HTTP 404 from /tokenize"); });
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("404"), std::string::npos);
  // A workload of this kind made without a token counter is refused, not guessed.
  WorkloadOptions w;
  w.kind = WorkloadOptions::Kind::kRandom;
  EXPECT_FALSE(Workload::create(w));
}

TEST(RandomDataset, WorkloadCyclesThePromptsWithTheirOutputLengths) {
  WorkloadOptions w;
  w.kind = WorkloadOptions::Kind::kRandom;
  w.random.input_len = 8;
  w.random.output_len = 30;
  w.random.num_prompts = 3;
  w.output_len = Distribution::fixed(999);  // not used by this kind
  auto wl = Workload::create(w, count_tokens);
  ASSERT_TRUE(wl) << wl.message();
  for (int i = 0; i < 6; ++i) {
    WorkItem it = wl->next();
    EXPECT_EQ(it.expected_prompt_tokens, 8);
    EXPECT_EQ(it.max_tokens, 30);
  }
}

}  // namespace
}  // namespace mopt::loadgen
