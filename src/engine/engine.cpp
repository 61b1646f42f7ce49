// EngineImpl: request lifecycle around the Scheduler, KVCacheManager, ModelRunner and Sampler.
// One thread runs step() at a time (the engine thread in serve, the caller in run/tests); add_request() and
// abort() may be called from any thread and only touch the inbox.
#include <algorithm>
#include <chrono>
#include <limits>

#include "core/log.h"
#include "core/status.h"
#include "core/strfmt.h"
#include "engine/engine_impl.h"
#include "engine/grammar/matcher.h"
#include "engine/kv_cache_manager.h"
#include "engine/kv_sizing.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/stop_strings.h"
#include "tokenizer/tokenizer.h"

namespace mopt {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

namespace {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

AddResult EngineImpl::add_request(RequestSpec spec, OutputCallback cb) {
  AddResult res;
  auto reject = [&](AddError e, std::string msg) {
    res.error = e;
    res.message = std::move(msg);
    return res;
  };
  if (spec.prompt.empty()) return reject(AddError::kInvalid, "the prompt is empty: give at least one token");
  for (size_t i = 0; i < spec.prompt.size(); ++i)
    if (spec.prompt[i] < 0 || spec.prompt[i] >= n_vocab_)
      return reject(AddError::kInvalid, strfmt("prompt token %zu is %d, not a token id in [0, %d)", i,
                                               spec.prompt[i], n_vocab_));
  if (spec.prompt.size() > static_cast<size_t>(std::numeric_limits<int>::max() / 2))
    return reject(AddError::kTooLong, "the prompt is too long");
  if (std::string e = validate_sampling_params(spec.params, n_vocab_); !e.empty())
    return reject(AddError::kInvalid, e);
  if (spec.prompt_logits &&
      (spec.prompt_logits_from < 0 || spec.prompt_logits_from >= static_cast<int>(spec.prompt.size())))
    return reject(AddError::kInvalid, strfmt("prompt_logits_from is %d, not a prompt position in [0, %zu)",
                                             spec.prompt_logits_from, spec.prompt.size()));
  if (!tok_ && !spec.params.stop.empty())
    return reject(AddError::kInvalid, "stop strings need a tokenizer (this engine has none)");
  if (std::string e = sched_.check_fits(static_cast<int>(spec.prompt.size()), spec.params.max_tokens); !e.empty())
    return reject(AddError::kTooLong, e);
  if (spec.grammar) {
    if (!tok_) return reject(AddError::kInvalid, "structured output needs a tokenizer (this engine has none)");
    if (spec.grammar->vocab().n_vocab() != n_vocab_)
      return reject(AddError::kInvalid, strfmt("the grammar was compiled for a vocabulary of %d tokens; this model "
                                               "has %d", spec.grammar->vocab().n_vocab(), n_vocab_));
    if (spec.grammar->vocab().render_special() == spec.params.skip_special_tokens)
      return reject(AddError::kInvalid, "the grammar was compiled for the other skip_special_tokens setting");
  }

  auto r = std::make_unique<EngineRequest>();
  r->added_at = std::chrono::steady_clock::now();
  r->priority = spec.priority;
  r->cache_salt = std::move(spec.cache_salt);
  r->params = std::move(spec.params);
  r->num_prompt_tokens = static_cast<int>(spec.prompt.size());
  r->tokens = std::move(spec.prompt);
  r->tokens.reserve(r->tokens.size() + static_cast<size_t>(r->params.max_tokens));
  r->cb = std::move(cb);
  r->prompt_cb = std::move(spec.prompt_logits);
  r->prompt_cb_from = spec.prompt_logits_from;
  r->prompt_rows_done = r->params.prompt_logprobs >= 0 ? 0 : r->prompt_cb ? r->prompt_cb_from : r->num_prompt_tokens;
  if (r->wants_prompt_rows()) r->prefix_cache_limit = r->prompt_rows_done;
  if (tok_) {
    // Prime the decoder with the prompt so the first generated piece is decoded in context (its leading space is
    // kept after a text prompt, stripped right after BOS) and a character split across the boundary completes.
    r->decoder = std::make_unique<StreamDecoder>(*tok_, !r->params.skip_special_tokens);
    for (int32_t id : r->tokens) r->decoder->push(id);
  }
  if (spec.grammar)
    r->matcher = std::make_unique<grammar::Matcher>(std::move(spec.grammar), r->decoder->strips_next());
  {
    std::lock_guard<std::mutex> lk(in_mu_);
    if (stopped_) return reject(AddError::kStopped, "the engine is shutting down");
    if (cfg_.max_waiting > 0) {
      int waiting;
      {
        std::lock_guard<std::mutex> slk(stats_mu_);
        waiting = stats_.waiting;
      }
      if (static_cast<int>(inbox_.size()) + waiting >= cfg_.max_waiting)
        return reject(AddError::kQueueFull,
                      strfmt("the queue is full (%d requests waiting); retry later", cfg_.max_waiting));
    }
    r->rng = SamplerRng(r->params.seed ? *r->params.seed : seed_rng_.next());
    r->id = next_id_.fetch_add(1);
    res.request_id = r->id;
    unfinished_.fetch_add(1);
    inbox_.push_back(std::move(r));
  }
  in_cv_.notify_one();
  return res;
}

void EngineImpl::abort(uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lk(in_mu_);
    aborts_.push_back(request_id);
  }
  in_cv_.notify_one();
}

void EngineImpl::drain_inbox() {
  std::vector<std::unique_ptr<EngineRequest>> in;
  std::vector<uint64_t> ab;
  {
    std::lock_guard<std::mutex> lk(in_mu_);
    in.swap(inbox_);
    ab.swap(aborts_);
  }
  for (auto& r : in) {
    r->arrival = next_arrival_++;
    Request* raw = r.get();
    requests_.emplace(r->id, std::move(r));
    sched_.add(raw);
  }
  for (uint64_t id : ab) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;  // already finished (or never existed)
    RequestOutput o;
    finish(*it->second, o, FinishReason::kAbort);
  }
}

