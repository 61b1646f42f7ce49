// HTTPS (--ssl-certfile / --ssl-keyfile, OpenSSL): the official openai client over TLS with a self-signed
// certificate (made here with the openssl CLI) gets `mopt run`'s greedy text, streamed and not; handshakes gone
// wrong each fail on their own and the server keeps serving: plain HTTP to the HTTPS port (a 400 that says so), a
// client that does not trust the certificate, TLS 1.1, bytes that are not TLS, a client that sends nothing (closed
// at --read-timeout), half a ClientHello. Bad certificate and key files stop the start with a clear message.
import OpenAI from 'openai';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { startServer, check, eq, done, moptRun, MOPT_BIN, STORIES } from './lib.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mopt-tls-'));
const file = (n) => path.join(tmp, n);
const keypair = (name) => execFileSync('openssl', [
  'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
  '-keyout', file(`${name}.key`), '-out', file(`${name}.crt`), '-subj', '/CN=localhost',
  '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
keypair('a');
keypair('b');
fs.writeFileSync(file('notpem.crt'), 'this is not a certificate\n');
const ca = fs.readFileSync(file('a.crt'));

// ---- bad files: the start fails with a message naming the flag and the problem
const startFails = (args, want, label) => {
  const r = spawnSync(MOPT_BIN, ['serve', '-m', STORIES, '--port', '0', ...args], { encoding: 'utf8', timeout: 20000 });
  check(r.status === 1 && want.test(r.stderr), `${label}: exit 1, ${want}`, `status ${r.status}: ${r.stderr}`);
};
startFails(['--ssl-certfile', file('a.crt')], /needs both --ssl-certfile and --ssl-keyfile \(--ssl-keyfile/,
           'a certificate without a key');
startFails(['--ssl-certfile', file('a.crt'), '--ssl-keyfile', file('missing.key')],
           /--ssl-keyfile '.*missing.key': cannot open it: No such file/, 'a missing key file');
startFails(['--ssl-certfile', file('notpem.crt'), '--ssl-keyfile', file('a.key')],
           /--ssl-certfile '.*notpem.crt' is not a PEM certificate/, 'a certificate file that is not PEM');
startFails(['--ssl-certfile', file('a.crt'), '--ssl-keyfile', file('b.key')],
           /--ssl-keyfile '.*b.key' is not the key of the certificate/, 'the key of another certificate');

// Opens a TLS connection with `opts`; resolves with how it ended: 'secure' or the error's code or message.
function handshake(port, opts) {
  return new Promise((resolve) => {
    const s = tls.connect({ host: '127.0.0.1', port, servername: undefined, ...opts }, () => {
      s.end();
      resolve('secure');
    });
    s.on('error', (e) => resolve(e.code || e.message));
  });
}

// Raw TCP: sends `bytes`, resolves with what came back and how long until the server closed.
function raw(port, bytes, timeoutMs = 5000) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const s = net.connect(port, '127.0.0.1', () => { if (bytes) s.write(bytes); });
    let got = Buffer.alloc(0);
    const timer = setTimeout(() => { s.destroy(); resolve({ closed: false, got }); }, timeoutMs);
    s.on('data', (d) => { got = Buffer.concat([got, d]); });
    s.on('error', () => {});
    s.on('close', () => { clearTimeout(timer); resolve({ closed: true, got, ms: Date.now() - t0 }); });
  });
}

const srv = await startServer(['--served-model-name', 'stories', '--ssl-certfile', file('a.crt'), '--ssl-keyfile',
                               file('a.key'), '--read-timeout', '1']);
try {
  check(/listening on https:\/\//.test(srv.log()), 'the log says https');
  const c = new OpenAI({ baseURL: `https://127.0.0.1:${srv.port}/v1`, apiKey: 'unused', maxRetries: 0,
                         httpAgent: new https.Agent({ ca }) });
  const prompt = 'Once upon a time';
  const ref = moptRun(prompt, ['-n', '24', '--temp', '0']);
  const r = await c.completions.create({ model: 'stories', prompt, max_tokens: 24, temperature: 0 });
  eq(r.choices[0].text, ref, 'a completion over HTTPS: mopt run\'s greedy text');
  let streamed = '';
  for await (const ch of await c.completions.create({ model: 'stories', prompt, max_tokens: 24, temperature: 0,
                                                      stream: true }))
    streamed += ch.choices[0]?.text ?? '';
  eq(streamed, ref, 'streamed over HTTPS: the same');

  // plain HTTP to the HTTPS port: a 400 that says what to do (nginx answers the same way)
  const plain = await fetch(`http://127.0.0.1:${srv.port}/health`);
  const body = await plain.json();
  eq([plain.status, body.error?.code], [400, 'tls_required'], 'plain HTTP: 400 tls_required');
  check(/https:\/\//.test(body.error?.message), 'which says to use https://', body.error?.message);

  eq(await handshake(srv.port, {}), 'DEPTH_ZERO_SELF_SIGNED_CERT', 'a client that does not trust the certificate');
  const old = await handshake(srv.port, { ca, maxVersion: 'TLSv1.1', minVersion: 'TLSv1', ciphers: 'DEFAULT@SECLEVEL=0' });
  check(old !== 'secure', `TLS 1.1 is refused (${old})`);
  await srv.waitLog(/unsupported protocol/, 5000).then(() => check(true, 'the log says: unsupported protocol'),
                                                       (e) => check(false, 'the log says: unsupported protocol', e.message));
  const junk = await raw(srv.port, Buffer.from([0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5, 0xff, 0xfe]));
  check(junk.closed && junk.got.length <= 7, `bytes that are not a ClientHello: an alert at most, then closed ` +
        `(${junk.got.length} bytes back)`);
  const binary = await raw(srv.port, Buffer.from([0x00, 0x01, 0x02, 0x03]));
  check(binary.closed && !binary.got.toString().startsWith('HTTP/'), 'binary junk: closed, no HTTP answer');
  const silent = await raw(srv.port, null);
  check(silent.closed && silent.ms >= 900 && silent.ms < 4000, `a client that sends nothing: closed at ` +
        `--read-timeout 1 s (${silent.ms} ms)`);
  const half = await raw(srv.port, Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc]));
  check(half.closed && half.ms < 4000, `half a ClientHello: closed at the read timeout (${half.ms} ms)`);

  // still serving, and still correct
  const again = await c.completions.create({ model: 'stories', prompt, max_tokens: 24, temperature: 0 });
  eq(again.choices[0].text, ref, 'after all of that, the same completion');
  check(srv.proc.exitCode === null, 'the server is still running');
} finally {
  await srv.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
}
done();
