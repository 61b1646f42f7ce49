// Issue 19, prompt logprobs: completions `echo` + `logprobs` (and `max_tokens: 0`, as lm-evaluation-harness scores
// a text) through the official openai npm client. On stories260K, the prompt's logprobs agree with the logprobs
// the same tokens got when they were generated (decode steps against one prefill), greedy tokens are their
// position's best alternative, and the streamed, token-id and text forms agree. On code-qwen2-25m, the scored
// alternatives agree with transformers' top-5 logits (shared/models/code-qwen2-25m.reference.json).
import OpenAI from 'openai';
import fs from 'node:fs';
import { startServer, check, eq, done, moptRun, postJson, MODELS, QWEN } from './lib.mjs';

const client = (srv) => new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'unused', maxRetries: 0 });
const close = (a, b, tol) => a !== null && b !== null && Math.abs(a - b) <= tol;

// Streams a completion; returns its text and its logprobs arrays concatenated over the chunks.
async function streamed(c, body) {
  const out = { text: '', tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [], finish: null };
  for await (const ch of await c.completions.create({ ...body, stream: true })) {
    for (const choice of ch.choices) {
      out.text += choice.text;
      for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'])
        out[k].push(...(choice.logprobs?.[k] ?? []));
      if (choice.finish_reason) out.finish = choice.finish_reason;
    }
  }
  return out;
}

{
  const srv = await startServer(['--served-model-name', 'stories']);
  const c = client(srv);
  try {
    const prompt = 'Once upon a time, there was a';
    const ids = (await postJson(srv.base, '/tokenize', { model: 'stories', prompt })).json.tokens;
    check(ids.length > 5, `/tokenize gives the prompt's ${ids.length} ids`);

    // Greedy generation with logprobs: the reference the scored prompt must agree with.
    const gen = await c.completions.create({ model: 'stories', prompt, temperature: 0, max_tokens: 12, logprobs: 1 });
    const g = gen.choices[0];
    eq(g.text, moptRun(prompt, ['-n', '12', '--temp', '0']), 'greedy text equals mopt run');

    // Score prompt + continuation, nothing generated (lm-evaluation-harness's loglikelihood request).
    const score = await c.completions.create({ model: 'stories', prompt: prompt + g.text, echo: true, logprobs: 1,
                                               max_tokens: 0, temperature: 0 });
    const s = score.choices[0], lp = s.logprobs;
    eq([s.text, s.finish_reason, score.usage.completion_tokens], [prompt + g.text, 'length', 0],
       'max_tokens 0: the text is the prompt, nothing generated');
    const n = score.usage.prompt_tokens;
    eq([lp.tokens.length, lp.token_logprobs.length, lp.top_logprobs.length, lp.text_offset.length], [n, n, n, n],
       `one entry per prompt token (${n})`);
    eq([lp.token_logprobs[0], lp.top_logprobs[0]], [null, null], 'the first token has no logprob');
    eq(lp.tokens.slice(ids.length), g.logprobs.tokens, 'the scored text tokenizes as prompt + generated tokens');
    const gl = g.logprobs.token_logprobs, sl = lp.token_logprobs.slice(ids.length);
    check(gl.every((x, i) => close(x, sl[i], 1e-3)), 'prefill logprobs of the continuation equal its decode logprobs',
          `${JSON.stringify(sl)} vs ${JSON.stringify(gl)}`);
    const greedyTop = lp.top_logprobs.slice(ids.length).every((t, i) => {
      const [best, v] = Object.entries(t).sort((a, b) => b[1] - a[1])[0];
      return best === lp.tokens[ids.length + i] && v === sl[i];
    });
    check(greedyTop, 'each greedy token is its position\'s best alternative, with its own logprob');
    check(lp.token_logprobs.slice(1).every((x) => x < 0 && Number.isFinite(x)), 'every other logprob is finite < 0');
    check(lp.text_offset.every((o, i) => i === 0 || o >= lp.text_offset[i - 1]), 'text offsets increase');
    eq(lp.text_offset[ids.length], prompt.length, 'the continuation\'s first token starts where the prompt ends');

    // Five alternatives: sorted, normalized (their probabilities sum to at most 1).
    const five = (await c.completions.create({ model: 'stories', prompt, echo: true, logprobs: 5, max_tokens: 0 }))
      .choices[0].logprobs;
    check(five.top_logprobs.slice(1).every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 5 &&
                                                   Object.values(t).reduce((a, v) => a + Math.exp(v), 0) <= 1 + 1e-5),
          'logprobs 5: up to five alternatives per position, probabilities summing to at most 1');
    eq(five.token_logprobs, lp.token_logprobs.slice(0, ids.length), 'the prompt scores the same alone');

    // The same request as token ids, streamed, and with generation after the echo.
    const asIds = await c.completions.create({ model: 'stories', prompt: ids, echo: true, logprobs: 5, max_tokens: 0 });
    eq(asIds.choices[0].logprobs.token_logprobs, five.token_logprobs, 'a token-id prompt scores the same');
    const st = await streamed(c, { model: 'stories', prompt, echo: true, logprobs: 5, max_tokens: 0 });
    eq([st.text, st.token_logprobs, st.tokens, st.finish], [prompt, five.token_logprobs, five.tokens, 'length'],
       'streamed: the same echo and logprobs');
    const both = await c.completions.create({ model: 'stories', prompt, echo: true, logprobs: 1, max_tokens: 12,
                                              temperature: 0 });
    const b = both.choices[0];
    eq([b.text, b.logprobs.token_logprobs.slice(ids.length), b.logprobs.tokens.slice(ids.length)],
       [prompt + g.text, gl, g.logprobs.tokens], 'echo + generation: the prompt\'s entries, then the generated ones');
    eq(b.logprobs.text_offset[ids.length], prompt.length, 'the generated tokens\' offsets follow the echoed prompt');
    const bs = await streamed(c, { model: 'stories', prompt, echo: true, logprobs: 1, max_tokens: 12, temperature: 0 });
    eq([bs.text, bs.token_logprobs, bs.text_offset], [b.text, b.logprobs.token_logprobs, b.logprobs.text_offset],
       'echo + generation streamed: the same');

    const bad = await postJson(srv.base, '/v1/completions', { model: 'stories', prompt, max_tokens: 0 });
    eq([bad.status, bad.json?.error?.param], [400, 'max_tokens'], 'max_tokens 0 without echo: a 400 naming max_tokens');
    check(/echo/.test(bad.json?.error?.message), 'which says to set echo', bad.json?.error?.message);
  } finally {
    await srv.stop();
  }
}