void EngineImpl::emit(EngineRequest& r, RequestOutput& o) {
  o.request_id = r.id;
  o.prompt_tokens = r.num_prompt_tokens;
  o.completion_tokens = r.num_output_tokens();
  o.cached_prompt_tokens = r.num_cached_prompt_tokens;
  o.queue_seconds = r.queue_seconds;
  if (!r.cb) return;
  try {
    r.cb(o);
  } catch (const std::exception& e) {
    MOPT_LOG_ERROR("output callback of request %llu threw: %s", static_cast<unsigned long long>(r.id), e.what());
  } catch (...) {
    MOPT_LOG_ERROR("output callback of request %llu threw", static_cast<unsigned long long>(r.id));
  }
}

// Emits `o` as the final output and forgets the request (freeing its blocks).
void EngineImpl::finish(EngineRequest& r, RequestOutput& o, FinishReason reason, const std::string& error) {
  sched_.finish(&r);
  o.finished = true;
  o.finish_reason = reason;
  o.error = error;
  emit(r, o);
  const uint64_t id = r.id;
  requests_.erase(id);  // r is gone from here on
  unfinished_.fetch_sub(1);
  std::lock_guard<std::mutex> lk(stats_mu_);
  ++stats_.requests_finished;
}

// A grammar-constrained request with nothing to draw: it ends here, with what it has decoded so far.
void EngineImpl::finish_without_token(EngineRequest& r, NoToken why) {
  RequestOutput o;
  if (r.decoder) o.text = r.held_text + r.decoder->flush();
  r.held_text.clear();
  if (why == NoToken::kGrammarDone) return finish(r, o, FinishReason::kStop);
  o.grammar_dead_end = true;
  std::string detail = r.matcher->grammar().overflow_message();
  finish(r, o, FinishReason::kError,
         "grammar: no token of the vocabulary continues the constrained output here" +
             (detail.empty() ? std::string() : " (" + detail + ")"));
}

void EngineImpl::fail_all(const std::string& error) {
  std::vector<EngineRequest*> all;
  for (auto& [id, r] : requests_) all.push_back(r.get());
  for (EngineRequest* r : all) {
    RequestOutput o;
    finish(*r, o, FinishReason::kError, error);
  }
}

