// Acceptance 1: the official `openai` npm client drives completions and chat, streaming and not, against
// mopt serve with stories260K, and the results match the engine's own output (`mopt run`).
import OpenAI from 'openai';
import { startServer, check, eq, done, moptRun, metrics } from './lib.mjs';

const srv = await startServer(['--served-model-name', 'stories', '--served-model-name', 'stories-alias']);
const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'unused', maxRetries: 0 });
try {
  // ---- models
  const models = await client.models.list();
  eq(models.data.map((m) => m.id), ['stories', 'stories-alias'], 'models.list names the served models');

  // ---- greedy completion == mopt run
  const prompt = 'Once upon a time';
  const ref = moptRun(prompt, ['-n', '48', '--temp', '0']);
  check(ref.length > 50, 'mopt run reference is non-trivial', JSON.stringify(ref));
  const c1 = await client.completions.create({ model: 'stories', prompt, max_tokens: 48, temperature: 0 });
  eq(c1.choices[0].text, ref, 'greedy completion text == mopt run');
  eq(c1.choices[0].finish_reason, 'length', 'finish_reason length at max_tokens');
  eq(c1.usage.completion_tokens, 48, 'usage.completion_tokens == max_tokens');
  check(c1.usage.prompt_tokens > 1 && c1.usage.total_tokens === c1.usage.prompt_tokens + 48, 'usage totals add up');
  eq(c1.object, 'text_completion', 'object text_completion');

  // ---- streaming completion: same text, usage in the last chunk
  let streamed = '', finish = null, usage = null, chunks = 0;
  const s1 = await client.completions.create({ model: 'stories', prompt, max_tokens: 48, temperature: 0,
                                               stream: true, stream_options: { include_usage: true } });
  for await (const ch of s1) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      streamed += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  eq(streamed, ref, 'streamed completion text == mopt run');
  check(chunks > 5, 'streaming sent many chunks', String(chunks));
  eq(finish, 'length', 'streamed finish_reason');
  eq(usage?.completion_tokens, 48, 'stream_options.include_usage gives usage');

  // ---- seeded sampling == mopt run with the same seed and sampler settings
  const sampled = moptRun(prompt, ['-n', '40', '--temp', '0.9', '--top-p', '0.9', '--top-k', '30', '--min-p', '0.02',
                                   '-s', '1234']);
  const c2 = await client.completions.create({ model: 'stories', prompt, max_tokens: 40, temperature: 0.9, top_p: 0.9,
                                               top_k: 30, min_p: 0.02, seed: 1234 });
  eq(c2.choices[0].text, sampled, 'seeded sampled completion == mopt run -s 1234');
  const c2b = await client.completions.create({ model: 'stories-alias', prompt, max_tokens: 40, temperature: 0.9,
                                                top_p: 0.9, top_k: 30, min_p: 0.02, seed: 1234 });
  eq(c2b.choices[0].text, c2.choices[0].text, 'same seed, same text (via the alias name)');

  // ---- stop strings: cut before the first occurrence, finish_reason stop
  const words = ref.split(' ').filter((w) => w.length > 3);
  const stopWord = words[Math.min(3, words.length - 1)];
  const cut = ref.slice(0, ref.indexOf(stopWord));
  const c3 = await client.completions.create({ model: 'stories', prompt, max_tokens: 48, temperature: 0,
                                               stop: [stopWord, 'zzzz-never'] });
  eq(c3.choices[0].text, cut, `stop string "${stopWord}" cuts the text`);
  eq(c3.choices[0].finish_reason, 'stop', 'finish_reason stop on a stop string');

  // ---- echo, several prompts, n
  const c4 = await client.completions.create({ model: 'stories', prompt, max_tokens: 8, temperature: 0, echo: true });
  check(c4.choices[0].text.startsWith(prompt) && ref.startsWith(c4.choices[0].text.slice(prompt.length)),
        'echo prepends the prompt', c4.choices[0].text);
  const c5 = await client.completions.create({ model: 'stories', prompt: ['Once upon a time', 'The cat'],
                                               max_tokens: 6, temperature: 0, n: 2 });
  eq(c5.choices.map((c) => c.index), [0, 1, 2, 3], 'two prompts x n=2 give four indexed choices');
  eq(c5.choices[0].text, c5.choices[1].text, 'greedy choices of one prompt agree');
  eq(c5.choices[0].text, ref.slice(0, c5.choices[0].text.length), 'first prompt choices follow the reference');
  eq(c5.usage.completion_tokens, 24, 'usage counts all choices');

  // ---- logprobs: chosen token is the most likely under greedy
  const c6 = await client.completions.create({ model: 'stories', prompt, max_tokens: 5, temperature: 0, logprobs: 3 });
  const lp = c6.choices[0].logprobs;
  eq(lp.tokens.length, 5, 'logprobs.tokens per generated token');
  check(lp.token_logprobs.every((x) => x <= 0), 'token logprobs are <= 0');
  check(lp.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 3),
        'top_logprobs has up to 3 alternatives');
  check(lp.top_logprobs.every((t, i) => Math.abs(Math.max(...Object.values(t)) - lp.token_logprobs[i]) < 1e-4),
        'greedy token is the top alternative');
  eq(lp.tokens.join(''), c6.choices[0].text, 'logprobs tokens spell the text');

  // ---- chat: the server's chat prompt is what the engine continues; stream == non-stream
  const messages = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me about a cat.' }];
  const chatPrompt = 'System: You tell stories.\nUser: Tell me about a cat.\nAssistant:';
  const chatRef = moptRun(chatPrompt, ['-n', '32', '--temp', '0']);
  const ch1 = await client.chat.completions.create({ model: 'stories', messages, max_tokens: 32, temperature: 0 });
  eq(ch1.choices[0].message.role, 'assistant', 'chat message role');
  eq(ch1.choices[0].message.content, chatRef, 'chat completion == mopt run on the rendered chat prompt');
  eq(ch1.object, 'chat.completion', 'object chat.completion');
  let chatStreamed = '', role = null, chatFinish = null, chatUsage = null;
  const s2 = await client.chat.completions.create({ model: 'stories', messages, max_tokens: 32, temperature: 0,
                                                    stream: true, stream_options: { include_usage: true } });
  for await (const ch of s2) {
    if (ch.usage) chatUsage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) chatStreamed += c.delta.content;
      if (c.finish_reason) chatFinish = c.finish_reason;
    }
  }
  eq(chatStreamed, chatRef, 'streamed chat == mopt run');
  eq(role, 'assistant', 'streamed chat announces the assistant role');
  eq(chatFinish, 'length', 'streamed chat finish_reason');
  eq(chatUsage?.completion_tokens, 32, 'streamed chat usage');
  const ch2 = await client.chat.completions.create({ model: 'stories', messages, max_completion_tokens: 4,
                                                     temperature: 0, logprobs: true, top_logprobs: 2 });
  eq(ch2.choices[0].logprobs.content.length, 4, 'chat logprobs per token');
  check(ch2.choices[0].logprobs.content.every((t) => t.top_logprobs.length === 2 && t.logprob <= 0),
        'chat top_logprobs has 2 alternatives');
  eq(ch2.usage.completion_tokens, 4, 'max_completion_tokens honoured');

  // ---- errors surface as the client's typed errors
  try {
    await client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 });
    check(false, 'unknown model rejected');
  } catch (e) {
    eq([e.status, e.error?.code], [404, 'model_not_found'], 'unknown model -> openai.NotFoundError 404');
  }
  try {
    await client.completions.create({ model: 'stories', prompt: 'x', temperature: 7 });
    check(false, 'bad temperature rejected');
  } catch (e) {
    eq([e.status, e.error?.param], [400, 'temperature'], 'temperature 7 -> openai.BadRequestError naming the param');
  }

  // ---- response ids: unique, different between two servers started the same way; X-Request-Id honoured
  const first = await client.completions.create({ model: 'stories', prompt: 'x', max_tokens: 1 });
  const other = await startServer(['--served-model-name', 'stories', '--served-model-name', 'stories-alias']);
  try {
    const o = await (await fetch(other.base + '/v1/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'stories', prompt: 'x', max_tokens: 1 }) })).json();
    check(/^cmpl-[0-9a-f]{16}$/.test(o.id) && o.id !== first.id, `two instances give different ids (${o.id}, ${first.id})`);
  } finally {
    await other.stop();
  }
  const ids = new Set();
  for (let i = 0; i < 20; i++) ids.add((await client.completions.create({ model: 'stories', prompt: 'x', max_tokens: 1 })).id);
  eq(ids.size, 20, '20 requests, 20 ids');
  const tagged = await fetch(srv.base + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Request-Id': 'trace-42.a' },
    body: JSON.stringify({ model: 'stories', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }) });
  eq([tagged.headers.get('x-request-id'), (await tagged.json()).id], ['trace-42.a', 'chatcmpl-trace-42.a'],
     'X-Request-Id is echoed and names the response');
  const health = await fetch(srv.base + '/health', { headers: { 'X-Request-Id': 'h1' } });
  eq(health.headers.get('x-request-id'), 'h1', 'X-Request-Id is echoed on every route');
  const badId = await fetch(srv.base + '/health', { headers: { 'X-Request-Id': 'x'.repeat(300) } });
  eq([badId.status, (await badId.json()).error?.code], [400, 'invalid_request_id'], 'an X-Request-Id of 300 characters: 400');

  // ---- continuous_usage_stats: usage in every chunk, counting up; priority needs the priority policy
  const counts = [];
  for await (const ch of await client.completions.create({ model: 'stories', prompt: 'x', max_tokens: 5, stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true } }))
    counts.push(ch.usage?.completion_tokens);
  check(counts.length >= 6 && counts.every((n, i) => Number.isInteger(n) && (i === 0 || n >= counts[i - 1])) &&
        counts.at(-1) === 5, `continuous_usage_stats: usage in every chunk (${counts})`);
  try {
    await client.completions.create({ model: 'stories', prompt: 'x', max_tokens: 1, priority: 5 });
    check(false, 'priority under fcfs refused');
  } catch (e) {
    eq([e.status, e.error?.param], [400, 'priority'], 'priority under fcfs: a 400 naming priority');
  }

  // ---- metrics saw all of that
  const m = await metrics(srv.base);
  check(m['mopt:generation_tokens_total'] >= 48 * 2 + 40 * 2, 'metrics count generated tokens',
        String(m['mopt:generation_tokens_total']));
  check(m['mopt:time_to_first_token_seconds_count'] >= 10, 'TTFT histogram has observations');
  eq(m['mopt:num_requests_running'], 0, 'nothing running at the end');
  eq(m['mopt:kv_cache_usage_perc'], 0, 'KV usage back to zero');
} finally {
  const { code } = await srv.stop();
  eq(code, 0, 'server exits 0 on SIGTERM');
}
done();
