// Acceptance 4: graceful drain. SIGTERM while streams are in flight: the streams complete (all tokens, [DONE]),
// new connections are refused, and the process exits 0. Then: a grace period too short for the work aborts the
// rest and still exits 0.
import OpenAI from 'openai';
import net from 'node:net';
import { startServer, check, eq, done, sleep } from './lib.mjs';

function connectResult(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.on('connect', () => { s.destroy(); resolve('connected'); });
    s.on('error', (e) => resolve(e.code));
  });
}

async function scenario(grace, maxTokens, expectComplete) {
  const srv = await startServer(['--served-model-name', 'stories', '--drain-timeout', String(grace)]);
  const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'x', maxRetries: 0 });
  const firstChunk = [];
  const streams = Array.from({ length: 4 }, (_, i) => (async () => {
    let text = '', finish = null, usage = null, chunks = 0, error = null;
    let signalFirst;
    firstChunk.push(new Promise((r) => { signalFirst = r; }));
    try {
      const s = await client.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: maxTokens,
                                                  ignore_eos: true, temperature: 0.8, seed: i, stream: true,
                                                  stream_options: { include_usage: true } });
      for await (const ch of s) {
        if (chunks++ === 0) signalFirst();
        if (ch.usage) usage = ch.usage;
        for (const c of ch.choices) { text += c.text; if (c.finish_reason) finish = c.finish_reason; }
      }
    } catch (e) { error = String(e); signalFirst(); }
    return { text, finish, usage, error };
  })());
  await Promise.all(firstChunk);
  srv.proc.kill('SIGTERM');
  await sleep(300);
  const conn = await connectResult(srv.port);
  const results = await Promise.all(streams);
  const { code } = await srv.exited;
  return { conn, results, code, log: srv.log() };
}

{
  const { conn, results, code, log } = await scenario(60, 1500, true);
  eq(conn, 'ECONNREFUSED', 'after SIGTERM new connections are refused');
  check(results.every((r) => !r.error && r.finish === 'length' && r.usage?.completion_tokens === 1500),
        'in-flight streams complete with all their tokens', JSON.stringify(results.map((r) => [r.error, r.finish,
                                                                                             r.usage])));
  eq(code, 0, 'exit code 0 after draining');
  check(/draining/.test(log) && /stopped/.test(log), 'the server logged the drain');
}
{
  const { results, code } = await scenario(0.5, 2000, false);
  eq(code, 0, 'exit code 0 when the grace period runs out');
  check(results.every((r) => r.error || r.finish === 'abort' || r.finish === 'length'),
        'streams cut by the grace period end (abort) instead of hanging',
        JSON.stringify(results.map((r) => [r.error, r.finish])));
}
done();
