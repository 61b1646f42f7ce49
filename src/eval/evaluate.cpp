#include "eval/evaluate.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "core/strfmt.h"
#include "engine/engine.h"
#include "eval/windows.h"
#include "tokenizer/tokenizer.h"

namespace mopt::eval {
namespace {

constexpr int kMaxTopK = 100;
const char* const kSideName[2] = {"the model", "the reference"};

// A window in flight: its request on each side, the rows each side has delivered, and the rows of the side that
// is ahead waiting for the other side's rows at the same positions.
struct Slot {
  bool busy = false;
  size_t window = 0;
  uint64_t id[2] = {0, 0};
  int delivered[2] = {0, 0};   // rows delivered per side, counted from the window's first scored row
  bool done[2] = {false, false};
  int pending_side = -1;       // whose rows `pending` holds
  int pending_first = 0;       // row index of pending's next unpaired row
  size_t pending_off = 0;      // its offset in `pending`, in floats
  std::vector<float> pending;  // [rows, n_vocab] unpaired rows (consumed from the front)
};

class Evaluator {
 public:
  Evaluator(Engine& model, Engine* ref, std::span<const int32_t> tokens, std::vector<Window> windows,
            const EvalOptions& opt, int in_flight)
      : tokens_(tokens), windows_(std::move(windows)), opt_(opt), slots_(static_cast<size_t>(in_flight)),
        scores_(windows_.size()) {
    engines_[0] = &model;
    engines_[1] = ref;
  }

  Result<EvalResult> run(const ProgressFn& progress);

 private:
  bool has_ref() const { return engines_[1] != nullptr; }
  int n_sides() const { return has_ref() ? 2 : 1; }
  Status submit(size_t slot, size_t window);
  void on_rows(size_t slot, int side, const PromptLogits& pl);
  void on_output(size_t slot, int side, const RequestOutput& o);
  void fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
  }
  std::string window_name(const Window& w) const {
    return strfmt("window %zu (tokens %lld..%lld)", static_cast<size_t>(&w - windows_.data()),
                  static_cast<long long>(w.begin), static_cast<long long>(w.end));
  }
  void abort_all();

