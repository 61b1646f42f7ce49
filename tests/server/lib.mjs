// Shared helpers for the mopt serve tests: start/stop a server, raw HTTP over a socket, assertions.
import { spawn, execFileSync } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';

export const MOPT_BIN = process.env.MOPT_BIN;
export const MODELS = process.env.MOPT_MODELS_DIR;
if (!MOPT_BIN || !MODELS) throw new Error('set MOPT_BIN and MOPT_MODELS_DIR');
export const STORIES = path.join(MODELS, 'stories260K.gguf');
// A slower model (~2.5 ms a token on one core of a CI machine): work that outlasts what a test does meanwhile.
export const QWEN = path.join(MODELS, 'code-qwen2-25m');

let failures = 0;
export function check(cond, label, detail = '') {
  if (cond) {
    console.log(`ok: ${label}`);
  } else {
    failures++;
    console.log(`FAIL: ${label}${detail ? '\n  ' + detail : ''}`);
  }
}
export function eq(got, want, label) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  check(g === w, label, `got  ${g?.slice(0, 400)}\n  want ${w?.slice(0, 400)}`);
}
export function done() {
  if (failures) {
    console.log(`${failures} check(s) failed`);
    process.exit(1);
  }
  console.log('all checks passed');
}

// Starts `mopt serve` on a free port; resolves once it logged "ready". extra: more CLI args.
export async function startServer(extra = [], { model = STORIES } = {}) {
  // A small KV pool by default: tests run in parallel on small CI machines.
  const args = ['serve', '-m', model, '--port', '0', ...(extra.includes('--threads') ? [] : ['--threads', '1']),
                ...(extra.includes('--kv-cache-memory') ? [] : ['--kv-cache-memory', '64MiB']), ...extra];
  const proc = spawn(MOPT_BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    let port = 0;
    const timer = setTimeout(() => reject(new Error('server did not start in 60 s:\n' + log)), 60000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on https?:\/\/[^:]+:(\d+)/);
      if (m) port = Number(m[1]);
      if (port && /ready:/.test(log)) {
        clearTimeout(timer);
        resolve(port);
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} during startup:\n${log}`));
    });
  });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    proc, port, base: `http://127.0.0.1:${port}`, exited,
    log: () => log,
    // Resolves once the server's log matches `re` (an event the server reports); rejects if it exits first.
    waitLog(re, timeoutMs = 60000) {
      return new Promise((resolve, reject) => {
        const test = () => re.test(log);
        if (test()) return resolve();
        const timer = setTimeout(() => reject(new Error(`no ${re} in the server log within ${timeoutMs} ms:\n${log}`)),
                                 timeoutMs);
        const onData = () => { if (test()) { cleanup(); resolve(); } };
        const onExit = () => { cleanup(); test() ? resolve() : reject(new Error(`server exited before ${re}:\n${log}`)); };
        const cleanup = () => { clearTimeout(timer); proc.stderr.off('data', onData); proc.off('exit', onExit); };
        proc.stderr.on('data', onData);
        proc.on('exit', onExit);
      });
    },
    async stop() {
      if (proc.exitCode === null) proc.kill('SIGTERM');
      return exited;
    },
  };
}

// Sends raw bytes and collects the raw response until the server closes or `timeoutMs` passes.
export function rawRequest(port, data, { timeoutMs = 5000, writeChunks = null, delayMs = 0 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let closed = false;
    const finish = (why) => {
      if (closed) return;
      closed = true;
      sock.destroy();
      resolve({ raw: buf.toString('latin1'), why, ...parseResponse(buf.toString('latin1')) });
    };
    sock.on('data', (d) => { buf = Buffer.concat([buf, d]); });
    sock.on('end', () => finish('end'));
    sock.on('error', () => finish('error'));
    sock.on('close', () => finish('close'));
    setTimeout(() => finish('timeout'), timeoutMs);
    sock.on('connect', async () => {
      if (writeChunks) {
        for (const c of writeChunks) {
          if (closed) return;
          sock.write(c);
          await new Promise((r) => setTimeout(r, delayMs));
        }
      } else {
        sock.write(data);
      }
    });
  });
}

export function parseResponse(raw) {
  const m = raw.match(/^HTTP\/1\.[01] (\d{3})[^\r\n]*\r\n/);
  if (!m) return { status: 0, headers: {}, body: '' };
  const headEnd = raw.indexOf('\r\n\r\n');
  const headers = {};
  for (const line of raw.slice(m[0].length, headEnd).split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
  }
  let body = raw.slice(headEnd + 4);
  if (headers['content-length']) body = body.slice(0, Number(headers['content-length']));
  let json = null;
  try { json = JSON.parse(body); } catch { /* not JSON */ }
  return { status: Number(m[1]), headers, body, json };
}

export async function postJson(base, p, body, headers = {}) {
  const res = await fetch(base + p, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

// Scrapes /metrics until pred(metrics) holds (the server reports the event the caller waits for); returns the last
// scrape, whether or not pred held by the deadline, so the caller's check reports what was seen.
export async function waitMetrics(base, pred, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const m = await metrics(base);
    if (pred(m) || Date.now() > deadline) return m;
    await sleep(20);
  }
}

// /metrics as {key: value}. Every mopt: sample must carry the model_name label (as vLLM's series do); the keys
// leave it out ('mopt:x{model_name="m",a="b"}' -> 'mopt:x{a="b"}'), as these servers serve one model.
export async function metrics(base) {
  const text = await (await fetch(base + '/metrics')).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    let key = line.slice(0, i);
    if (key.startsWith('mopt:')) {
      const unlabelled = key.replace(/\{model_name="(?:[^"\\]|\\.)*",?/, '{').replace('{}', '');
      if (unlabelled === key) throw new Error('/metrics: a mopt: sample without the model_name label: ' + line);
      key = unlabelled;
    }
    out[key] = Number(line.slice(i + 1));
  }
  return out;
}

// Greedy/seeded reference from the engine itself: `mopt run` prints the prompt then the continuation.
export function moptRun(prompt, args) {
  const out = execFileSync(MOPT_BIN, ['run', '-m', STORIES, '-p', prompt, '--threads', '1', ...args],
                           { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  if (!out.startsWith(prompt)) throw new Error('mopt run did not echo the prompt: ' + out.slice(0, 100));
  return out.slice(prompt.length).replace(/\n$/, '');
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