void EngineImpl::build_batch(const SchedulerOutput& out) {
  const int bs = cfg_.block_size;
  size_t max_blocks = 1;
  for (const ScheduledRequest& s : out.scheduled) max_blocks = std::max(max_blocks, s.req->block_table.size());
  BatchArrays& a = barr_;
  a.clear();
  step_rows_.clear();
  for (const ScheduledRequest& s : out.scheduled) {
    const auto& r = *static_cast<const EngineRequest*>(s.req);
    const int c = r.num_computed_tokens, end = c + s.num_new_tokens, n = r.num_tokens();
    const int t0 = static_cast<int>(a.tokens.size());  // batch index of position c
    for (int p = c; p < end; ++p) {
      a.tokens.push_back(p < n ? r.tokens[static_cast<size_t>(p)] : r.spec_tokens[static_cast<size_t>(p - n)]);
      a.positions.push_back(p);
      a.slot_mapping.push_back(r.block_table[static_cast<size_t>(p / bs)] * bs + p % bs);
    }
    a.query_start.push_back(static_cast<int32_t>(a.tokens.size()));
    a.seq_lens.push_back(end);
    a.block_tables.insert(a.block_tables.end(), r.block_table.begin(), r.block_table.end());
    a.block_tables.resize(a.block_tables.size() + (max_blocks - r.block_table.size()), -1);
    StepRows sr;
    sr.first_row = static_cast<int>(a.logits_indices.size());
    if (r.wants_prompt_rows()) {
      const int p0 = std::max(c, r.prompt_rows_done), p1 = std::min(end, r.num_prompt_tokens);
      sr.prompt_pos = p0;
      for (int p = p0; p < p1; ++p) a.logits_indices.push_back(t0 + p - c);
      sr.n_prompt_rows = std::max(0, p1 - p0);
    }
    if (s.needs_logits) {
      const bool last_is_prompt_row = sr.n_prompt_rows > 0 && sr.prompt_pos + sr.n_prompt_rows == n;
      if (!last_is_prompt_row) a.logits_indices.push_back(t0 + (n - 1 - c));
      sr.sample_row = static_cast<int>(a.logits_indices.size()) - 1;
      // Proposal i (position n + i) gives the row that verifies proposal i + 1 (or draws the token after all).
      for (int i = 0; i < s.num_spec_tokens; ++i) a.logits_indices.push_back(t0 + (n + i - c));
      sr.n_spec = s.num_spec_tokens;
    }
    step_rows_.push_back(sr);
  }
  a.max_blocks_per_seq = static_cast<int>(max_blocks);
  batch_ = a.view();
}

// Runs the step's forward pass. Afterwards, for output row i: host_index_[i] >= 0 is its row in logits_ (the
// host samples it, or it is a prompt row), else row_tokens_[i] is the device's pick.
//
// Rows are routed one by one, by what their own request needs (never by what else is in the batch), so a
// seeded request draws the same tokens whatever it is batched with: prompt rows, and rows whose request wants
// logprobs, repetition/presence/frequency penalties or banned ids (min_tokens) go to the host, every other row
// is sampled on the device. A mixed step is still one forward pass: the host rows' logits are fetched from the
// device afterwards (sampled_logits), the device picks for those rows are ignored. One exception: a device
// samples at most device_sample_rows() rows (the CUDA runner's sampling buffers: max_num_seqs plus
// num_speculative_tokens), so a step whose prompt rows or speculative verification rows take it past that runs a
// plain forward pass and samples every row on the host.
Status EngineImpl::run_forward(const SchedulerOutput& out) {
  build_batch(out);
  const size_t n_out = barr_.logits_indices.size();
  host_index_.assign(n_out, -1);
  host_rows_.clear();
  auto all_on_host = [&] {
    for (size_t i = 0; i < n_out; ++i) {
      host_index_[i] = static_cast<int32_t>(i);
      host_rows_.push_back(static_cast<int32_t>(i));
    }
    logits_.resize(n_out * static_cast<size_t>(n_vocab_));
    return runner_->forward(batch_, logits_.data());
  };
  if (!runner_->can_sample() || n_out == 0) return all_on_host();
  // Which sample rows the device takes.
  std::vector<EngineRequest*>& device_rows = device_rows_;
  device_rows.assign(n_out, nullptr);
  row_allowed_.assign(n_out, {});
  mask_copies_.resize(n_out * static_cast<size_t>((n_vocab_ + 63) / 64));  // no reallocation below
  size_t n_device = 0;
  for (size_t k = 0; k < out.scheduled.size(); ++k) {
    const StepRows& sr = step_rows_[k];
    auto& r = *static_cast<EngineRequest*>(out.scheduled[k].req);
    if (sr.sample_row >= sr.first_row + sr.n_prompt_rows && !needs_host_sampler(r) &&
        (!r.matcher || (sr.n_spec == 0 && stage_device_mask(r, static_cast<size_t>(sr.sample_row))))) {
      for (int i = 0; i <= sr.n_spec; ++i) device_rows[static_cast<size_t>(sr.sample_row + i)] = &r;
      n_device += static_cast<size_t>(sr.n_spec) + 1;
    }
  }
  if (n_device == 0 || n_out > static_cast<size_t>(device_sample_rows())) return all_on_host();
  row_params_.resize(n_out);
  row_tokens_.resize(n_out);
  for (size_t i = 0; i < n_out; ++i) {
    RowSampling& rp = row_params_[i];
    rp = RowSampling{};  // greedy: what the device does for rows the host takes (its pick is unused)
    EngineRequest* r = device_rows[i];
    if (!r) {
      host_index_[i] = static_cast<int32_t>(host_rows_.size());
      host_rows_.push_back(static_cast<int32_t>(i));
      continue;
    }
    rp.temperature = r->params.temperature;
    rp.top_k = r->params.top_k;
    rp.top_p = r->params.top_p;
    rp.min_p = r->params.min_p;
    rp.seed = r->rng.next();  // one draw of the request's own stream per device-sampled token
    rp.allowed = row_allowed_[i];
  }
  MOPT_TRY(runner_->forward_sample(batch_, row_params_, row_tokens_.data()));
  if (host_rows_.empty()) return Status::ok();
  logits_.resize(host_rows_.size() * static_cast<size_t>(n_vocab_));
  return runner_->sampled_logits(host_rows_, logits_.data());
}

