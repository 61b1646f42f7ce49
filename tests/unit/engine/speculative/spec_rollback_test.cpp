// Speculative rollback in the scheduler and the KV cache manager: proposals are scheduled behind the real token,
// computed only once accepted, the blocks past the tokens are freed, and the prefix cache never registers a block
// holding a rejected proposal. Proposals that do not fit are dropped before anyone is preempted.
#include <gtest/gtest.h>

#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"

namespace mopt {
namespace {

std::vector<int32_t> iota_tokens(int n, int start) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

Request make_req(std::vector<int32_t> toks, uint64_t id) {
  Request r;
  r.id = id;
  r.arrival = id;
  r.tokens = std::move(toks);
  r.num_prompt_tokens = r.num_tokens();
  r.params.max_tokens = 64;
  return r;
}

SchedulerConfig config() {
  SchedulerConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 64;
  return c;
}

TEST(SpecRollback, RejectedProposalsAreNeitherComputedNorCached) {
  KVCacheManager kv(16, 4, true);
  Scheduler sched(config(), kv);
  Request r = make_req(iota_tokens(7, 100), 1);
  sched.add(&r);
  SchedulerOutput o = sched.schedule();  // the prompt
  ASSERT_EQ(o.scheduled.size(), 1u);
  sched.on_step_done(o);
  r.tokens.push_back(200);  // the sampled token: 8 tokens, 7 computed

  r.spec_tokens = {201, 202, 203, 204, 205};  // positions 8 .. 12
  o = sched.schedule();
  ASSERT_EQ(o.scheduled.size(), 1u);
  EXPECT_EQ(o.scheduled[0].num_new_tokens, 6);
  EXPECT_EQ(o.scheduled[0].num_spec_tokens, 5);
  EXPECT_TRUE(o.scheduled[0].needs_logits);
  EXPECT_EQ(r.block_table.size(), 4u) << "13 positions in blocks of 4";
  sched.on_step_done(o);
  EXPECT_EQ(r.num_computed_tokens, 8) << "proposals are not computed before verification";
  EXPECT_EQ(r.num_cached_blocks, 2);

  // Proposal 201 accepted, 202 rejected: the target's token 300 follows 201.
  r.tokens.push_back(201);
  r.tokens.push_back(300);
  sched.accept_spec_tokens(&r, 1);
  EXPECT_EQ(r.num_computed_tokens, 9);
  EXPECT_TRUE(r.spec_tokens.empty());
  EXPECT_EQ(r.block_table.size(), 3u) << "the block past the 10 tokens is freed";
  EXPECT_EQ(kv.pool().num_free(), 13);
  EXPECT_EQ(sched.check_invariants(), "");
  // The block of positions 8 .. 11 holds 201 (accepted) and 202, 203, 204 (rejected): never registered as such.
  ASSERT_EQ(r.block_hashes.size(), 2u);
  const std::vector<int32_t> written = {201, 202, 203, 204};
  EXPECT_FALSE(kv.pool().lookup(hash_block(&r.block_hashes[1], written, "")).has_value());

  // Two more plain steps fill that block with the verified tokens: then it is cached, under their hash.
  o = sched.schedule();  // 300 at position 9
  sched.on_step_done(o);
  r.tokens.push_back(301);
  o = sched.schedule();  // 301 at position 10
  sched.on_step_done(o);
  r.tokens.push_back(302);
  o = sched.schedule();  // 302 at position 11: the block is full
  sched.on_step_done(o);
  EXPECT_EQ(r.num_computed_tokens, 12);
  EXPECT_EQ(r.num_cached_blocks, 3);
  const std::vector<int32_t> verified = {201, 300, 301, 302};
  EXPECT_EQ(kv.pool().lookup(hash_block(&r.block_hashes[1], verified, "")), r.block_table[2]);
  EXPECT_FALSE(kv.pool().lookup(hash_block(&r.block_hashes[1], written, "")).has_value());
  sched.finish(&r);
  EXPECT_EQ(sched.check_invariants(), "");
}

TEST(SpecRollback, ProposalsAreDroppedBeforeAnyonePreempted) {
  KVCacheManager kv(4, 4, false);  // 16 slots
  Scheduler sched(config(), kv);
  Request a = make_req(iota_tokens(8, 10), 1), b = make_req(iota_tokens(3, 50), 2);
  sched.add(&a);
  sched.add(&b);
  SchedulerOutput o = sched.schedule();
  ASSERT_EQ(o.scheduled.size(), 2u);
  sched.on_step_done(o);
  a.tokens.push_back(60);
  b.tokens.push_back(61);
  // a holds 2 blocks, b 1 (with room for its next token): one block is free, which a needs for position 8;
  // its 6 proposals would need another (positions 9 .. 14).
  a.spec_tokens = {1, 2, 3, 4, 5, 6};
  o = sched.schedule();
  EXPECT_EQ(o.num_preempted, 0);
  ASSERT_EQ(o.scheduled.size(), 2u);
  for (const ScheduledRequest& s : o.scheduled) {
    EXPECT_EQ(s.num_spec_tokens, 0);
    EXPECT_EQ(s.num_new_tokens, 1);
  }
  EXPECT_TRUE(a.spec_tokens.empty());
  // The step budget cuts proposals short instead.
  sched.on_step_done(o);
  a.tokens.push_back(62);
  b.tokens.push_back(63);
  SchedulerConfig tight = config();
  tight.max_num_batched_tokens = 3;
  KVCacheManager kv2(8, 4, false);
  Scheduler s2(tight, kv2);
  Request c = make_req(iota_tokens(2, 70), 3);
  s2.add(&c);
  o = s2.schedule();
  s2.on_step_done(o);
  c.tokens.push_back(80);
  c.spec_tokens = {81, 82, 83, 84};
  o = s2.schedule();
  ASSERT_EQ(o.scheduled.size(), 1u);
  EXPECT_EQ(o.scheduled[0].num_new_tokens, 3);
  EXPECT_EQ(o.scheduled[0].num_spec_tokens, 2);
  EXPECT_EQ(c.spec_tokens, (std::vector<int32_t>{81, 82}));
  s2.on_step_done(o);
  c.tokens.push_back(81);
  c.tokens.push_back(82);
  c.tokens.push_back(90);
  s2.accept_spec_tokens(&c, 2);
  EXPECT_EQ(c.num_computed_tokens, 5);
  EXPECT_EQ(s2.check_invariants(), "");
  s2.finish(&c);
  sched.finish(&a);
  sched.finish(&b);
  EXPECT_EQ(sched.check_invariants(), "");
}

}  // namespace
}  // namespace mopt
