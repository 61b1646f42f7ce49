// deploy/monitoring against the real thing: Debian's prometheus, started on loopback with the shipped prometheus.yml
// (only its targets pointed at a mopt serve of this test), scrapes mopt serve and loads the rules without error; the
// Grafana dashboard queries only series that mopt's /metrics has, and each of its queries runs in that Prometheus;
// every series the rules read exists too (or is a recording rule's output, or `up`).
// promtool's own checks (config, rules, rule unit tests) run in prometheus_test.sh before this.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { startServer, check, eq, done, postJson, sleep } from '../server/lib.mjs';

const SRC = process.env.MOPT_SOURCE_DIR;
const MON = path.join(SRC, 'deploy/monitoring');

// mopt /metrics -> the set of series names (histograms bring their _bucket, _sum and _count names).
async function metricNames(base) {
  const text = await (await fetch(base + '/metrics')).text();
  return new Set(text.split('\n').filter((l) => l && !l.startsWith('#')).map((l) => l.match(/^[a-zA-Z_:][\w:]*/)[0]));
}

// Series names a PromQL expression reads: identifiers not followed by '(' (functions), not label names inside {},
// not keywords, durations or by/without lists. Numbers never match (an identifier starts with a letter, _ or :).
function seriesIn(expr) {
  const names = new Set();
  const cleaned = expr.replace(/"(?:[^"\\]|\\.)*"/g, '""')       // string literals
                      .replace(/\{[^}]*\}/g, '{}')               // label matchers
                      .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '')
                      .replace(/\[[^\]]*\]/g, '[]');             // ranges
  const keywords = new Set(['and', 'or', 'unless', 'by', 'without', 'on', 'ignoring', 'bool', 'offset', 'le', 'inf',
                            'nan']);
  for (const m of cleaned.matchAll(/[a-zA-Z_:][\w:]*/g)) {
    const name = m[0];
    const after = cleaned.slice(m.index + name.length);
    if (/^\s*\(/.test(after) || keywords.has(name.toLowerCase())) continue;
    names.add(name);
  }
  return names;
}

function dashboardExprs(dash) {
  const out = [];
  const walk = (panels) => {
    for (const p of panels) {
      for (const t of p.targets || []) if (t.expr) out.push({ panel: p.title, expr: t.expr });
      if (p.panels) walk(p.panels);
    }
  };
  walk(dash.panels);
  // A variable's label_values(SELECTOR, LABEL) reads the series of SELECTOR.
  for (const v of dash.templating.list)
    if (v.type === 'query')
      out.push({ panel: `variable ${v.name}`, expr: v.definition.replace(/^label_values\((.*),\s*\w+\)$/, '$1') });
  return out;
}

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