// For a grammar-constrained row that the device samples: its mask as the host sampler would apply it (the
// grammar's allowed ids less the ids banned below, see grammar_banned_ids), in row_allowed_[row]: the grammar's
// own mask when nothing is banned from it, else a copy in mask_copies_. False when no id is left: the host then
// takes the row and ends the request (sample_on_host's "nothing to draw").
bool EngineImpl::stage_device_mask(EngineRequest& r, size_t row) {
  const grammar::TokenMask& mask = r.matcher->allowed();
  grammar_banned_ids(r, device_banned_);
  int left = mask.n_allowed;
  for (int32_t id : device_banned_)
    if (id >= 0 && id < n_vocab_ && mask.allows(id)) --left;
  if (left <= 0) return false;
  if (left == mask.n_allowed) {
    row_allowed_[row] = mask.bits;
    return true;
  }
  const size_t W = mask.bits.size();
  uint64_t* copy = mask_copies_.data() + row * W;
  std::copy(mask.bits.begin(), mask.bits.end(), copy);
  for (int32_t id : device_banned_)
    if (id >= 0 && id < n_vocab_) copy[static_cast<size_t>(id) >> 6] &= ~(uint64_t{1} << (id & 63));
  row_allowed_[row] = std::span<const uint64_t>(copy, W);
  return true;
}

// Ids a grammar-constrained request must not draw beyond its mask, sorted and unique: end-of-generation ids carry
// no text, so with ignore_eos (where they would not end the request) they are not drawn; stop ids end it, so they
// are drawn only where the text may end.
void EngineImpl::grammar_banned_ids(const EngineRequest& r, std::vector<int32_t>& banned) const {
  banned.clear();
  if (r.params.ignore_eos) banned.insert(banned.end(), eog_.begin(), eog_.end());
  if (!r.matcher->accepting())
    banned.insert(banned.end(), r.params.stop_token_ids.begin(), r.params.stop_token_ids.end());
  std::sort(banned.begin(), banned.end());
  banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
}

// What the device sampler cannot do: logprobs, penalties over the context, banned ids before min_tokens, grammar
// masks on a runner without them (can_sample_masked), and draws at temperature > 0 on a runner that picks greedy
// rows only (the CPU runner).
bool EngineImpl::needs_host_sampler(const EngineRequest& r) const {
  const SamplingParams& p = r.params;
  if (r.matcher && !runner_->can_sample_masked()) return true;
  if (p.logprobs >= 0 || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)
    return true;
  if (p.temperature > 0 && p.top_k != 1 && !runner_->can_sample_random()) return true;
  return r.num_output_tokens() < p.min_tokens &&
         ((!p.ignore_eos && !eog_.empty()) || !p.stop_token_ids.empty());
}

SampleResult EngineImpl::sample_on_host(EngineRequest& r, float* logits_row, NoToken& why) {
  const std::span<float> row(logits_row, static_cast<size_t>(n_vocab_));  // [n_vocab] the sampler works in place
  why = NoToken::kNone;
  std::vector<int32_t> banned;
  const bool before_min = r.num_output_tokens() < r.params.min_tokens;
  if (before_min) {
    if (!r.params.ignore_eos) banned.assign(eog_.begin(), eog_.end());
    banned.insert(banned.end(), r.params.stop_token_ids.begin(), r.params.stop_token_ids.end());
  }
  std::span<const uint64_t> allowed;
  if (r.matcher) {
    const grammar::TokenMask& mask = r.matcher->allowed();
    allowed = mask.bits;
    const bool accepting = r.matcher->accepting();
    std::vector<int32_t> grammar_banned;
    grammar_banned_ids(r, grammar_banned);
    banned.insert(banned.end(), grammar_banned.begin(), grammar_banned.end());
    int left = mask.n_allowed;
    std::sort(banned.begin(), banned.end());
    banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
    for (int32_t id : banned)
      if (id >= 0 && id < n_vocab_ && mask.allows(id)) --left;
    if (left <= 0) {
      // Nothing to draw: the text may end here (only an end-of-generation id was left, banned by min_tokens or
      // ignore_eos), or no token of the vocabulary continues the grammar.
      why = accepting ? NoToken::kGrammarDone : NoToken::kDeadEnd;
      return {};
    }
  }
  const std::span<const int32_t> all(r.tokens);
  return sample_token(row, r.params, all.first(static_cast<size_t>(r.num_prompt_tokens)),
                      all.subspan(static_cast<size_t>(r.num_prompt_tokens)), banned, r.rng, allowed);
}

