// Acceptance 2: a bad-input suite. Every case asserts the status and the OpenAI error body
// {"error": {"message", "type", "param", "code"}}; afterwards the server still answers correctly and its KV usage
// is back to zero.
import { startServer, check, eq, done, rawRequest, postJson, metrics, waitMetrics, QWEN } from './lib.mjs';
import net from 'node:net';

const KEY = 'sk-test-0123456789';
const srv = await startServer(['--served-model-name', 'stories', '--api-key', KEY,
                               '--allowed-origins', 'https://good.example', '--max-model-len', '1024',
                               '--max-body-bytes', '65536', '--max-header-bytes', '8192', '--read-timeout', '1.5',
                               '--max-waiting', '4', '--max-num-seqs', '2']);
const AUTH = { Authorization: `Bearer ${KEY}` };
const base = srv.base;
let cases = 0;

function isOpenAIError(j) {
  return j && j.error && typeof j.error.message === 'string' && j.error.message.length > 0 &&
         typeof j.error.type === 'string' && 'param' in j.error && 'code' in j.error;
}
// Posts `body` to `path` and checks status (+ param / code when given).
async function expectError(label, path, body, status, { param, code, headers = AUTH } = {}) {
  cases++;
  const r = await postJson(base, path, body, headers);
  const ok = r.status === status && isOpenAIError(r.json) && (param === undefined || r.json.error.param === param) &&
             (code === undefined || r.json.error.code === code);
  check(ok, `[${cases}] ${label} -> ${status}${param ? ' param=' + param : ''}${code ? ' code=' + code : ''}`,
        `status ${r.status}, body ${r.text.slice(0, 300)}`);
  return r;
}
async function expectRaw(label, data, status, { code, timeoutMs = 5000, writeChunks, delayMs } = {}) {
  cases++;
  const r = await rawRequest(srv.port, data, { timeoutMs, writeChunks, delayMs });
  const ok = r.status === status && isOpenAIError(r.json) && (code === undefined || r.json.error.code === code);
  check(ok, `[${cases}] ${label} -> ${status}`, `status ${r.status} (${r.why}), raw ${r.raw.slice(0, 300)}`);
  return r;
}
const C = '/v1/completions', CH = '/v1/chat/completions';
const good = { model: 'stories', prompt: 'Once upon a time', max_tokens: 4, temperature: 0 };
const goodChat = { model: 'stories', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 };

