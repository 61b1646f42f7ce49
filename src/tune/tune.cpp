#include "tune/tune.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "backend/runner.h"
#include "core/files.h"
#include "core/strfmt.h"
#include "core/strings.h"
#include "plan/hardware.h"
#include "plan/plan.h"
#include "tune/search.h"
#include "tune/server_process.h"
#include "tune/space.h"
#include "tune/trial_log.h"

namespace mopt::tune {

using json = nlohmann::json;

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string duration_text(double s) {
  if (!(s >= 0)) return "?";
  const long t = std::lround(s);
  if (t >= 3600) return strfmt("%ldh%02ldm", t / 3600, t / 60 % 60);
  if (t >= 60) return strfmt("%ldm%02lds", t / 60, t % 60);
  return strfmt("%lds", t);
}


// Prompt + output tokens of a long request of the workload (its 99th percentiles; prompt words as tokens, with
// half again for words that split), for the KV memory candidates.
int workload_seq_len(const loadgen::WorkloadOptions& w) {
  const double in = w.input_len.quantile(0.99) + w.shared_prefix_len;
  const double out = w.output_len.quantile(0.99);
  return static_cast<int>(std::ceil(1.5 * std::max(1.0, in) + std::max(1.0, out)));
}

// What mopt plan says about serving the variants on this machine, for the search space: the KV bytes of one token
// (the larger KV dtype), the served context, and how many sequences of the workload's length the memory holds.
struct PlanLimits {
  uint64_t kv_bytes_per_token = 0;  // the largest over the variants
  int max_model_len = 0;            // the smallest over the variants
  int max_seqs = 0;                 // the smallest over the variants (0: unknown)
  uint64_t memory_budget = 0;       // the smallest over the variants
};

Result<PlanLimits> plan_limits(const std::vector<std::string>& models, const FixedSettings& fixed, bool is_cuda,
                               int seq_len) {
  PlanLimits out;
  plan::Hardware hw;
  if (is_cuda) {
    MOPT_ASSIGN_OR_RETURN(hw, plan::detected_gpu(0));
  } else {
    hw = plan::cpu_host(false);
  }
  for (const auto& m : models) {
    auto shape = plan::read_model_shape(m);
    if (!shape) return shape.status().with_context("-m " + m);
    plan::PlanRequest req;
    req.model = std::move(*shape);
    req.model_path = m;
    req.hw = hw;
    req.engine.runner.device = is_cuda ? DeviceKind::kCuda : DeviceKind::kCpu;
    req.engine.max_model_len = fixed.max_model_len;
    req.kv_cache_dtype = is_cuda ? "auto" : "fp32";
    auto p = plan::make_plan(req);
    if (!p) return p.status().with_context("mopt plan of " + m);
    out.kv_bytes_per_token = std::max(out.kv_bytes_per_token, p->kv_bytes_per_token);
    out.max_model_len = out.max_model_len ? std::min(out.max_model_len, p->kv.max_model_len) : p->kv.max_model_len;
    out.memory_budget = out.memory_budget ? std::min(out.memory_budget, p->memory_budget) : p->memory_budget;
    const uint64_t per_seq = p->kv_bytes_per_token * static_cast<uint64_t>(std::max(1, seq_len));
    const int seqs = static_cast<int>(std::min<uint64_t>(p->memory_budget / per_seq, 1 << 20));
    out.max_seqs = out.max_seqs ? std::min(out.max_seqs, seqs) : seqs;
  }
  return out;
}

}  // namespace