// Hands the step's prompt rows of `r` to its prompt-logits callback and reduces them to prompt logprobs. False
// when the callback failed (the request is then finished with an error).
bool EngineImpl::deliver_prompt_rows(EngineRequest& r, const StepRows& sr) {
  const size_t V = static_cast<size_t>(n_vocab_);
  const float* rows = logits_.data() + static_cast<size_t>(host_index_[static_cast<size_t>(sr.first_row)]) * V;
  const int n = sr.n_prompt_rows;
  if (r.prompt_cb) {
    const int skip = std::clamp(r.prompt_cb_from - sr.prompt_pos, 0, n);
    PromptLogits pl;
    pl.request_id = r.id;
    pl.first_position = sr.prompt_pos + skip;
    pl.n_rows = n - skip;
    pl.n_vocab = n_vocab_;
    pl.logits = rows + static_cast<size_t>(skip) * V;
    std::string failure;
    try {
      if (pl.n_rows > 0) r.prompt_cb(pl);
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "unknown exception";
    }
    if (!failure.empty()) {
      MOPT_LOG_ERROR("prompt-logits callback of request %llu threw: %s", static_cast<unsigned long long>(r.id),
                     failure.c_str());
      RequestOutput o;
      finish(r, o, FinishReason::kError, "the prompt-logits consumer failed: " + failure);
      return false;
    }
  }
  if (r.params.prompt_logprobs >= 0) {
    for (int i = 0; i < n && sr.prompt_pos + i + 1 < r.num_prompt_tokens; ++i) {
      log_softmax(std::span<const float>(rows + static_cast<size_t>(i) * V, V), row_logprobs_);
      const int32_t next = r.tokens[static_cast<size_t>(sr.prompt_pos + i + 1)];
      r.prompt_lp.push_back({next, row_logprobs_[static_cast<size_t>(next)]});
      r.prompt_top.push_back(top_logprobs(row_logprobs_, r.params.prompt_logprobs));
    }
  }
  r.prompt_rows_done = sr.prompt_pos + n;
  r.prefix_cache_limit = r.wants_prompt_rows() ? r.prompt_rows_done : std::numeric_limits<int>::max();
  return true;
}

bool EngineImpl::sample_row(EngineRequest& r, int row, SampleResult& sr) {
  NoToken why = NoToken::kNone;
  const int32_t host = host_index_[static_cast<size_t>(row)];
  if (host >= 0) {
    sr = sample_on_host(r, logits_.data() + static_cast<size_t>(host) * static_cast<size_t>(n_vocab_), why);
  } else {
    sr = SampleResult{};
    sr.token = row_tokens_[static_cast<size_t>(row)];
  }
  if (why != NoToken::kNone) {
    finish_without_token(r, why);
    return false;
  }
  if (sr.token < 0 || sr.token >= n_vocab_) {  // a broken device sampler must not corrupt the request
    RequestOutput o;
    finish(r, o, FinishReason::kError, strfmt("the device sampler returned token id %d (vocabulary %d)",
                                              sr.token, n_vocab_));
    return false;
  }
  return true;
}

// Appends the chosen token, detokenizes, checks stop conditions and emits the output (finishing if done).
void EngineImpl::process_token(EngineRequest& r, SampleResult& s) {
  {  // counted before the token can reach a client: a finished response never precedes its count in /metrics
    std::lock_guard<std::mutex> slk(stats_mu_);
    ++stats_.generation_tokens;
  }
  r.tokens.push_back(s.token);
  if (r.matcher && !r.matcher->accept(s.token)) {  // the sampler honours the mask: a broken invariant
    RequestOutput o;
    finish(r, o, FinishReason::kError, strfmt("internal: token %d was drawn outside the grammar's mask", s.token));
    return;
  }

  RequestOutput& o = token_out_;  // cleared field by field: a 64-sequence step emits 64 of these
  o.new_tokens.assign(1, s.token);
  o.text.clear();
  o.token_logprobs.clear();
  o.top_logprobs.clear();
  o.prompt_logprobs.clear();
  o.prompt_top_logprobs.clear();
  if (r.params.prompt_logprobs >= 0 && !r.prompt_lp_sent) {
    r.prompt_lp_sent = true;
    o.prompt_logprobs = std::move(r.prompt_lp);
    o.prompt_top_logprobs = std::move(r.prompt_top);
  }
  o.finished = false;
  o.finish_reason = FinishReason::kNone;
  o.error.clear();
  if (r.params.logprobs >= 0) {
    o.token_logprobs.push_back({s.token, s.logprob});
    o.top_logprobs.push_back(std::move(s.top));
  }
  const int n_out = r.num_output_tokens();
  const bool past_min = n_out >= r.params.min_tokens;
  FinishReason reason = FinishReason::kNone;
  const bool is_stop_id = std::find(r.params.stop_token_ids.begin(), r.params.stop_token_ids.end(), s.token) !=
                          r.params.stop_token_ids.end();
  if (past_min && (is_stop_id || (!r.params.ignore_eos && eog_.count(s.token)))) {
    reason = FinishReason::kStop;  // the stop token's id is reported, its text is not
  } else if (r.decoder) {
    r.held_text += r.decoder->push(s.token);
  }
  if (reason == FinishReason::kNone && r.matcher && r.matcher->complete()) reason = FinishReason::kStop;
  if (reason == FinishReason::kNone && n_out >= r.params.max_tokens) reason = FinishReason::kLength;
  if (reason != FinishReason::kNone && r.decoder) r.held_text += r.decoder->flush();

  if (r.decoder) {
    StopScan scan;
    if (past_min && !r.params.stop.empty()) {
      scan = scan_stop_strings(r.held_text, r.params.stop);
    } else {
      scan.emit = r.held_text.size();
    }
    if (scan.stopped) reason = FinishReason::kStop;
    const size_t emit_n = (reason != FinishReason::kNone && !scan.stopped) ? r.held_text.size() : scan.emit;
    o.text.assign(r.held_text, 0, emit_n);
    r.held_text.erase(0, emit_n);
  }
  if (reason != FinishReason::kNone) {
    finish(r, o, reason);
  } else {
    emit(r, o);
  }
}

