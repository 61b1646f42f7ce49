// Randomized scheduler tests: many seeds drive add / step / abort / preempt sequences over a small block pool and
// check the invariants after every step: no block leaked or double-freed, ref counts equal the number of block
// tables holding each block, block tables append-only while resident, token budget and max_num_seqs respected,
// and every request finishes (no starvation) once arrivals stop.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <cstdio>
#include <random>

#include "engine/scheduler.h"

namespace mopt {
namespace {

struct Sim {
  std::unique_ptr<Request> req;
  int target_outputs = 0;
};

void run_seed(uint32_t seed, uint64_t& preemptions_out, uint64_t& swaps_out) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint32_t>(hi - lo + 1)); };
  const int bs = std::vector<int>{1, 2, 4, 8}[static_cast<size_t>(pick(0, 3))];
  SchedulerConfig cfg;
  cfg.max_model_len = pick(8, 64);
  const int min_blocks = (cfg.max_model_len + bs - 1) / bs;
  const int nb = pick(min_blocks, min_blocks * 3);
  cfg.max_num_seqs = pick(1, 8);
  cfg.max_num_batched_tokens = pick(1, 40);
  cfg.policy = rng() % 2 ? SchedulingPolicy::kFcfs : SchedulingPolicy::kPriority;
  cfg.preemption = rng() % 2 ? PreemptionMode::kRecompute : PreemptionMode::kSwap;
  cfg.num_swap_blocks = cfg.preemption == PreemptionMode::kSwap ? pick(0, nb) : 0;
  KVCacheManager kv(nb, bs, rng() % 4 != 0);
  Scheduler s(cfg, kv);
  SCOPED_TRACE(strfmt("seed %u bs %d nb %d len %d seqs %d budget %d policy %d mode %d swap %d", seed, bs, nb,
                      cfg.max_model_len, cfg.max_num_seqs, cfg.max_num_batched_tokens, static_cast<int>(cfg.policy),
                      static_cast<int>(cfg.preemption), cfg.num_swap_blocks));

  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(pick(1, cfg.max_model_len)));
    for (auto& t : p) t = pick(0, 9);
    prefixes.push_back(p);
  }
  std::map<uint64_t, Sim> live;
  uint64_t next_id = 1, arrival = 0;
  uint64_t total_preemptions = 0, total_swap_outs = 0;

  auto add_one = [&] {
    Sim sim;
    sim.req = std::make_unique<Request>();
    Request& r = *sim.req;
    r.id = next_id++;
    r.arrival = arrival++;
    r.priority = pick(0, 3);
    std::vector<int32_t> toks = prefixes[static_cast<size_t>(pick(0, 2))];
    toks.resize(static_cast<size_t>(pick(1, static_cast<int>(toks.size()))));
    const int extra = pick(0, 4);
    for (int i = 0; i < extra; ++i) toks.push_back(pick(0, 9));
    r.params.max_tokens = pick(1, 20);
    const std::string why = s.check_fits(static_cast<int>(toks.size()), r.params.max_tokens);
    if (static_cast<int>(toks.size()) + r.params.max_tokens > cfg.max_model_len) {
      EXPECT_NE(why, "");
      return;
    }
    EXPECT_EQ(why, "");
    r.tokens = toks;
    r.num_prompt_tokens = static_cast<int>(toks.size());
    sim.target_outputs = pick(1, r.params.max_tokens);
    s.add(&r);
    live.emplace(r.id, std::move(sim));
  };

  auto step = [&] {
    // Snapshot block tables of resident requests.
    std::map<uint64_t, std::pair<std::vector<int32_t>, int>> before;
    for (auto& [id, sim] : live)
      if (sim.req->state == RequestState::kRunning)
        before[id] = {sim.req->block_table, sim.req->num_preemptions};
    SchedulerOutput out = s.schedule();
    ASSERT_EQ(s.check_invariants(), "");
    total_preemptions += static_cast<uint64_t>(out.num_preempted);
    total_swap_outs += out.swap_out.size();
    for (auto& [id, snap] : before) {
      Request& r = *live.at(id).req;
      if (r.num_preemptions != snap.second) continue;  // preempted: the table was released
      ASSERT_EQ(r.state, RequestState::kRunning);
      ASSERT_GE(r.block_table.size(), snap.first.size());
      ASSERT_TRUE(std::equal(snap.first.begin(), snap.first.end(), r.block_table.begin()))
          << "block table of request " << id << " was rewritten";
    }
    int tokens = 0;
    for (const ScheduledRequest& sr : out.scheduled) {
      ASSERT_GT(sr.num_new_tokens, 0);
      ASSERT_EQ(sr.req->state, RequestState::kRunning);
      const int64_t end = int64_t{sr.req->num_computed_tokens} + sr.num_new_tokens;
      ASSERT_LE(end, sr.req->num_tokens());
      ASSERT_LE(end, int64_t{static_cast<int>(sr.req->block_table.size())} * bs);
      tokens += sr.num_new_tokens;
    }
    ASSERT_LE(tokens, cfg.max_num_batched_tokens);
    ASSERT_LE(static_cast<int>(out.scheduled.size()), cfg.max_num_seqs);
    for (auto [h, d] : out.swap_in) {
      ASSERT_GE(h, 0);
      ASSERT_LT(h, cfg.num_swap_blocks);
      ASSERT_EQ(kv.pool().ref_count(d), 1);
    }
    s.on_step_done(out);
    for (const ScheduledRequest& sr : out.scheduled) {
      if (!sr.needs_logits) continue;
      Request& r = *sr.req;
      r.tokens.push_back(pick(0, 9));
      if (r.num_output_tokens() >= live.at(r.id).target_outputs) {
        s.finish(&r);
        live.erase(r.id);
      }
    }
    ASSERT_EQ(s.check_invariants(), "");
  };

  for (int it = 0; it < 300; ++it) {
    const int a = pick(0, 9);
    if (a < 3) {
      add_one();
    } else if (a == 3 && !live.empty()) {
      auto itr = live.begin();
      std::advance(itr, pick(0, static_cast<int>(live.size()) - 1));
      s.finish(itr->second.req.get());
      live.erase(itr);
      ASSERT_EQ(s.check_invariants(), "");
    } else {
      step();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  // Drain: everything must finish.
  int steps = 0;
  while (!live.empty()) {
    step();
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_LT(++steps, 20000) << live.size() << " requests starved";
  }
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(kv.pool().num_free(), nb) << "blocks leaked";
  EXPECT_EQ(s.num_free_swap_blocks(), cfg.num_swap_blocks) << "swap blocks leaked";
  EXPECT_EQ(kv.pool().check_invariants(), "");
  preemptions_out += total_preemptions;
  swaps_out += total_swap_outs;
}

TEST(SchedulerRandom, InvariantsHoldOverManySeeds) {
  uint64_t preemptions = 0, swap_outs = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    run_seed(seed, preemptions, swap_outs);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // The sequences really exercised preemption, in both modes.
  EXPECT_GT(preemptions, 100u);
  EXPECT_GT(swap_outs, 100u);
  std::printf("[ scheduler random ] 300 seeds: %llu preemptions, %llu blocks swapped out\n",
              static_cast<unsigned long long>(preemptions), static_cast<unsigned long long>(swap_outs));
}

}  // namespace
}  // namespace mopt
