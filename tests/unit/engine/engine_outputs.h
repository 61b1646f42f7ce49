// Test helper: runs requests through a fresh engine over a real model until all finish, collecting each one's
// tokens, text, logprobs and finish reason (engine_model_test, speculative/spec_greedy_test).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mopt::test {

struct EngineRunOutput {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;  // with params.logprobs
  std::string text;
  FinishReason reason = FinishReason::kNone;
  int cached = 0;  // prompt tokens served by the prefix cache
};

// Adds all specs at once and steps until none is left; outputs in the order of `specs`. Fails the test when a
// request is refused, the engine makes no progress, or blocks are left allocated.
inline std::vector<EngineRunOutput> run_to_completion(const Model& model, const Tokenizer& tok,
                                                      const EngineConfig& cfg, const std::vector<RequestSpec>& specs,
                                                      EngineStats* stats = nullptr) {
  auto e = Engine::create(model, tok, cfg);
  EXPECT_TRUE(e) << e.message();
  if (!e) return {};
  Engine& eng = **e;
  std::map<uint64_t, EngineRunOutput> outs;
  std::vector<uint64_t> ids;
  for (const RequestSpec& s : specs) {
    AddResult r = eng.add_request(s, [&](const RequestOutput& o) {
      EngineRunOutput& x = outs[o.request_id];
      x.tokens.insert(x.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      x.logprobs.insert(x.logprobs.end(), o.token_logprobs.begin(), o.token_logprobs.end());
      x.text += o.text;
      if (o.finished) x.reason = o.finish_reason;
      x.cached = o.cached_prompt_tokens;
    });
    EXPECT_EQ(r.error, AddError::kNone) << r.message;
    ids.push_back(r.request_id);
  }
  for (int i = 0; eng.has_unfinished(); ++i) {
    eng.step();
    if (i > 100000) {
      ADD_FAILURE() << "no progress";
      break;
    }
  }
  const EngineStats st = eng.stats();
  if (stats) *stats = st;
  EXPECT_EQ(st.free_blocks, st.num_blocks) << "blocks leaked";
  std::vector<EngineRunOutput> res;
  for (uint64_t id : ids) res.push_back(outs[id]);
  return res;
}

}  // namespace mopt::test