void EngineImpl::update_stats(const SchedulerOutput* out) {
  std::lock_guard<std::mutex> lk(stats_mu_);
  stats_.running = sched_.num_running();
  stats_.waiting = sched_.num_waiting();
  stats_.swapped = sched_.num_swapped();
  stats_.free_blocks = kv_.pool().num_free();
  stats_.kv_usage = kv_.pool().usage();
  if (out) {
    stats_.prefix_cache_queries += out->prefix_queries;
    stats_.prefix_cache_hits += out->prefix_hits;
    stats_.preemptions += static_cast<uint64_t>(out->num_preempted);
    ++stats_.steps;
    stats_.last_step_tokens = static_cast<uint64_t>(out->num_tokens);
    size_t b = 0;
    while (b < kStepTokenBounds.size() && out->num_tokens > kStepTokenBounds[b]) ++b;
    ++stats_.step_tokens_counts[b];
    stats_.step_tokens_sum += static_cast<uint64_t>(out->num_tokens);
    stats_.spec_num_drafts += spec_drafts_;
    stats_.spec_num_draft_tokens += spec_draft_tokens_;
    stats_.spec_num_accepted_tokens += spec_accepted_;
    spec_drafts_ = spec_draft_tokens_ = spec_accepted_ = 0;
  }
  stats_.last_step_time_s = monotonic_seconds();  // idle steps count: the loop is alive
  // The runner's figures may cost a driver call (device memory): at most once a second.
  if (stats_.last_step_time_s - last_runtime_poll_s_ >= 1.0) {
    last_runtime_poll_s_ = stats_.last_step_time_s;
    stats_.runner = runner_->runtime_stats();
  }
}

bool EngineImpl::step() {
  std::lock_guard<std::mutex> lk(step_mu_);
  try {
    return step_locked();
  } catch (const std::exception& e) {  // e.g. bad_alloc: fail the requests, keep the engine alive
    MOPT_LOG_ERROR("engine step failed: %s", e.what());
    fail_all(strfmt("internal error in the engine step: %s", e.what()));
    update_stats(nullptr);
    return true;
  }
}

