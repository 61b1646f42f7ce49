// The web console in a real browser: Debian's headless Chromium, driven over the DevTools protocol (puppeteer-core),
// on a mopt serve on loopback that has an API key and a --root-path. The page is asked for through the prefix, and:
//   - without the key it says it needs one and shows no model; the page itself holds no secret;
//   - with the key typed in, it shows the model card (checked against `mopt inspect --json`);
//   - a chat message typed and sent shows the answer growing as it streams, and the answer is the server's own
//     answer to the same request (replayed without streaming: greedy, so identical);
//   - a completion likewise; Stop ends a long one (finish "stopped"; the server counts a client disconnect);
//   - the charts follow /metrics: while three long requests run they show them running, KV-cache use above zero,
//     tokens per second; afterwards TTFT and ITL samples;
//   - every request of the page goes through the prefix, and the page raised no error or CSP violation.
// MOPT_SCREENSHOT=<file.png> keeps the screenshot (docs/images/console.png comes from here).
import puppeteer from 'puppeteer-core';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, check, eq, done, metrics, postJson, QWEN, MOPT_BIN, sleep } from '../server/lib.mjs';

const KEY = 'console-test-key-5e1f';
const ROOT = '/llm';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const auth = { Authorization: `Bearer ${KEY}` };

const srv = await startServer(['--api-key', KEY, '--root-path', ROOT, '--served-model-name', 'qwen-code',
                               '--max-model-len', '1000'], { model: QWEN });