  Engine* engines_[2] = {nullptr, nullptr};
  std::span<const int32_t> tokens_;
  std::vector<Window> windows_;
  EvalOptions opt_;
  std::vector<Slot> slots_;
  std::vector<WindowScore> scores_;    // [windows] sums until run() turns them into means
  std::optional<TokenScorer> scorer_;  // made at the first row (its n_vocab)
  int n_vocab_ = 0;
  int64_t rows_[2] = {0, 0};           // rows delivered per side, all windows
  size_t windows_done_ = 0;
  std::string error_;                  // the first failure
};

Status Evaluator::submit(size_t slot, size_t window) {
  Slot& s = slots_[slot];
  s = Slot{};
  s.busy = true;
  s.window = window;
  const Window& w = windows_[window];
  for (int side = 0; side < n_sides(); ++side) {
    RequestSpec spec;
    spec.prompt.assign(tokens_.begin() + w.begin, tokens_.begin() + w.begin + w.prompt_len());
    spec.params.temperature = 0;
    spec.params.max_tokens = 1;  // sampled from the last prompt row, which is computed anyway
    spec.params.ignore_eos = true;
    spec.prompt_logits_from = w.first_row();
    spec.prompt_logits = [this, slot, side](const PromptLogits& pl) { on_rows(slot, side, pl); };
    AddResult a = engines_[side]->add_request(std::move(spec), [this, slot, side](const RequestOutput& o) {
      on_output(slot, side, o);
    });
    if (a.error != AddError::kNone)
      return error("%s of %lld tokens was refused by %s: %s", window_name(w).c_str(),
                   static_cast<long long>(w.end - w.begin), kSideName[side], a.message.c_str());
    s.id[side] = a.request_id;
  }
  return Status::ok();
}

void Evaluator::on_rows(size_t slot, int side, const PromptLogits& pl) {
  if (!error_.empty()) return;
  Slot& s = slots_[slot];
  const Window& w = windows_[s.window];
  if (!scorer_) {
    n_vocab_ = pl.n_vocab;
    if (opt_.top_k > n_vocab_)
      return fail(strfmt("--top-k %d exceeds the vocabulary (%d tokens)", opt_.top_k, n_vocab_));
    scorer_.emplace(n_vocab_, opt_.top_k);
  }
  if (pl.n_vocab != n_vocab_)
    return fail(strfmt("the model's vocabulary has %d tokens but the reference's has %d: KL and agreement need the "
                       "same vocabulary", side == 0 ? pl.n_vocab : n_vocab_, side == 0 ? n_vocab_ : pl.n_vocab));
  const int r0 = pl.first_position - w.first_row();
  if (r0 != s.delivered[side] || r0 + pl.n_rows > w.n_scored())
    return fail(strfmt("internal: %s: rows %d..%d from %s after %d rows", window_name(w).c_str(), r0,
                       r0 + pl.n_rows, kSideName[side], s.delivered[side]));
  const size_t V = static_cast<size_t>(n_vocab_);
  const int other = 1 - side;
  for (int i = 0; i < pl.n_rows; ++i) {
    const int r = r0 + i;
    const float* row = pl.logits + static_cast<size_t>(i) * V;
    const int32_t target = tokens_[static_cast<size_t>(w.score_from + r)];
    std::optional<Result<TokenScorer::TokenScore>> ts;
    if (!has_ref()) {
      ts = scorer_->add(row, nullptr, target);
    } else if (r < s.delivered[other]) {  // the other side's row of this position waits in `pending`
      MOPT_CHECK(s.pending_side == other && s.pending_first == r, "pending rows out of step");
      const float* orow = s.pending.data() + s.pending_off;
      ts = side == 0 ? scorer_->add(row, orow, target) : scorer_->add(orow, row, target);
      ++s.pending_first;
      s.pending_off += V;
      if (s.pending_first == s.delivered[other]) {  // all paired
        s.pending.clear();
        s.pending_off = 0;
      }
    } else {
      if (s.pending.empty()) {
        s.pending_side = side;
        s.pending_first = r;
      }
      s.pending.insert(s.pending.end(), row, row + V);
    }
    if (!ts) continue;
    if (!*ts)
      return fail(strfmt("%s, target token %lld: %s", window_name(w).c_str(),
                         static_cast<long long>(w.score_from + r), ts->message().c_str()));
    WindowScore& ws = scores_[s.window];
    ws.nll += (*ts)->nll;
    ws.ref_nll += (*ts)->ref_nll;
    ws.kl_mean += (*ts)->kl;
  }
  s.delivered[side] += pl.n_rows;
  rows_[side] += pl.n_rows;
}

void Evaluator::on_output(size_t slot, int side, const RequestOutput& o) {
  if (!o.finished) return;
  Slot& s = slots_[slot];
  const Window& w = windows_[s.window];
  s.done[side] = true;
  if (o.finish_reason == FinishReason::kError || o.finish_reason == FinishReason::kAbort)
    fail(strfmt("%s failed on %s: %s", window_name(w).c_str(), kSideName[side],
                o.error.empty() ? finish_reason_name(o.finish_reason) : o.error.c_str()));
  for (int k = 0; k < n_sides(); ++k)
    if (!s.done[k]) return;
  for (int k = 0; k < n_sides() && error_.empty(); ++k)
    if (s.delivered[k] != w.n_scored())
      fail(strfmt("internal: %s: %s delivered %d rows of %lld", window_name(w).c_str(), kSideName[k], s.delivered[k],
                  static_cast<long long>(w.n_scored())));
  s.busy = false;
  ++windows_done_;
}

void Evaluator::abort_all() {
  for (const Slot& s : slots_)
    if (s.busy)
      for (int side = 0; side < n_sides(); ++side) engines_[side]->abort(s.id[side]);
  for (int side = 0; side < n_sides(); ++side)
    while (engines_[side]->has_unfinished()) engines_[side]->step();
}

Result<EvalResult> Evaluator::run(const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  int64_t total = 0;
  for (const Window& w : windows_) total += w.n_scored();
  size_t next = 0;
  while (windows_done_ < windows_.size()) {
    for (size_t k = 0; k < slots_.size() && next < windows_.size() && error_.empty(); ++k)
      if (!slots_[k].busy) {
        if (Status st = submit(k, next++); !st) fail(st.message());
      }
    if (!error_.empty()) break;
    // Step the engine that has delivered fewer rows (the other one's rows wait for it); an idle one yields.
    const int side = has_ref() && rows_[1] < rows_[0] ? 1 : 0;
    if (!engines_[side]->step() && !(has_ref() && engines_[1 - side]->step())) {
      fail(strfmt("internal: the engines are idle with %zu windows unfinished", windows_.size() - windows_done_));
      break;
    }
    if (progress) progress({scorer_ ? scorer_->n_scored() : 0, total, elapsed()});
  }
  if (!error_.empty()) {
    abort_all();
    return Status::error(error_);
  }
  EvalResult res;
  res.metrics = scorer_->metrics();
  MOPT_CHECK(res.metrics.n_scored == total, "scored %lld of %lld targets",
             static_cast<long long>(res.metrics.n_scored), static_cast<long long>(total));
  for (size_t k = 0; k < windows_.size(); ++k) {
    WindowScore& ws = scores_[k];
    ws.begin = windows_[k].begin;
    ws.end = windows_[k].end;
    ws.n_scored = windows_[k].n_scored();
    const double n = static_cast<double>(ws.n_scored);
    ws.nll /= n;
    ws.ref_nll /= n;
    ws.kl_mean /= n;
  }
  res.windows = std::move(scores_);
  res.text_tokens = static_cast<int64_t>(tokens_.size());
  for (const Window& w : windows_) res.forward_tokens += w.prompt_len();
  res.n_windows = static_cast<int>(windows_.size());
  res.ctx = opt_.ctx;
  res.stride = opt_.stride;
  res.seconds = elapsed();
  res.tokens_per_second = static_cast<double>(total) / std::max(res.seconds, 1e-9);
  return res;
}

}  // namespace