Result<TuneOutcome> run_tune(const TuneOptions& opt) {
  if (opt.models.empty()) return error("give the model to tune with -m (several -m: variants to choose among)");
  for (size_t i = 0; i < opt.models.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (opt.models[i] == opt.models[j])
        return error("-m %s is given twice: each variant once", opt.models[i].c_str());
  if (opt.max_trials <= 0 && opt.time_budget_s <= 0) return error("give a budget: --trials N and/or --time-budget");
  if (opt.confirm_runs < 0) return error("--confirm-runs must be >= 0");
  if (opt.finalists < 1) return error("--finalists must be >= 1");
  const int reruns = (opt.finalists + 1) * opt.confirm_runs;  // the finalists' and the defaults' re-runs
  if (opt.max_trials > 0 && opt.max_trials < 2 + reruns)
    return error("--trials %d is too few: the defaults, at least one candidate and %d re-runs of the finalists and "
                 "the defaults (--finalists %d, --confirm-runs %d)", opt.max_trials, reruns, opt.finalists,
                 opt.confirm_runs);
  if (opt.trial.load.load.num_requests <= 0) return error("--num-requests must be > 0 (requests per trial)");
  MOPT_ASSIGN_OR_RETURN(Sla sla, Sla::parse(opt.slo));
  const double t_start = monotonic_s();

  FixedSettings fixed = opt.fixed;
  if (fixed.device == "auto") fixed.device = device_name(resolve_device(DeviceKind::kAuto));
  const bool is_cuda = fixed.device == "cuda";
  const int seq_len = workload_seq_len(opt.trial.load.workload);
  MOPT_ASSIGN_OR_RETURN(PlanLimits limits, plan_limits(opt.models, fixed, is_cuda, seq_len));

  SpaceInputs in;
  in.is_cuda = is_cuda;
  in.n_models = static_cast<int>(opt.models.size());
  const loadgen::LoadSpec& load = opt.trial.load.load;
  in.concurrency = load.mode == loadgen::LoadSpec::Mode::kConcurrency
                       ? load.concurrency
                       : (load.max_concurrency > 0 ? load.max_concurrency : 0);
  in.seq_len = seq_len;
  in.max_model_len = limits.max_model_len;
  in.kv_bytes_per_token = limits.kv_bytes_per_token;
  in.max_seqs_limit = limits.max_seqs;
  for (const auto& [name, values] : opt.search) {
    MOPT_ASSIGN_OR_RETURN(Knob k, knob_from_name(name));
    std::vector<int64_t> vals;
    for (const std::string& item : split_nonempty(values, ',')) {
      auto v = k == Knob::kModel ? parse_model_value(item, opt.models) : parse_knob_value(k, item);
      if (!v) return v.status().with_context("--search " + name);
      vals.push_back(*v);
    }
    in.overrides.emplace_back(k, vals);
  }
  MOPT_ASSIGN_OR_RETURN(SearchSpace space, build_space(in));

  json space_j = json::object();
  for (const auto& d : space.dims) {
    json vals = json::array();
    for (int64_t v : d.values) vals.push_back(format_knob_value(d.knob, v, opt.models));
    space_j[knob_name(d.knob)] = {{"values", vals}, {"seed", format_knob_value(d.knob, d.values[d.seed], opt.models)}};
  }
  const json study = {{"models", opt.models},
                      {"device", fixed.device},
                      {"threads", fixed.threads},
                      {"max_model_len", fixed.max_model_len},
                      {"load", opt.trial.load.to_json()},
                      {"sla", sla.to_string()},
                      {"space", space_j},
                      {"fixed", space.base.to_json(opt.models)},
                      {"plan", {{"kv_bytes_per_token", limits.kv_bytes_per_token},
                                {"max_model_len", limits.max_model_len},
                                {"workload_seq_len", seq_len}}}};

  mkdir(opt.trial.out_dir.c_str(), 0755);
  MOPT_ASSIGN_OR_RETURN(TrialLog log, TrialLog::open(opt.trial.out_dir + "/trials.jsonl", study, opt.resume));
  for (const auto& n : log.notes()) std::fprintf(stderr, "mopt tune: %s\n", n.c_str());

  std::fprintf(stderr, "mopt tune: %zu model variant(s) on %s; %s\nmopt plan: KV memory %s holds %d sequences of "
                       "~%d tokens\nSLA %s; search space (%.0f points, seed in brackets):\n%s",
               opt.models.size(), fixed.device.c_str(), opt.trial.load.describe().c_str(),
               format_bytes(static_cast<double>(limits.memory_budget)).c_str(), limits.max_seqs, seq_len,
               sla.to_string().c_str(), space.size(), space.describe(opt.models).c_str());

  TuneOutcome out;
  TuneReport& rep = out.report;
  rep.study = study;
  rep.sla = sla;
  std::map<std::string, size_t> by_key;  // key -> index into rep.trials
  for (const auto& t : log.previous()) {
    by_key[t.key] = rep.trials.size();
    rep.trials.push_back(t);
  }
  if (!log.previous().empty())
    std::fprintf(stderr, "mopt tune: resuming with %zu logged trial(s)\n", log.previous().size());

  const int search_budget = opt.max_trials > 0 ? opt.max_trials - reruns : 1 << 30;
  int best = -1;  // index of the best feasible trial (the defaults or a search trial)
  auto best_goodput = [&] { return best >= 0 ? rep.trials[static_cast<size_t>(best)].goodput : 0.0; };
  auto consider = [&](size_t i) {
    const TrialResult& t = rep.trials[i];
    if ((t.role == "search" || t.role == "defaults") && t.feasible && (best < 0 || t.goodput > best_goodput()))
      best = static_cast<int>(i);
  };
  for (size_t i = 0; i < rep.trials.size(); ++i) consider(i);
  int ran_here = 0;
  double trial_seconds = 0;
  bool warned_short = false;

  // Runs (or finds in the log) one trial; nullopt when the budget is spent.
  auto trial = [&](const std::string& key, const std::string& role, const std::string& brief, const json& settings,
                   const std::vector<std::string>& args, bool counted) -> std::optional<size_t> {
    if (auto it = by_key.find(key); it != by_key.end()) return it->second;
    const int n_search = static_cast<int>(std::count_if(rep.trials.begin(), rep.trials.end(),
                                                        [](const TrialResult& t) { return t.role != "confirm"; }));
    if (counted && n_search >= search_budget) return std::nullopt;
    if (counted && opt.time_budget_s > 0 && monotonic_s() - t_start >= opt.time_budget_s) return std::nullopt;
    TrialResult spec;
    spec.index = static_cast<int>(rep.trials.size()) + 1;
    spec.key = key;
    spec.role = role;
    spec.settings = settings;
    spec.serve_args = args;
    if (opt.progress_lines)
      std::fprintf(stderr, "[trial %d%s] %s ...\n", spec.index,
                   opt.max_trials > 0 ? strfmt("/%d", opt.max_trials).c_str() : "", brief.c_str());
    // A re-run is a measurement of reproducibility: it runs every request, whatever its figures.
    TrialResult t = run_trial(opt.trial, sla, spec, role == "confirm" ? -1.0 : best_goodput());
    if (Status st = log.append(t); !st) std::fprintf(stderr, "mopt tune: %s\n", st.message().c_str());
    ++ran_here;
    trial_seconds += t.seconds;
    by_key[key] = rep.trials.size();
    rep.trials.push_back(t);
    consider(rep.trials.size() - 1);
    if (opt.progress_lines) {
      const double elapsed = monotonic_s() - t_start;
      const double per = trial_seconds / ran_here;
      double left = -1;
      if (opt.max_trials > 0) left = per * std::max(0, opt.max_trials - static_cast<int>(rep.trials.size()));
      if (opt.time_budget_s > 0)
        left = left < 0 ? opt.time_budget_s - elapsed : std::min(left, opt.time_budget_s - elapsed);
      std::string res = t.measured() ? strfmt("goodput %.2f req/s, P99 TTFT %.0f ms, P99 TPOT %.1f ms, SLA %s",
                                              t.goodput, t.ttft_p99 * 1e3, t.tpot_p99 * 1e3,
                                              t.feasible ? "met" : "missed")
                                     : std::string("no measurement");
      if (t.measured() && t.measured_s < 3 && !warned_short) {
        warned_short = true;
        std::fprintf(stderr, "mopt tune: note: trial %d measured for only %.1f s; figures that short are noisy "
                             "(raise -n so that a trial measures for 10 s or more)\n", t.index, t.measured_s);
      }
      std::fprintf(stderr, "[trial %d] %s: %s (%.0f s)%s | best %s | elapsed %s, left ~%s\n", t.index,
                   t.status.c_str(), res.c_str(), t.seconds,
                   t.detail.empty() ? "" : (" - " + t.detail.substr(0, t.detail.find('\n'))).c_str(),
                   best >= 0 ? strfmt("%.2f req/s (trial %d)", best_goodput(),
                                      rep.trials[static_cast<size_t>(best)].index).c_str()
                             : "none yet",
                   duration_text(elapsed).c_str(), duration_text(std::max(0.0, left)).c_str());
    }
    return rep.trials.size() - 1;
  };

  // 1. The baseline: serve's defaults.
  const Settings defaults = engine_defaults(is_cuda);
  auto d = trial("defaults", "defaults", "serve's defaults", defaults.to_json(opt.models),
                 default_serve_args(opt.models, fixed), true);
  if (d) rep.defaults = static_cast<int>(*d);
  // 2. The search.
  SearchOutcome so = coordinate_search(
      space,
      [&](const std::vector<int>& p) -> std::optional<Score> {
        const Settings s = space.at(p);
        auto i = trial(s.key(), "search", s.brief(opt.models, is_cuda), s.to_json(opt.models),
                       s.serve_args(opt.models, fixed, is_cuda), true);
        if (!i) return std::nullopt;
        return rep.trials[*i].score();
      },
      opt.min_gain);
  rep.stop_reason = so.converged ? strfmt("converged: no neighbour of the best point improves goodput by %.0f%%",
                                          opt.min_gain * 100)
                                 : "the budget ran out before the search converged";
  rep.stop_reason += strfmt(" (%d search trials)", so.evaluations);

  // 3. With --finalists F > 1, the F best feasible trials are re-run --confirm-runs times each, in alternating
  // rounds, and the winner is the one with the highest median re-run goodput among those that met the SLA in at
  // least half of their re-runs (else the highest median): the search's best figure is the maximum of many noisy
  // measurements, and settings just under an SLA bound meet it by luck. The winner's re-runs are then reused below.
  std::string finalists_text;
  if (opt.finalists > 1 && opt.confirm_runs > 0 && best >= 0) {
    std::vector<size_t> fin;
    for (size_t i = 0; i < rep.trials.size(); ++i) {
      const TrialResult& t = rep.trials[i];
      if ((t.role == "search" || t.role == "defaults") && t.feasible) fin.push_back(i);
    }
    std::stable_sort(fin.begin(), fin.end(),
                     [&](size_t a, size_t b) { return rep.trials[a].goodput > rep.trials[b].goodput; });
    fin.resize(std::min(fin.size(), static_cast<size_t>(opt.finalists)));
    struct Rerun {
      std::vector<double> goodput;
      int met = 0;
    };
    std::vector<Rerun> rr(fin.size());
    for (int k = 1; k <= opt.confirm_runs; ++k)
      for (size_t f = 0; f < fin.size(); ++f) {
        const TrialResult t = rep.trials[fin[f]];  // a copy: trial() appends to rep.trials
        auto c = trial(t.key + (k == 1 ? ";confirm" : strfmt(";confirm%d", k)), "confirm",
                       strfmt("re-run %d of trial %d (finalist %zu of %zu)", k, t.index, f + 1, fin.size()),
                       t.settings, t.serve_args, false);
        if (!c || !rep.trials[*c].measured()) continue;
        rr[f].goodput.push_back(rep.trials[*c].goodput);
        rr[f].met += rep.trials[*c].feasible ? 1 : 0;
      }
    int pick = -1;
    double pick_med = -1;
    bool pick_met = false;
    for (size_t f = 0; f < fin.size(); ++f) {
      if (rr[f].goodput.empty()) continue;
      const double med = median_of(rr[f].goodput);
      const bool met = 2 * rr[f].met >= static_cast<int>(rr[f].goodput.size());
      if (pick < 0 || (met && !pick_met) || (met == pick_met && med > pick_med)) {
        pick = static_cast<int>(f);
        pick_med = med;
        pick_met = met;
      }
      finalists_text += strfmt("%strial %d %.2f in the search, re-runs' median %.2f (SLA met in %d of %zu)",
                               finalists_text.empty() ? "" : "; ", rep.trials[fin[f]].index,
                               rep.trials[fin[f]].goodput, med, rr[f].met, rr[f].goodput.size());
    }
    if (pick >= 0) best = static_cast<int>(fin[static_cast<size_t>(pick)]);
  }

  // 4. The winner, then the winner and the defaults measured once more (the search's figure of the winner is
  // the best of many noisy measurements; the re-runs compare the two on equal terms).
  if (best >= 0) {
    rep.winner = best;
    // Copies: the re-runs below append to rep.trials, which moves its elements.
    const TrialResult w = rep.trials[static_cast<size_t>(best)];
    Settings ws = defaults;
    if (w.role != "defaults") {
      MOPT_ASSIGN_OR_RETURN(ws, Settings::from_key(w.key));
    }
    const std::optional<TrialResult> base =
        rep.defaults >= 0 ? std::optional<TrialResult>(rep.trials[static_cast<size_t>(rep.defaults)]) : std::nullopt;
    auto vs = [](double a, double b) {
      if (b > 0) return strfmt("%+.0f%%", (a / b - 1) * 100);
      return a > 0 ? strfmt("+%.2f req/s over a goodput of 0", a) : std::string("n/a (both 0)");
    };
    // The winner by its settings (with its -m variant when there are several).
    const std::string first_model =
        opt.models.size() > 1 ? " with " + format_knob_value(Knob::kModel, 0, opt.models) : std::string();
    if (w.role == "defaults")
      rep.margin = strfmt("serve's defaults%s are the best measured: goodput %.2f req/s", first_model.c_str(),
                          w.goodput);
    else
      rep.margin = strfmt("trial %d (%s): goodput %.2f req/s", w.index, ws.brief(opt.models, is_cuda).c_str(),
                          w.goodput);
    if (base && base->measured() && w.role != "defaults")
      rep.margin += strfmt(" vs %.2f with serve's defaults (%s%s)", base->goodput, vs(w.goodput, base->goodput).c_str(),
                           base->feasible ? "" : "; the defaults missed the SLA");
    // K alternating re-runs of the winner and of the defaults; medians against medians.
    std::vector<double> wg, dg;
    std::string wtxt, dtxt;
    for (int k = 1; k <= opt.confirm_runs; ++k) {
      const std::string suffix = k == 1 ? ";confirm" : strfmt(";confirm%d", k);
      auto c = trial(w.key + suffix, "confirm", strfmt("re-run %d of trial %d (the winner)", k, w.index), w.settings,
                     w.serve_args, false);
      if (c) {
        if (rep.confirm < 0) rep.confirm = static_cast<int>(*c);
        const TrialResult& ct = rep.trials[*c];
        wtxt += strfmt("%s%s", wtxt.empty() ? "" : ", ",
                       ct.measured() ? strfmt("%.2f%s", ct.goodput, ct.feasible ? "" : " (SLA missed)").c_str()
                                     : ct.status.c_str());
        if (ct.measured()) wg.push_back(ct.goodput);
      }
      if (w.role == "defaults" || !base) continue;
      auto cd = trial("defaults" + suffix, "confirm",
                      strfmt("re-run %d of trial %d (serve's defaults)", k, base->index), base->settings,
                      base->serve_args, false);
      if (cd) {
        const TrialResult& dt = rep.trials[*cd];
        dtxt += strfmt("%s%s", dtxt.empty() ? "" : ", ",
                       dt.measured() ? strfmt("%.2f%s", dt.goodput, dt.feasible ? "" : " (SLA missed)").c_str()
                                     : dt.status.c_str());
        if (dt.measured()) dg.push_back(dt.goodput);
      }
    }
    const auto median = median_of;
    if (!finalists_text.empty())
      rep.margin += strfmt("; chosen among %d finalists by their re-runs: %s", opt.finalists, finalists_text.c_str());
    if (!wg.empty()) {
      const double wm = median(wg);
      double spread = 0;
      for (double g : wg) spread = std::max(spread, std::fabs(g / wm - 1));
      rep.reproduced = strfmt("the winner re-run %zu time(s): %s req/s (median %.2f, %+.1f%% against the "
                              "search's %.2f%s)",
                              wg.size(), wtxt.c_str(), wm, (wm / w.goodput - 1) * 100, w.goodput,
                              wg.size() > 1 ? strfmt("; re-runs within %.1f%% of their median", spread * 100).c_str()
                                            : "");
      if (!dg.empty())
        rep.reproduced += strfmt("; serve's defaults re-run: %s req/s (median %.2f): the winner is %s", dtxt.c_str(),
                                 median(dg), vs(wm, median(dg)).c_str());
    }
    rep.toml_path = opt.trial.out_dir + "/best.toml";
    rep.toml = settings_toml(ws, opt.models, fixed, is_cuda,
                             strfmt("mopt tune: the settings with the highest goodput under %s\n%s\nserve with: mopt "
                                    "serve --config %s",
                                    sla.to_string().c_str(), rep.margin.c_str(), rep.toml_path.c_str()));
    MOPT_TRY(write_file(rep.toml_path, rep.toml));
    out.found = true;
  }
  const std::string dir = opt.trial.out_dir;
  MOPT_TRY(write_file(dir + "/report.md", "# mopt tune\n\nSLA: `" + sla.to_string() + "`. " +
                                              (rep.margin.empty() ? "No trial met the SLA." : rep.margin + ".") +
                                              (rep.reproduced.empty() ? "" : " Re-run: " + rep.reproduced + ".") +
                                              "\n\n" + report_markdown(rep)));
  MOPT_TRY(write_file(dir + "/report.svg", report_svg(rep)));
  MOPT_TRY(write_file(dir + "/report.html", report_html(rep)));
  return out;
}

}  // namespace mopt::tune
