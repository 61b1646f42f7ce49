// Issue 19, acceptance 3: a real Prometheus (Debian's `prometheus`, started here on loopback) scrapes `mopt serve
// --metrics-compat vllm`, and queries written for vLLM's metric names (the panels of vLLM's Grafana dashboard and
// the queue-length autoscaling query) return mopt's data. The deployment configs' own Prometheus test is
// tests/deploy/prometheus.mjs; this one needs nothing but a scrape target.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startServer, check, eq, done, postJson, metrics, sleep } from './lib.mjs';

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

const M = 'model_name="stories"';
// vLLM dashboard and autoscaler queries ($model_name and $__rate_interval as Grafana would fill them), each with
// what its answer must be once the traffic below was scraped.
const positive = (v) => Number.isFinite(v) && v > 0;
const QUERIES = [
  [`vllm:num_requests_running{${M}}`, (v) => v >= 0 && v <= 6],
  [`vllm:num_requests_waiting{${M}}`, (v) => v >= 0 && v <= 6],
  [`sum(vllm:num_requests_waiting{${M}})`, (v) => v >= 0 && v <= 6],
  [`vllm:gpu_cache_usage_perc{${M}}`, (v) => v >= 0 && v <= 1],
  [`vllm:kv_cache_usage_perc{${M}}`, (v) => v >= 0 && v <= 1],
  [`rate(vllm:prompt_tokens_total{${M}}[1m])`, positive],
  [`rate(vllm:generation_tokens_total{${M}}[1m])`, positive],
  [`histogram_quantile(0.99, sum by(le) (rate(vllm:e2e_request_latency_seconds_bucket{${M}}[1m])))`, positive],
  [`histogram_quantile(0.95, sum by(le) (rate(vllm:time_to_first_token_seconds_bucket{${M}}[1m])))`, positive],
  [`histogram_quantile(0.5, sum by(le) (rate(vllm:time_per_output_token_seconds_bucket{${M}}[1m])))`, positive],
  [`rate(vllm:time_per_output_token_seconds_sum{${M}}[1m]) / rate(vllm:time_per_output_token_seconds_count{${M}}[1m])`,
   positive],
  [`histogram_quantile(0.9, sum by(le) (rate(vllm:inter_token_latency_seconds_bucket{${M}}[1m])))`, positive],
  [`rate(vllm:request_queue_time_seconds_sum{${M}}[1m])`, (v) => v >= 0],
  [`histogram_quantile(0.5, sum by(le) (rate(vllm:request_prompt_tokens_bucket{${M}}[1m])))`, positive],
  [`histogram_quantile(0.5, sum by(le) (rate(vllm:request_generation_tokens_bucket{${M}}[1m])))`, positive],
  [`histogram_quantile(0.9, sum by(le) (rate(vllm:iteration_tokens_total_bucket{${M}}[1m])))`, positive],
  [`sum(increase(vllm:request_success_total{${M}}[1m]))`, positive],
  [`rate(vllm:prefix_cache_queries_total{${M}}[1m])`, positive],
  [`vllm:num_preemptions_total{${M}}`, (v) => v === 0],
  // mopt's own series carry the same model_name label.
  [`rate(mopt:generation_tokens_total{${M}}[1m])`, positive],
  [`histogram_quantile(0.9, sum by(le) (rate(mopt:time_to_first_token_seconds_bucket{${M}}[1m])))`, positive],
];

const srv = await startServer(['--served-model-name', 'stories', '--metrics-compat', 'vllm']);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mopt-prom-vllm-'));
let prom;
try {
  fs.writeFileSync(path.join(tmp, 'prometheus.yml'),
                   `global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: vllm\n    static_configs:\n` +
                   `      - targets: ['127.0.0.1:${srv.port}']\n`);
  const port = await freePort();
  const api = `http://127.0.0.1:${port}/api/v1`;
  let plog = '';
  prom = spawn('prometheus', [`--config.file=${tmp}/prometheus.yml`, `--storage.tsdb.path=${tmp}/data`,
                              `--web.listen-address=127.0.0.1:${port}`], { stdio: ['ignore', 'ignore', 'pipe'] });
  prom.stderr.on('data', (d) => { plog += d; });
  const query = async (q) => {
    try {
      return await (await fetch(`${api}/query?query=${encodeURIComponent(q)}`)).json();
    } catch {
      return null;  // not listening yet
    }
  };
  const value = (r) => (r?.data?.result?.length === 1 ? Number(r.data.result[0].value[1]) : null);
  // Scraped at least once: the series is there (idle: no request running).
  let first = null;
  for (let i = 0; i < 200 && first === null; i++) {
    first = value(await query(`vllm:num_requests_running{${M}}`));
    if (first === null) await sleep(100);
  }
  check(first === 0, 'Prometheus scraped vllm:num_requests_running{model_name="stories"} from mopt serve',
        plog.slice(-2000));

  // Traffic after that scrape, so that rates over the next scrape are positive.
  const reqs = [];
  for (let i = 0; i < 6; i++)
    reqs.push(postJson(srv.base, '/v1/completions', { model: 'stories', prompt: `Once upon a time ${i}`,
                                                      max_tokens: 16, stream: i % 2 === 1 }));
  const statuses = (await Promise.all(reqs)).map((r) => r.status);
  eq(statuses, [200, 200, 200, 200, 200, 200], 'six completions');
  const served = await metrics(srv.base);
  const gen = served[`vllm:generation_tokens_total{${M}}`];
  eq(gen, served['mopt:generation_tokens_total'], 'vllm:generation_tokens_total is mopt:generation_tokens_total');
  let scraped = null;
  for (let i = 0; i < 100 && scraped !== gen; i++) {
    scraped = value(await query(`vllm:generation_tokens_total{${M}}`));
    if (scraped !== gen) await sleep(100);
  }
  eq(scraped, gen, `Prometheus has the traffic (${gen} generated tokens)`);
  eq(value(await query(`sum(vllm:request_success_total{${M}})`)), 6, 'vllm:request_success_total counts the six');

  for (const [q, ok] of QUERIES) {
    const r = await query(q);
    const v = value(r);
    check(r?.status === 'success' && v !== null && ok(v), `${q} = ${v}`, JSON.stringify(r).slice(0, 400));
  }
} finally {
  if (prom) { prom.kill('SIGTERM'); await new Promise((r) => prom.exitCode !== null ? r() : prom.on('exit', r)); }
  await srv.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
}
done();