bool EngineImpl::step_locked() {
  drain_inbox();
  if (!sched_.has_work()) {
    update_stats(nullptr);
    return false;
  }
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point& t) {  // seconds since t; t moves to now
    const Clock::time_point now = Clock::now();
    const double s = std::chrono::duration<double>(now - t).count();
    t = now;
    return s;
  };
  StepPhaseSeconds ph;
  Clock::time_point t = Clock::now();
  propose_drafts();
  ph.propose = since(t);
  SchedulerOutput out = sched_.schedule();
  Status st;
  if (!out.swap_out.empty()) st = runner_->swap_out(out.swap_out);
  if (st && !out.swap_in.empty()) st = runner_->swap_in(out.swap_in);
  ph.schedule = since(t);
  if (!st) {  // the cache contents are no longer trustworthy
    MOPT_LOG_ERROR("KV swap failed: %s", st.message().c_str());
    fail_all("KV cache swap failed: " + st.message());
    update_stats(&out);
    return true;
  }
  if (!out.scheduled.empty()) {
    st = run_forward(out);
    ph.forward = since(t);
    check_late_tuning(out, ph.forward);
  }
  if (!st) {
    MOPT_LOG_ERROR("forward pass failed: %s", st.message().c_str());
    for (const ScheduledRequest& s : out.scheduled) {
      RequestOutput o;
      finish(*static_cast<EngineRequest*>(s.req), o, FinishReason::kError, "forward pass failed: " + st.message());
    }
    update_stats(&out);
    return true;
  }
  sched_.on_step_done(out);
  // Tokens of this step that were still prompt are counted as prompt (the sampled ones as generation, by
  // process_token), before any output of the step can reach a client: a response never precedes its counts.
  uint64_t n_prompt = 0;
  for (const ScheduledRequest& s : out.scheduled) {
    const Request* req = s.req;
    const int start = req->num_computed_tokens - (s.num_new_tokens - s.num_spec_tokens);
    n_prompt += static_cast<uint64_t>(std::max(0, std::min(req->num_prompt_tokens, req->num_computed_tokens) - start));
  }
  {
    std::lock_guard<std::mutex> slk(stats_mu_);
    stats_.prompt_tokens += n_prompt;
  }
  for (size_t k = 0; k < out.scheduled.size(); ++k) {
    const ScheduledRequest& s = out.scheduled[k];
    auto& er = *static_cast<EngineRequest*>(s.req);
    const StepRows& rows = step_rows_[k];
    if (rows.n_prompt_rows > 0 && !deliver_prompt_rows(er, rows)) continue;
    if (!s.needs_logits) continue;
    if (rows.n_spec > 0) {
      verify_drafts(er, rows);
      continue;
    }
    SampleResult sr;
    if (sample_row(er, rows.sample_row, sr)) process_token(er, sr);
  }
  ph.output = since(t);
  {
    std::lock_guard<std::mutex> slk(stats_mu_);
    if (!out.scheduled.empty() && n_prompt == 0) {
      ++stats_.decode_steps;
      stats_.phase_s.propose += ph.propose;
      stats_.phase_s.schedule += ph.schedule;
      stats_.phase_s.forward += ph.forward;
      stats_.phase_s.output += ph.output;
      const bool verified = std::any_of(out.scheduled.begin(), out.scheduled.end(),
                                        [](const ScheduledRequest& s) { return s.num_spec_tokens > 0; });
      if (verified) {
        stats_.phase_s.forward_verify += ph.forward;
        ++stats_.spec_verify_steps;
      }
    }
  }
  update_stats(&out);
  return true;
}

void EngineImpl::start() {
  if (thread_.joinable()) return;
  stop_requested_ = false;
  thread_ = std::thread([this] {
    while (!stop_requested_.load()) {
      if (step()) continue;
      std::unique_lock<std::mutex> lk(in_mu_);
      in_cv_.wait_for(lk, std::chrono::milliseconds(100),
                      [&] { return stop_requested_.load() || !inbox_.empty() || !aborts_.empty(); });
    }
  });
}

void EngineImpl::stop() {
  {
    std::lock_guard<std::mutex> lk(in_mu_);
    stopped_ = true;
  }
  stop_requested_ = true;
  in_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lk(step_mu_);
  drain_inbox();
  std::vector<EngineRequest*> all;
  for (auto& [id, r] : requests_) all.push_back(r.get());
  for (EngineRequest* r : all) {
    RequestOutput o;
    finish(*r, o, FinishReason::kAbort);
  }
  update_stats(nullptr);
}


std::string check_engine_invariants(Engine& engine) {
  auto* impl = dynamic_cast<EngineImpl*>(&engine);
  if (!impl) return "not an engine made by create_engine_with_runner";
  return impl->check_invariants();
}

