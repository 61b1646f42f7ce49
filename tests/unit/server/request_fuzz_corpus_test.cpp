// Runs the request-path fuzz bodies (fuzz/request_fuzz_bodies.h) over their seed corpora (fuzz/corpus/<target>/,
// which hold the reproducers of what the fuzzers found) and deterministic mutants of the seeds, so the regular test
// build (and CI's ASan/UBSan run) exercises what the libFuzzer targets do. A body aborts on a broken invariant;
// a crash, a sanitizer report or a hang fails the test. The mutant counts keep the whole file to a few seconds
// under ASan.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "../../../fuzz/request_fuzz_bodies.h"
#include "core/mmap.h"
#include "unit/fuzz_replay.h"

namespace mopt {
namespace {

// Every file of fuzz/corpus/<target>, in name order.
std::vector<std::vector<uint8_t>> seeds(const std::string& target) {
  const std::filesystem::path dir = std::filesystem::path(MOPT_SOURCE_DIR) / "fuzz" / "corpus" / target;
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  std::vector<std::vector<uint8_t>> out;
  for (const auto& p : paths) {
    auto text = read_file(p);
    EXPECT_TRUE(text.is_ok()) << text.message();
    if (text) out.push_back(test::to_bytes(*text));
  }
  EXPECT_FALSE(out.empty()) << "no seeds in " << dir;
  return out;
}

TEST(RequestFuzzCorpus, OpenaiRequestMutants) {
  test::replay(seeds("openai_request"), 40, 11, fuzz::openai_request_body);
}

TEST(RequestFuzzCorpus, JsonSchemaMutants) { test::replay(seeds("json_schema"), 60, 12, fuzz::json_schema_body); }

TEST(RequestFuzzCorpus, GbnfMutants) { test::replay(seeds("gbnf"), 100, 13, fuzz::gbnf_body); }

TEST(RequestFuzzCorpus, RegexMutants) { test::replay(seeds("regex"), 100, 14, fuzz::regex_body); }

TEST(RequestFuzzCorpus, ChatTemplateMutants) { test::replay(seeds("chat_template"), 80, 15, fuzz::chat_template_body); }

TEST(RequestFuzzCorpus, ModelOutputMutants) { test::replay(seeds("model_output"), 300, 16, fuzz::model_output_body); }

}  // namespace
}  // namespace mopt