{
  // code-qwen2-25m against transformers: the alternatives' logprob gaps equal the reference logits' gaps (logprobs
  // are logits shifted by one log-sum-exp per row), within the 0.02 per logit of tests/unit/backend/golden_test.cpp.
  const ref = JSON.parse(fs.readFileSync(`${MODELS}/code-qwen2-25m.reference.json`, 'utf8')).top5[0];
  const srv = await startServer(['--served-model-name', 'qwen'], { model: QWEN });
  try {
    const r = await client(srv).completions.create({ model: 'qwen', prompt: ref.input_ids, echo: true, logprobs: 5,
                                                     max_tokens: 0 });
    const lp = r.choices[0].logprobs;
    eq(lp.token_logprobs.length, ref.input_ids.length, `one entry per reference token (${ref.input_ids.length})`);
    let worst = 0, top1 = 0, gaps = 0;
    for (let p = 0; p + 1 < ref.input_ids.length; p++) {
      const ours = Object.values(lp.top_logprobs[p + 1]).sort((a, b) => b - a);
      const theirs = ref.top5_logits[p];
      for (let k = 1; k < 5; k++) worst = Math.max(worst, Math.abs((ours[k] - ours[0]) - (theirs[k] - theirs[0])));
      // Where transformers' best is the next token by a clear margin, that token's logprob is the row's best.
      if (ref.top5_ids[p][0] === ref.input_ids[p + 1] && theirs[0] - theirs[1] > 0.04) {
        gaps++;
        if (lp.token_logprobs[p + 1] === ours[0]) top1++;
      }
    }
    check(worst <= 0.04, `top-5 logprob gaps within 0.04 of transformers' logit gaps (worst ${worst.toFixed(4)})`);
    check(gaps > 10 && top1 === gaps, `the reference's clear best tokens are ours too (${top1}/${gaps})`);
  } finally {
    await srv.stop();
  }
}
done();