try {
  const before = await postJson(base, C, good, AUTH);
  eq(before.status, 200, 'baseline completion works');

  // ---- malformed and hostile JSON
  await expectError('malformed JSON', C, '{"model": "stories", "prompt": ', 400, { code: 'invalid_json' });
  await expectError('JSON array body', C, '[1, 2, 3]', 400);
  await expectError('empty body', C, '', 400);
  await expectError('JSON nested 100 deep', C, '{"model":"stories","prompt":"x","x":' + '['.repeat(100) +
                    ']'.repeat(100) + '}', 400);
  await expectError('invalid UTF-8 bytes', C, Buffer.from([...Buffer.from('{"model":"stories","prompt":"'), 0xff, 0xfe,
                    ...Buffer.from('"}')]), 400, { code: 'invalid_utf8' });
  await expectError('lone surrogate escape', C, '{"model":"stories","prompt":"\\ud800"}', 400);
  await expectError('trailing garbage', C, JSON.stringify(good) + 'xyz', 400);
  await expectError('NaN literal', C, '{"model":"stories","prompt":"x","temperature":NaN}', 400);

  // ---- wrong types and out-of-range parameters
  await expectError('missing model', C, { prompt: 'x' }, 400, { param: 'model' });
  await expectError('model is a number', C, { ...good, model: 5 }, 400, { param: 'model' });
  await expectError('unknown model', C, { ...good, model: 'gpt-9' }, 404, { param: 'model', code: 'model_not_found' });
  await expectError('missing prompt', C, { model: 'stories' }, 400, { param: 'prompt' });
  await expectError('prompt is an object', C, { ...good, prompt: { a: 1 } }, 400, { param: 'prompt' });
  await expectError('prompt empty array', C, { ...good, prompt: [] }, 400, { param: 'prompt' });
  await expectError('prompt mixes strings and ids', C, { ...good, prompt: ['a', 1] }, 400, { param: 'prompt' });
  await expectError('out-of-vocabulary token id', C, { ...good, prompt: [1, 99999] }, 400,
                    { param: 'prompt', code: 'invalid_token_id' });
  await expectError('negative token id', C, { ...good, prompt: [1, -1] }, 400, { param: 'prompt' });
  await expectError('float token id', C, { ...good, prompt: [1, 2.5] }, 400, { param: 'prompt' });
  await expectError('too many prompts', C, { ...good, prompt: Array(40).fill('a') }, 400, { param: 'prompt' });
  await expectError('temperature -1', C, { ...good, temperature: -1 }, 400, { param: 'temperature' });
  await expectError('temperature string', C, { ...good, temperature: 'hot' }, 400, { param: 'temperature' });
  await expectError('top_p 0', C, { ...good, top_p: 0 }, 400, { param: 'top_p' });
  await expectError('top_p 1.5', C, { ...good, top_p: 1.5 }, 400, { param: 'top_p' });
  await expectError('top_k 1.5', C, { ...good, top_k: 1.5 }, 400, { param: 'top_k' });
  await expectError('min_p 2', C, { ...good, min_p: 2 }, 400, { param: 'min_p' });
  await expectError('presence_penalty 5', C, { ...good, presence_penalty: 5 }, 400, { param: 'presence_penalty' });
  await expectError('max_tokens 0', C, { ...good, max_tokens: 0 }, 400, { param: 'max_tokens' });
  await expectError('max_tokens -5', C, { ...good, max_tokens: -5 }, 400, { param: 'max_tokens' });
  await expectError('max_tokens 2^40', C, { ...good, max_tokens: 2 ** 40 }, 400, { param: 'max_tokens' });
  await expectError('max_tokens string', C, { ...good, max_tokens: '10' }, 400, { param: 'max_tokens' });
  await expectError('n 0', C, { ...good, n: 0 }, 400, { param: 'n' });
  await expectError('n above the cap', C, { ...good, n: 1000 }, 400, { param: 'n' });
  await expectError('seed string', C, { ...good, seed: 'abc' }, 400, { param: 'seed' });
  await expectError('too many stop strings', C, { ...good, stop: Array(20).fill('x') }, 400, { param: 'stop' });
  await expectError('stop string too long', C, { ...good, stop: 'y'.repeat(1000) }, 400, { param: 'stop' });
  await expectError('stop wrong type', C, { ...good, stop: [1] }, 400, { param: 'stop' });
  await expectError('empty stop string', C, { ...good, stop: [''] }, 400, { param: 'stop' });
  await expectError('logprobs 21', C, { ...good, logprobs: 21 }, 400, { param: 'logprobs' });
  await expectError('logit_bias not supported', C, { ...good, logit_bias: { 5: 10 } }, 400, { param: 'logit_bias' });
  await expectError('stream_options without stream', C, { ...good, stream_options: { include_usage: true } }, 400,
                    { param: 'stream_options' });
  await expectError('stream not a bool', C, { ...good, stream: 'yes' }, 400, { param: 'stream' });
  await expectError('stop_token_ids out of vocabulary', C, { ...good, stop_token_ids: [100000] }, 400,
                    { param: 'stop_token_ids' });

  // ---- chat-specific
  await expectError('messages missing', CH, { model: 'stories' }, 400, { param: 'messages' });
  await expectError('messages empty', CH, { model: 'stories', messages: [] }, 400, { param: 'messages' });
  await expectError('message without role', CH, { model: 'stories', messages: [{ content: 'x' }] }, 400,
                    { param: 'messages[0].role' });
  await expectError('message with a bad role', CH, { model: 'stories', messages: [{ role: 'wizard', content: 'x' }] },
                    400, { param: 'messages[0].role' });
  await expectError('content is a number', CH, { model: 'stories', messages: [{ role: 'user', content: 5 }] }, 400,
                    { param: 'messages[0].content' });
  await expectError('image content part', CH, { model: 'stories', messages: [{ role: 'user', content: [
                    { type: 'image_url', image_url: { url: 'http://x' } }] }] }, 400, { param: 'messages[0].content' });
  await expectError('top_logprobs 25', CH, { ...goodChat, logprobs: true, top_logprobs: 25 }, 400,
                    { param: 'top_logprobs' });
  await expectError('top_logprobs without logprobs', CH, { ...goodChat, top_logprobs: 2 }, 400,
                    { param: 'top_logprobs' });

  // ---- structured output and tools
  const rf = (schema) => ({ type: 'json_schema', json_schema: { name: 'x', schema } });
  await expectError('schema: unsupported keyword', CH, { ...goodChat, response_format: rf({ type: 'object',
                    properties: { a: { type: 'string', patternProperties: {} } } }) }, 400,
                    { param: 'response_format.json_schema.schema', code: 'invalid_schema' });
  await expectError('schema: not a schema', CH, { ...goodChat, response_format: rf([1, 2]) }, 400,
                    { param: 'response_format.json_schema.schema', code: 'invalid_schema' });
  await expectError('schema: unknown type', C, { ...good, guided_json: { type: 'strng' } }, 400,
                    { param: 'guided_json', code: 'invalid_schema' });
  await expectError('schema: $ref outside the document', C, { ...good, guided_json: { $ref: 'https://x/s.json' } },
                    400, { param: 'guided_json', code: 'invalid_schema' });
  await expectError('schema no value satisfies (minLength > maxLength)', C, { ...good, guided_json: { type: 'string',
                    minLength: 5, maxLength: 2 } }, 400, { param: 'guided_json', code: 'invalid_schema' });
  await expectError('schema no value satisfies (empty enum)', CH, { ...goodChat, response_format: rf({ enum: [] }) },
                    400, { param: 'response_format.json_schema.schema', code: 'invalid_schema' });
  await expectError('grammar that matches nothing', C, { ...good, grammar: 'root ::= "a" root' }, 400,
                    { param: 'grammar', code: 'invalid_grammar' });
  await expectError('grammar syntax error', C, { ...good, guided_grammar: 'root ::= "a' }, 400,
                    { param: 'guided_grammar', code: 'invalid_grammar' });
  await expectError('regex with a lookahead', C, { ...good, guided_regex: 'a(?=b)' }, 400,
                    { param: 'guided_regex', code: 'invalid_regex' });
  await expectError('response_format type xml', CH, { ...goodChat, response_format: { type: 'xml' } }, 400,
                    { param: 'response_format' });
  await expectError('two constraints', C, { ...good, guided_choice: ['a'], grammar: 'root ::= "a"' }, 400,
                    { param: 'grammar' });
  const fn = (f) => ({ ...goodChat, tools: [{ type: 'function', function: f }] });
  await expectError('tool without a name', CH, fn({ description: 'x' }), 400, { param: 'tools[0].function.name' });
  await expectError('tool name with spaces', CH, fn({ name: 'get weather' }), 400,
                    { param: 'tools[0].function.name' });
  await expectError('tool parameters not an object', CH, fn({ name: 'f', parameters: 'x' }), 400,
                    { param: 'tools[0].function.parameters' });
  await expectError('tool of another type', CH, { ...goodChat, tools: [{ type: 'retrieval' }] }, 400,
                    { param: 'tools[0].type' });
  await expectError('tool_choice names an unknown function', CH, { ...fn({ name: 'f' }), tool_choice: { type:
                    'function', function: { name: 'g' } } }, 400, { param: 'tool_choice' });
  await expectError('tool_choice required without tools', CH, { ...goodChat, tool_choice: 'required' }, 400,
                    { param: 'tool_choice' });
  await expectError('tools but no tool-call format (plain template, no --tool-call-parser)', CH, fn({ name: 'f' }),
                    400, { param: 'tool_choice' });

  // ---- context length
  await expectError('prompt longer than the context', C, { ...good, prompt: Array(1100).fill(5) }, 400,
                    { code: 'context_length_exceeded' });
  await expectError('prompt + max_tokens beyond the context', C, { ...good, max_tokens: 1020 }, 400,
                    { code: 'context_length_exceeded' });
  await expectError('long chat beyond the context', CH, { model: 'stories', messages: [{ role: 'user',
                    content: 'once upon a time '.repeat(400) }] }, 400, { code: 'context_length_exceeded' });

  // ---- HTTP level: auth, media type, routes, methods, sizes, framing, slow clients
  await expectError('missing API key', C, good, 401, { code: 'invalid_api_key', headers: {} });
  const wrongKey = await expectError('wrong API key', C, good, 401, { headers: { Authorization: 'Bearer sk-wrong' } });
  eq(wrongKey.headers.get('www-authenticate'), 'Bearer', '401 carries WWW-Authenticate');
  await expectError('Content-Type text/plain', C, JSON.stringify(good), 415,
                    { headers: { ...AUTH, 'Content-Type': 'text/plain' } });
  cases++;
  let r = await fetch(base + C, { headers: AUTH });
  let j = await r.json();
  check(r.status === 405 && isOpenAIError(j) && r.headers.get('allow')?.includes('POST'),
        `[${cases}] GET on a POST route -> 405 with Allow`);
  cases++;
  r = await fetch(base + '/v2/nothing', { headers: AUTH });
  j = await r.json();
  check(r.status === 404 && isOpenAIError(j), `[${cases}] unknown route -> 404`);
  await expectRaw('body larger than --max-body-bytes',
                  `POST ${C} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n`,
                  413);
  await expectRaw('headers larger than --max-header-bytes',
                  `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20000)}\r\n\r\n`, 431);
  await expectRaw('malformed request line', 'HELLO\r\n\r\n', 400);
  await expectRaw('bad Content-Length', `POST ${C} HTTP/1.1\r\nContent-Length: abc\r\n\r\n`, 400);
  await expectRaw('conflicting Content-Length', `POST ${C} HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n`,
                  400);
  await expectRaw('chunked request body', `POST ${C} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`, 411);
  await expectRaw('HTTP/2.0 request line', 'GET /health HTTP/2.0\r\n\r\n', 505);
  await expectRaw('header without a colon', 'GET /health HTTP/1.1\r\nNoColonHere\r\n\r\n', 400);
  await expectRaw('slow client (stalls mid-headers)', null, 408,
                  { writeChunks: ['POST /v1/completions HTTP/1.1\r\n', 'Host: x\r\n'], delayMs: 100, timeoutMs: 6000 });
  await expectRaw('slow body (fewer bytes than Content-Length)',
                  `POST ${C} HTTP/1.1\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n` +
                  'Content-Length: 50\r\n\r\n{"model"', 408, { timeoutMs: 6000 });

  // CORS only for --allowed-origins
  cases++;
  r = await fetch(base + '/health', { headers: { Origin: 'https://good.example' } });
  const r2 = await fetch(base + '/health', { headers: { Origin: 'https://evil.example' } });
  check(r.headers.get('access-control-allow-origin') === 'https://good.example' &&
        r2.headers.get('access-control-allow-origin') === null, `[${cases}] CORS header only for allowed origins`);

  cases++;
  const pre = await fetch(base + C, { method: 'OPTIONS', headers: { Origin: 'https://good.example',
                                                                    'Access-Control-Request-Method': 'POST' } });
  const preBad = await fetch(base + C, { method: 'OPTIONS', headers: { Origin: 'https://evil.example' } });
  check(pre.status === 204 && pre.headers.get('access-control-allow-origin') === 'https://good.example' &&
        /Authorization/.test(pre.headers.get('access-control-allow-headers') || '') &&
        preBad.headers.get('access-control-allow-origin') === null,
        `[${cases}] CORS preflight answered only for allowed origins`);

  // tokenize / detokenize
  await expectError('detokenize out-of-vocabulary id', '/detokenize', { tokens: [1, 100000] }, 400,
                    { code: 'invalid_token_id' });
  await expectError('tokenize without prompt', '/tokenize', { foo: 1 }, 400);
  const tk = await postJson(base, '/tokenize', { prompt: 'Once upon a time' }, AUTH);
  const dt = await postJson(base, '/detokenize', { tokens: tk.json.tokens }, AUTH);
  eq(dt.json.prompt.trim(), 'Once upon a time', 'tokenize/detokenize round trip');

  // ---- disconnects: mid-stream, and while a non-streaming request is generating. On a second server with
  // code-qwen2-25m (~2.5 s for these 1000 tokens on a CI core): the client leaves once the server reports the request
  // generating (stream: its first chunks; non-streaming: /metrics), long before it could finish.
  const q = await startServer(['--served-model-name', 'q'], { model: QWEN });
  try {
    for (const stream of [true, false]) {
      cases++;
      const maxTokens = 1000;
      const m0 = await metrics(q.base);
      const body = JSON.stringify({ model: 'q', prompt: 'def parse(', max_tokens: maxTokens, ignore_eos: true, stream });
      const sock = net.connect(q.port, '127.0.0.1', () => {
        sock.write(`POST ${C} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
                   `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      });
      let got = 0;
      const closed = new Promise((resolve) => sock.on('close', resolve));
      sock.on('error', () => {});
      if (stream) {
        await new Promise((resolve) => sock.on('data', (d) => { got += d.length; if (got > 300) resolve(); }));
      } else {
        const m = await waitMetrics(q.base, (x) => x['mopt:num_requests_running'] === 1 &&
                                    x['mopt:generation_tokens_total'] > m0['mopt:generation_tokens_total']);
        check(m['mopt:num_requests_running'] === 1, `[${cases}] (the non-streaming request is generating)`);
      }
      sock.destroy();
      await closed;
      const aborted = 'mopt:request_success_total{finished_reason="abort"}';
      const m = await waitMetrics(q.base, (x) => x['mopt:client_disconnects_total'] > m0['mopt:client_disconnects_total'] &&
                                  x['mopt:num_requests_running'] === 0);
      const genDelta = m['mopt:request_generation_tokens_total'] - m0['mopt:request_generation_tokens_total'];
      check(m['mopt:client_disconnects_total'] === m0['mopt:client_disconnects_total'] + 1 &&
            m[aborted] === m0[aborted] + 1 && genDelta < maxTokens && m['mopt:num_requests_running'] === 0 &&
            m['mopt:kv_cache_usage_perc'] === 0,
            `[${cases}] client disconnect ${stream ? 'mid-stream' : 'during a non-streaming request'} aborts it ` +
            'and frees its KV blocks', JSON.stringify({ disconnects: [m0['mopt:client_disconnects_total'],
                                                                      m['mopt:client_disconnects_total']],
                                                       aborted: [m0[aborted], m[aborted]], tokens: genDelta,
                                                       run: m['mopt:num_requests_running'],
                                                       kv: m['mopt:kv_cache_usage_perc'] }));
    }
  } finally {
    eq((await q.stop()).code, 0, 'the code-qwen2-25m server exits 0 on SIGTERM');
  }

  // ---- flood beyond the queue limit (--max-num-seqs 2 --max-waiting 4): some 429 with Retry-After, no 5xx
  cases++;
  const flood = await Promise.all(Array.from({ length: 30 }, () =>
    postJson(base, C, { ...good, max_tokens: 100, ignore_eos: true }, AUTH)));
  const s429 = flood.filter((x) => x.status === 429);
  const s200 = flood.filter((x) => x.status === 200);
  check(s429.length > 0 && s200.length > 0 && s429.length + s200.length === 30 &&
        s429.every((x) => x.headers.get('retry-after') && isOpenAIError(x.json) && x.json.error.code === 'queue_full'),
        `[${cases}] flood beyond the queue: 429 + Retry-After for the excess, 200 for the rest`,
        `200: ${s200.length}, 429: ${s429.length}, others: ${flood.filter((x) => x.status !== 200 && x.status !== 429).map((x) => x.status)}`);
  check(s200.every((x) => x.json.usage.completion_tokens === 100), 'flooded requests that ran completed fully');

  // ---- pipelined keep-alive requests on one connection
  cases++;
  const pipe = await rawRequest(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n' +
                                `Authorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`, { timeoutMs: 3000 });
  check((pipe.raw.match(/HTTP\/1\.1 200/g) || []).length === 2 && pipe.raw.includes('"stories"'),
        `[${cases}] two pipelined requests get two responses`);

  // ---- afterwards: still correct, KV back to zero
  const after = await postJson(base, C, good, AUTH);
  eq(after.status, 200, 'server still answers after the suite');
  eq(after.json?.choices?.[0]?.text, before.json.choices[0].text, 'and gives the same greedy text as before');
  const m = await waitMetrics(base, (x) => x['mopt:kv_cache_usage_perc'] === 0 &&
                              x['mopt:num_requests_running'] + x['mopt:num_requests_waiting'] === 0);
  eq(m['mopt:kv_cache_usage_perc'], 0, 'KV usage back to zero');
  eq(m['mopt:num_requests_running'] + m['mopt:num_requests_waiting'], 0, 'no request left running or waiting');
  eq((await fetch(base + '/health')).status, 200, '/health is ok');
  check(cases >= 40, `suite has at least 40 cases (${cases})`);
} finally {
  const { code } = await srv.stop();
  eq(code, 0, 'server exits 0 on SIGTERM');
}
done();
