// Run by deb_test.sh with MOPT_BIN = the mopt that dpkg installed into a temporary root, and MOPT_SERVE_TOML = the
// serve.toml installed with it: `mopt serve --config serve.toml` (model and port from the command line, which wins)
// serves stories260K, applies the file's settings, serves the console, and exits 0 on SIGTERM.
import { startServer, check, eq, done, postJson, moptRun } from '../server/lib.mjs';

const srv = await startServer(['--config', process.env.MOPT_SERVE_TOML]);
const r = await postJson(srv.base, '/v1/completions', { model: 'stories260K.gguf', prompt: 'Once upon a time',
                                                        max_tokens: 24, temperature: 0 });
eq(r.status, 200, 'the installed mopt answers a completion');
eq(r.json?.choices[0].text, moptRun('Once upon a time', ['-n', '24', '--temp', '0']),
   '... with the greedy continuation mopt run gives');
const card = await (await fetch(srv.base + '/model_card')).json();
eq([card.engine.max_num_seqs, card.engine.max_waiting], [256, 1024], 'serve.toml\'s settings are applied');
const page = await (await fetch(srv.base + '/')).text();
check(page.includes('<title>mopt console</title>'), 'the installed mopt serves the web console');
const { code } = await srv.stop();
eq(code, 0, 'it exits 0 on SIGTERM');
done();