Result<std::unique_ptr<Engine>> create_engine_with_runner(std::unique_ptr<ModelRunner> runner,
                                                          const Tokenizer* tokenizer, const EngineConfig& config,
                                                          std::vector<int32_t> eog_ids,
                                                          std::unique_ptr<DraftModel> draft) {
  if (!runner) return error("create_engine_with_runner: no runner");
  EngineConfig cfg = config;
  cfg.runner.device = runner->device();  // what --device auto resolved to
  const ModelConfig& mc = runner->config();
  if (mc.n_vocab <= 0) return error("the model has no vocabulary (n_vocab = %d)", mc.n_vocab);
  if (cfg.max_num_batched_tokens < 1)
    return error("--max-num-batched-tokens must be >= 1, got %d", cfg.max_num_batched_tokens);
  if (!(cfg.swap_space_gib >= 0) || cfg.swap_space_gib > 1 << 20)
    return error("--swap-space must be in [0, 1048576] GiB, got %g", cfg.swap_space_gib);
  if (cfg.max_waiting < 0) return error("max_waiting must be >= 0, got %d", cfg.max_waiting);
  if (std::string e = validate_speculative_config(cfg.speculative); !e.empty())
    return error("--speculative-config: %s", e.c_str());

  KvSizingRequest kreq;
  kreq.device = cfg.runner.device;
  kreq.block_size = cfg.block_size;
  kreq.default_block_size = runner->default_block_size();
  kreq.max_model_len = cfg.max_model_len;
  kreq.context_length = mc.context_length;
  kreq.max_num_seqs = cfg.max_num_seqs;
  kreq.kv_bytes_per_token = runner->kv_block_bytes(1);
  kreq.kv_cache_memory = cfg.kv_cache_memory;
  kreq.gpu_memory_utilization = cfg.gpu_memory_utilization;
  if (cfg.speculative.method == SpecMethod::kDraftModel && draft) {
    kreq.draft_kv_bytes_per_token = draft->runner().kv_block_bytes(1);
    kreq.num_speculative_tokens = cfg.speculative.num_speculative_tokens;
  }
  if (cfg.kv_cache_memory == 0 && cfg.gpu_memory_utilization > 0 && cfg.gpu_memory_utilization <= 1)
    kreq.memory_budget = runner->available_kv_memory(cfg.gpu_memory_utilization);
  MOPT_ASSIGN_OR_RETURN(const KvSizing kv, size_kv_cache(kreq));
  cfg.block_size = kv.block_size;
  cfg.max_model_len = kv.max_model_len;
  const uint64_t block_bytes = kv.block_bytes;
  if (runner->kv_block_bytes(kv.block_size) != block_bytes)
    return error("internal: the runner's KV block bytes are not proportional to the block size");
  const int num_blocks = kv.num_blocks;

  uint64_t n_swap = static_cast<uint64_t>(cfg.swap_space_gib * 1073741824.0) / block_bytes;
  n_swap = std::min<uint64_t>(n_swap, static_cast<uint64_t>(std::numeric_limits<int32_t>::max()));
  if (cfg.preemption == PreemptionMode::kSwap && n_swap == 0)
    return error("--preemption-mode swap needs a swap pool: pass --swap-space GiB (at least %s)",
                 format_bytes(static_cast<double>(block_bytes)).c_str());
  const auto kv_t0 = std::chrono::steady_clock::now();
  MOPT_TRY(runner->init_kv_cache(num_blocks, cfg.block_size, static_cast<int>(n_swap))
               .with_context("allocating the KV cache"));
  const double kv_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - kv_t0).count();

  MOPT_LOG_INFO("KV cache on %s (%s): %d blocks x %d tokens = %lld tokens (%s); max concurrency at "
                "max_model_len %d: %.2fx%s; allocated in %.2f s",
                device_name(cfg.runner.device), kv.describe(kreq).c_str(), num_blocks, cfg.block_size,
                static_cast<long long>(num_blocks) * cfg.block_size,
                format_bytes(static_cast<double>(kv.pool_bytes())).c_str(),
                cfg.max_model_len, kv.max_concurrency(),
                n_swap ? strfmt("; swap pool %llu blocks", static_cast<unsigned long long>(n_swap)).c_str() : "",
                kv_s);

  SchedulerConfig scfg;
  scfg.max_num_seqs = cfg.max_num_seqs;
  scfg.max_num_batched_tokens = cfg.max_num_batched_tokens;
  scfg.max_model_len = cfg.max_model_len;
  scfg.policy = cfg.policy;
  scfg.preemption = cfg.preemption;
  scfg.num_swap_blocks = static_cast<int>(n_swap);
  if (tokenizer) {
    eog_ids = tokenizer->vocab().eog_ids;
    if (tokenizer->eos() >= 0) eog_ids.push_back(tokenizer->eos());
  }
  if (!cfg.kv_cache_memory) cfg.kv_cache_memory = static_cast<uint64_t>(num_blocks) * block_bytes;
  if (cfg.speculative.method == SpecMethod::kDraftModel) {
    if (!draft) return error("--speculative-config: method draft_model without a draft model runner");
    const int draft_ctx = draft->runner().config().context_length;
    if (draft_ctx > 0 && draft_ctx < cfg.max_model_len)
      return error("--speculative-config: the draft model's context (%d tokens) is shorter than --max-model-len "
                   "(%d); pass --max-model-len %d or less", draft_ctx, cfg.max_model_len, draft_ctx);
    // Its pool was sized with the target's (kv_sizing.h): the target's blocks plus each sequence's proposals.
    MOPT_TRY(draft->init(kv.draft_num_blocks, cfg.block_size, cfg.max_num_batched_tokens, cfg.max_num_seqs));
  } else if (draft) {
    return error("internal: a draft model runner without method draft_model");
  }
  return std::unique_ptr<Engine>(new EngineImpl(std::move(runner), tokenizer, cfg, scfg, num_blocks,
                                                std::move(eog_ids), std::move(draft)));
}

}  // namespace mopt