const base = srv.base;
let browser;
try {
  // ---- over plain HTTP: the page needs no key and holds no secret; the model card needs the key
  const page0 = await fetch(base + ROOT + '/');
  const html = await page0.text();
  eq(page0.status, 200, 'GET /llm/ answers the page without a key');
  check(page0.headers.get('content-type').startsWith('text/html'), 'as text/html');
  const csp = page0.headers.get('content-security-policy') || '';
  check(/script-src 'sha256-[A-Za-z0-9+/]+={0,2}'/.test(csp) && !csp.includes('unsafe-inline') &&
        csp.includes("connect-src 'self'") && csp.includes("frame-ancestors 'none'"),
        'a Content-Security-Policy that allows only the page\'s own script by hash', csp);
  const sha = (tag) => "'sha256-" + crypto.createHash('sha256')
    .update(html.slice(html.indexOf(`<${tag}>`) + tag.length + 2, html.indexOf(`</${tag}>`))).digest('base64') + "'";
  check(csp.includes(`script-src ${sha('script')}`) && csp.includes(`style-src ${sha('style')}`),
        'the CSP hashes are those of the page\'s script and style (node:crypto)');
  check(!html.includes(KEY) && !html.includes('qwen-code'), 'the page holds neither the key nor the model name');
  check(html.includes(`<meta name="mopt-root-path" content="${ROOT}">`), 'the page knows the root path');
  check(!/<script[^>]+src=|<link[^>]+href="(?!data:)|@import|url\(/.test(html), 'the page loads nothing from elsewhere');
  eq((await fetch(base + '/model_card')).status, 401, '/model_card without the key: 401');
  const cardRes = await fetch(base + ROOT + '/model_card', { headers: auth });
  const card = await cardRes.json();
  const inspect = JSON.parse(execFileSync(MOPT_BIN, ['inspect', QWEN, '--json', '--no-tensors'], { encoding: 'utf8' }));
  eq([card.architecture, card.format, card.parameters, card.context.trained, card.hyperparameters.n_layer],
     [inspect.architecture, inspect.format, inspect.n_params, inspect.hyperparameters.context_length,
      inspect.hyperparameters.n_layer], '/model_card agrees with mopt inspect (architecture, format, parameters, ' +
     'trained context, layers)');
  eq([card.context.max_model_len, card.engine.device, card.device.kind], [1000, 'cpu', 'cpu'],
     '/model_card: served context and device');

  // ---- the browser
  browser = await puppeteer.launch({
    executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--window-size=1440,1000'],
  });
  const page = await browser.newPage();
  await page.setViewport({ width: 1440, height: 1000 });
  const problems = [];
  const urls = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  page.on('request', (r) => urls.push(new URL(r.url()).pathname));
  const bodies = [];  // the page's generation requests
  page.on('request', (r) => { if (r.method() === 'POST') bodies.push({ path: new URL(r.url()).pathname, body: r.postData() }); });
  await page.evaluateOnNewDocument(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective));
  });
  await page.goto(base + ROOT + '/', { waitUntil: 'load' });

  await page.waitForFunction(() => /API key/.test(document.getElementById('error').textContent), { timeout: 10000 });
  check(true, 'without a key the page asks for it');
  eq(await page.$eval('#card-rows', (e) => e.children.length), 0, '... and shows no model card');

  await page.type('#api-key', KEY);
  await page.click('#key-save');
  await page.waitForFunction(() => document.getElementById('card-rows').children.length > 5, { timeout: 10000 });
  eq(await page.$eval('#model-name', (e) => e.textContent), 'qwen-code', 'with the key: the served model name');
  const cardText = await page.$eval('#card-rows', (e) => e.innerText);
  check(cardText.includes('qwen2') && cardText.includes('huggingface') &&
        cardText.includes('1000 served of 1024 trained'), 'the model card shows architecture, format and context', cardText);

  // Greedy, short answers.
  await page.$eval('#temperature', (e) => { e.value = '0'; });
  await page.$eval('#max_tokens', (e) => { e.value = '48'; });

  // ---- chat: type, Enter, watch the answer grow
  await page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver(() => {
      const t = document.querySelector('#messages .msg.assistant:last-child .text');
      if (t) window.__lengths.push(t.textContent.length);
    }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
  });
  await page.type('#chat-input', 'Write a function that reverses a list.');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelector('#messages .msg.assistant[data-finish]'), { timeout: 30000 });
  const chat = await page.$eval('#messages .msg.assistant:last-child', (e) => ({
    text: e.querySelector('.text').textContent, finish: e.dataset.finish, streaming: e.classList.contains('streaming'),
  }));
  const lengths = await page.evaluate(() => [...new Set(window.__lengths.filter((n) => n > 0))]);
  check(chat.text.length > 0 && ['stop', 'length'].includes(chat.finish), 'the chat answer arrived', JSON.stringify(chat));
  check(lengths.length >= 2, `... and grew while it streamed (${lengths.length} sizes seen: ${lengths.slice(0, 8)})`);
  const chatReq = bodies.find((b) => b.path === ROOT + '/v1/chat/completions');
  const sent = JSON.parse(chatReq.body);
  check(sent.stream === true && sent.temperature === 0 && sent.max_tokens === 48 && sent.model === 'qwen-code',
        'the page sent a streaming request with the sampling settings', chatReq.body);
  const replay = await postJson(base, '/v1/chat/completions', { ...sent, stream: false, stream_options: undefined },
                                auth);
  eq(chat.text, replay.json.choices[0].message.content, 'the streamed answer is the server\'s answer to that request');
  check(/tokens in .* s/.test(await page.$eval('#gen-stats', (e) => e.textContent)), 'the page shows the speed');

  // ---- completion
  await page.click('#tab-completion');
  await page.$eval('#completion-prompt', (e) => { e.value = 'def fibonacci(n):'; });
  await page.click('#completion-run');
  await page.waitForFunction(() => document.getElementById('completion-output').dataset.finish, { timeout: 30000 });
  const gen = await page.$eval('#completion-output .gen', (e) => e.textContent);
  const creq = JSON.parse(bodies.find((b) => b.path === ROOT + '/v1/completions').body);
  const creplay = await postJson(base, '/v1/completions', { ...creq, stream: false, stream_options: undefined }, auth);
  check(gen.length > 0, 'the completion arrived');
  eq(gen, creplay.json.choices[0].text, 'the streamed completion is the server\'s completion of that prompt');

  // ---- charts under load: three long requests from outside the page
  const ctl = new AbortController();
  const load = Array.from({ length: 3 }, (_, i) => fetch(base + '/v1/completions', {
    method: 'POST', signal: ctl.signal, headers: { ...auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'qwen-code', prompt: 'import os\n', max_tokens: 900, ignore_eos: true, seed: i,
                           stream: true }),
  }).then((r) => r.text()).catch(() => ''));
  const peak = (id) => page.$eval(id, (c) => JSON.parse(c.dataset.peak || '[]'));
  try {
    await page.waitForFunction(() => {
      const p = (id) => JSON.parse(document.getElementById(id).dataset.peak || '[0]');
      return p('chart-requests')[0] >= 1 && p('chart-kv')[0] > 0 && p('chart-tokens')[0] > 0;
    }, { timeout: 30000 });
  } catch (e) { /* reported below */ }
  const [req, kv, tok] = [await peak('#chart-requests'), await peak('#chart-kv'), await peak('#chart-tokens')];
  check(req[0] >= 1 && req[0] <= 4, `the requests chart showed requests running (peak ${req[0]})`);
  check(kv[0] > 0 && kv[0] <= 100, `the KV-cache chart showed use (peak ${kv[0]?.toFixed(2)} %)`);
  check(tok[0] > 0, `the tokens/s chart showed generation (peak ${tok[0]?.toFixed(0)} tokens/s)`);

  // Stop: a long completion from the page is cut by its Stop button while the load runs.
  await page.$eval('#max_tokens', (e) => { e.value = '900'; });
  await page.$eval('#completion-prompt', (e) => { e.value = 'import sys\n'; });
  const before = await metrics(base);
  await page.click('#completion-run');
  await page.waitForFunction(() => document.querySelector('#completion-output .gen')?.textContent.length > 0,
                             { timeout: 30000 });
  await page.click('#completion-stop');
  await page.waitForFunction(() => document.getElementById('completion-output').dataset.finish, { timeout: 10000 });
  eq(await page.$eval('#completion-output', (e) => e.dataset.finish), 'stopped', 'Stop ends a generation');
  let after = before;
  for (let i = 0; i < 100 && after['mopt:client_disconnects_total'] === before['mopt:client_disconnects_total']; i++) {
    await sleep(50);
    after = await metrics(base);
  }
  check(after['mopt:client_disconnects_total'] > before['mopt:client_disconnects_total'],
        '... and the server aborted it (a client disconnect)');
  ctl.abort();
  await Promise.all(load);

  await page.waitForFunction(() => {
    const p = (id) => JSON.parse(document.getElementById(id).dataset.peak || '[0]');
    return p('chart-ttft')[0] > 0 && p('chart-itl')[0] > 0;
  }, { timeout: 10000 }).catch(() => {});
  const [ttft, itl] = [await peak('#chart-ttft'), await peak('#chart-itl')];
  check(ttft[0] > 0 && ttft[1] > 0, `the TTFT chart has samples (peak mean ${ttft[0]?.toFixed(1)} ms)`);
  check(itl[0] > 0, `the ITL chart has samples (peak mean ${itl[0]?.toFixed(2)} ms)`);
  // The page samples /metrics once a second: wait for the next sample (an event the page reports), not for a
  // fixed time a loaded machine may overrun.
  const samples = await page.$eval('#chart-requests', (c) => Number(c.dataset.samples));
  const updated = await page.waitForFunction(
    (n) => Number(document.getElementById('chart-requests').dataset.samples) > n, { timeout: 15000 }, samples)
    .then(() => true, () => false);
  check(updated, 'the charts keep updating (a sample a second)');

  // ---- what the page asked for, and what went wrong in it
  const own = urls.filter((u) => !u.startsWith('/favicon'));
  check(own.length > 5 && own.every((u) => u.startsWith(ROOT + '/')), 'every request of the page went through ' +
        '--root-path', own.filter((u) => !u.startsWith(ROOT + '/')).slice(0, 5).join(' '));
  eq(await page.evaluate(() => window.__csp), [], 'no Content-Security-Policy violation');
  eq(problems.filter((p) => !/401|Unauthorized/.test(p)), [], 'no page errors (401s before the key was given aside)');

  await page.click('#tab-chat');
  const shot = path.join(os.tmpdir(), `mopt-console-${process.pid}.png`);
  await page.screenshot({ path: shot });
  const png = fs.readFileSync(shot);
  check(png.length > 20000 && png.subarray(1, 4).toString() === 'PNG', `a screenshot (${png.length} bytes)`);
  if (process.env.MOPT_SCREENSHOT) fs.copyFileSync(shot, process.env.MOPT_SCREENSHOT);
  fs.rmSync(shot);
} finally {
  if (browser) await browser.close();
  await srv.stop();
}

// ---- --no-web-console
{
  const s = await startServer(['--no-web-console']);
  const r = await fetch(s.base + '/');
  const body = await r.text();
  eq(r.status, 404, '--no-web-console: GET / is a 404');
  check(body.includes('--no-web-console'), '... that says why', body);
  eq((await fetch(s.base + '/health')).status, 200, '... and the API still answers');
  await s.stop();
}
done();