Result<EvalResult> evaluate(Engine& model, Engine* ref, std::span<const int32_t> tokens, const EvalOptions& opt,
                            const ProgressFn& progress) {
  EvalOptions o = opt;
  if (o.stride == 0) o.stride = o.ctx;
  if (o.top_k < 1 || o.top_k > kMaxTopK) return error("--top-k must be in [1, %d], got %d", kMaxTopK, o.top_k);
  if (o.max_in_flight < 0) return error("max_in_flight must be >= 0, got %d", o.max_in_flight);
  MOPT_ASSIGN_OR_RETURN(std::vector<Window> windows,
                        plan_windows(static_cast<int64_t>(tokens.size()), o.ctx, o.stride));
  Engine* engines[2] = {&model, ref};
  int in_flight = o.max_in_flight;
  for (Engine* e : engines) {
    if (!e) continue;
    if (e->has_unfinished()) return error("evaluate() needs idle engines (this one is serving requests)");
    const EngineConfig& c = e->config();
    if (o.ctx > c.max_model_len)
      return error("--ctx %d exceeds the engine's --max-model-len %d: lower --ctx or raise --max-model-len", o.ctx,
                   c.max_model_len);
    // Enough windows to fill a step's token budget, one more to start while others finish.
    const int fill = (c.max_num_batched_tokens + o.ctx - 2) / (o.ctx - 1) + 1;
    if (o.max_in_flight == 0) in_flight = in_flight == 0 ? fill : std::min(in_flight, fill);
    in_flight = std::min(in_flight, c.max_num_seqs);
  }
  in_flight = std::max(1, std::min<int>(in_flight, static_cast<int>(windows.size())));
  Evaluator ev(model, ref, tokens, std::move(windows), o, in_flight);
  return ev.run(progress);
}

Status check_same_tokenizer(const Tokenizer& model, const Tokenizer& ref, std::string_view text, bool add_special) {
  if (model.n_vocab() != ref.n_vocab())
    return error("the model's tokenizer has %d tokens, the reference's %d: they must share a tokenizer",
                 model.n_vocab(), ref.n_vocab());
  const auto& a = model.vocab().tokens;
  const auto& b = ref.vocab().tokens;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return error("token %zu is '%s' in the model's tokenizer but '%s' in the reference's: they must share a "
                   "tokenizer", i, a[i].c_str(), b[i].c_str());
  if (model.bos() != ref.bos() || model.eos() != ref.eos())
    return error("the model's BOS/EOS ids are %d/%d, the reference's %d/%d: they must share a tokenizer",
                 model.bos(), model.eos(), ref.bos(), ref.eos());
  const std::vector<int32_t> ta = model.encode(text, add_special, false);
  const std::vector<int32_t> tb = ref.encode(text, add_special, false);
  const size_t n = std::min(ta.size(), tb.size());
  const size_t first = static_cast<size_t>(std::mismatch(ta.begin(), ta.begin() + n, tb.begin()).first - ta.begin());
  if (first < n || ta.size() != tb.size())
    return error("the model and the reference tokenize the text differently (%zu and %zu tokens, first difference "
                 "at token %zu): they must share a tokenizer", ta.size(), tb.size(), first);
  return Status::ok();
}

}  // namespace mopt::eval