const srv = await startServer(['--served-model-name', 'stories']);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mopt-prom-'));
let prom;
try {
  // Traffic, so that histograms and counters have values.
  for (const stream of [false, true]) {
    const r = await postJson(srv.base, '/v1/completions', { model: 'stories', prompt: 'Once upon a time', max_tokens: 8,
                                                            stream });
    eq(r.status, 200, `a completion (stream ${stream})`);
  }
  await postJson(srv.base, '/v1/completions', { model: 'nope', prompt: 'x' });  // a 404: an HTTP error series

  // ---- the dashboard and the rules read only series that exist
  const have = await metricNames(srv.base);
  const dash = JSON.parse(fs.readFileSync(path.join(MON, 'grafana/mopt-dashboard.json'), 'utf8'));
  const exprs = dashboardExprs(dash);
  check(exprs.length >= 20, `the dashboard has ${exprs.length} queries`);
  const missing = [];
  for (const { panel, expr } of exprs)
    for (const n of seriesIn(expr)) if (!have.has(n)) missing.push(`${panel}: ${n}`);
  eq(missing, [], 'every series the dashboard queries is in /metrics');

  const records = new Set();
  const ruleExprs = [];
  for (const f of ['recording_rules.yml', 'alert_rules.yml']) {
    for (const g of YAML.parse(fs.readFileSync(path.join(MON, f), 'utf8')).groups) {
      for (const r of g.rules) {
        if (r.record) records.add(r.record);
        ruleExprs.push({ rule: r.record || r.alert, expr: String(r.expr) });
      }
    }
  }
  const ruleMissing = [];
  for (const { rule, expr } of ruleExprs)
    for (const n of seriesIn(expr)) if (!have.has(n) && !records.has(n) && n !== 'up') ruleMissing.push(`${rule}: ${n}`);
  eq(ruleMissing, [], 'every series the rules read is in /metrics, recorded by a rule, or up');

  const adapter = YAML.parse(YAML.parse(fs.readFileSync(path.join(SRC, 'deploy/k8s/prometheus-adapter.yaml'),
                                                         'utf8')).data['config.yaml']);
  const adapterSeries = adapter.rules.map((r) => r.seriesQuery.match(/^[\w:]+/)[0]);
  check(adapterSeries.every((n) => have.has(n)), `the Prometheus adapter's series are in /metrics (${adapterSeries})`);

  // The rule unit tests (run by promtool in prometheus_test.sh) must show the alerts firing.
  const unit = YAML.parse(fs.readFileSync(path.join(MON, 'tests/alerts_test.yml'), 'utf8'));
  const fired = new Set(unit.tests.flatMap((t) => (t.alert_rule_test || []).filter((a) => a.exp_alerts.length)
                                                                            .map((a) => a.alertname)));
  const must = ['MoptQueueGrowing', 'MoptHighErrorRate', 'MoptKVCacheNearFull', 'MoptDown', 'MoptTTFTBudgetBurnFast'];
  eq(must.filter((a) => !fired.has(a)), [], `promtool's unit tests fire ${must.join(', ')}`);

  // ---- Prometheus with the shipped configuration, scraping this server. Only the targets change, and the rule
  // groups are evaluated every second instead of every 15-30 s (their expressions unchanged), so a test need not
  // wait half a minute for their first evaluation.
  for (const f of ['recording_rules.yml', 'alert_rules.yml']) {
    const doc = YAML.parseDocument(fs.readFileSync(path.join(MON, f), 'utf8'));
    for (const g of doc.get('groups').items) g.set('interval', '1s');
    fs.writeFileSync(path.join(tmp, f), doc.toString());
  }
  const cfg = YAML.parseDocument(fs.readFileSync(path.join(MON, 'prometheus.yml'), 'utf8'));
  const job = cfg.get('scrape_configs').items.find((j) => j.get('job_name') === 'mopt');
  job.get('static_configs').items[0].set('targets', [`127.0.0.1:${srv.port}`]);
  fs.writeFileSync(path.join(tmp, 'prometheus.yml'), cfg.toString());
  const port = await freePort();
  const papi = `http://127.0.0.1:${port}/api/v1`;
  let plog = '';
  prom = spawn('prometheus', [`--config.file=${path.join(tmp, 'prometheus.yml')}`, `--storage.tsdb.path=${tmp}/data`,
                              `--web.listen-address=127.0.0.1:${port}`], { stdio: ['ignore', 'ignore', 'pipe'] });
  prom.stderr.on('data', (d) => { plog += d; });
  const query = async (q) => {
    const r = await fetch(`${papi}/query?query=${encodeURIComponent(q)}`);
    return r.json();
  };

  // The first scrape comes within one interval (5 s) of the start.
  let target = null;
  for (let i = 0; i < 200 && !(target && target.health === 'up'); i++) {
    await sleep(100);
    try {
      const t = await (await fetch(`${papi}/targets`)).json();
      target = t.data.activeTargets.find((x) => x.labels.job === 'mopt');
    } catch { /* not listening yet */ }
  }
  check(target && target.health === 'up', `Prometheus scrapes mopt serve with the shipped config (${target?.health}` +
        `${target?.lastError ? ': ' + target.lastError : ''})`, plog.slice(-2000));
  const running = await query('mopt:num_requests_running{job="mopt"}');
  eq(running.data.result.map((r) => r.metric.instance), [`127.0.0.1:${srv.port}`], 'its series are in Prometheus');
  const gen = await query('mopt:request_success_total{job="mopt"}');
  eq(gen.data.result.reduce((s, r) => s + Number(r.value[1]), 0), 2, 'with the server\'s values (2 finished requests)');

  // Rules: loaded, and each evaluated without error once its group ran.
  let groups = [];
  for (let i = 0; i < 200; i++) {
    groups = (await (await fetch(`${papi}/rules`)).json()).data.groups;
    if (groups.length && groups.every((g) => g.lastEvaluation && !g.lastEvaluation.startsWith('0001'))) break;
    await sleep(100);
  }
  const rules = groups.flatMap((g) => g.rules);
  eq(rules.length, ruleExprs.length, `Prometheus loaded all ${ruleExprs.length} rules`);
  eq(rules.filter((r) => r.health !== 'ok').map((r) => `${r.name}: ${r.lastError}`), [],
     'every rule evaluated without error');

  // Every dashboard query runs (Grafana's variables replaced by what "All" selects).
  const failed = [];
  for (const { panel, expr } of exprs) {
    const q = expr.replaceAll('$job', '.*').replaceAll('$instance', '.*').replaceAll('$__rate_interval', '1m');
    const r = await query(q);
    if (r.status !== 'success') failed.push(`${panel}: ${r.error}`);
  }
  eq(failed, [], 'every dashboard query is valid PromQL that Prometheus runs');
} finally {
  if (prom) { prom.kill('SIGTERM'); await new Promise((r) => prom.on('exit', r)); }
  await srv.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
}
done();
