// Acceptance 3: load test on loopback. 256 concurrent streaming clients (the official openai client) for
// MOPT_LOAD_SECONDS (default 60) against stories260K: zero failed requests, and the /metrics totals agree with
// what the clients counted.
import OpenAI from 'openai';
import { startServer, check, eq, done, metrics } from './lib.mjs';

const CLIENTS = Number(process.env.MOPT_LOAD_CLIENTS || 256);
const SECONDS = Number(process.env.MOPT_LOAD_SECONDS || 60);
const srv = await startServer(['--served-model-name', 'stories', '--max-num-seqs', '256',
                               '--max-model-len', '512', '--threads', '2',
                               '--kv-cache-memory', '256MiB']);
const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'x', maxRetries: 0, timeout: 120000 });
const prompts = ['Once upon a time', 'The little dog', 'Lily and Tom went to the park', 'One day, a bird',
                 'There was a big tree'];
const m0 = await metrics(srv.base);
const t0 = Date.now();
let requests = 0, failures = 0, completionTokens = 0, promptTokens = 0, chunks = 0, mismatches = 0;
const errors = [];

async function worker(w) {
  let i = 0;
  while (Date.now() - t0 < SECONDS * 1000) {
    const chat = (w + i) % 2 === 0;
    const maxTokens = 16 + ((w * 7 + i * 13) % 48);
    const prompt = prompts[(w + i) % prompts.length];
    i++;
    try {
      const common = { model: 'stories', max_tokens: maxTokens, temperature: 0.7, seed: w * 1000 + i, stream: true,
                       stream_options: { include_usage: true } };
      const stream = chat
        ? await client.chat.completions.create({ ...common, messages: [{ role: 'user', content: prompt }] })
        : await client.completions.create({ ...common, prompt });
      let usage = null, finish = null, text = '';
      for await (const ch of stream) {
        chunks++;
        if (ch.usage) usage = ch.usage;
        for (const c of ch.choices) {
          text += chat ? (c.delta?.content ?? '') : c.text;
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
      if (!usage || !finish) throw new Error('stream ended without usage or finish_reason');
      if (finish === 'length' && usage.completion_tokens !== maxTokens) mismatches++;
      requests++;
      completionTokens += usage.completion_tokens;
      promptTokens += usage.prompt_tokens;
    } catch (e) {
      failures++;
      if (errors.length < 5) errors.push(String(e));
    }
  }
}

try {
  const timer = setInterval(() => console.log(`  ${((Date.now() - t0) / 1000).toFixed(0)} s: ${requests} requests, ` +
                                              `${completionTokens} tokens, ${failures} failures`), 10000);
  await Promise.all(Array.from({ length: CLIENTS }, (_, w) => worker(w)));
  clearInterval(timer);
  const secs = (Date.now() - t0) / 1000;
  console.log(`load: ${CLIENTS} clients, ${secs.toFixed(1)} s, ${requests} requests, ${completionTokens} completion ` +
              `tokens (${(completionTokens / secs).toFixed(0)} tok/s), ${chunks} chunks, ${failures} failures`);
  eq(failures, 0, 'zero failed requests' + (errors.length ? ': ' + errors.join(' | ') : ''));
  eq(mismatches, 0, 'length-finished requests produced exactly max_tokens');
  check(secs >= SECONDS, `ran for at least ${SECONDS} s`);
  check(requests > CLIENTS, 'every client completed requests', String(requests));
  const m1 = await metrics(srv.base);
  const d = (k) => (m1[k] ?? 0) - (m0[k] ?? 0);
  const finished = d('mopt:request_success_total{finished_reason="stop"}') +
                   d('mopt:request_success_total{finished_reason="length"}');
  eq(finished, requests, '/metrics finished requests == client count');
  eq(d('mopt:request_success_total{finished_reason="abort"}') + d('mopt:request_success_total{finished_reason="error"}'),
     0, '/metrics: no aborted or failed requests');
  eq(d('mopt:request_generation_tokens_total'), completionTokens, '/metrics completion tokens == client usage sum');
  eq(d('mopt:generation_tokens_total'), completionTokens, 'engine generation token counter == client usage sum');
  eq(d('mopt:request_prompt_tokens_total'), promptTokens, '/metrics prompt tokens == client usage sum');
  eq(d('mopt:e2e_request_latency_seconds_count'), requests, 'e2e latency histogram counted every request');
  eq(m1['mopt:kv_cache_usage_perc'], 0, 'KV usage back to zero');
} finally {
  const { code } = await srv.stop();
  eq(code, 0, 'server exits 0 on SIGTERM');
}
done();
