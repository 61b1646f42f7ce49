// Issue 19, acceptance 1 (structured output, tool calls, reasoning) with the official `openai` npm client against
// mopt serve on stories260K: 100 completions sampled at temperature 1 under a JSON schema all parse and validate
// (a small validator below); regex, choice and GBNF constraints; tool calls forced with tool_choice required and
// named in each template family's format (Qwen/Hermes, Llama 3, Mistral, DeepSeek-V3 templates in templates/),
// streaming and not; tool_choice none really means none (the text is `mopt run`'s); reasoning_content.
import OpenAI from 'openai';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, check, eq, done, moptRun, metrics } from './lib.mjs';

const TEMPLATES = path.join(path.dirname(fileURLToPath(import.meta.url)), 'templates');

// ---- a validator for the JSON Schema keywords these tests use
function validate(v, s, where = '$') {
  const errs = [];
  const type = (x) => (x === null ? 'null' : Array.isArray(x) ? 'array' : Number.isInteger(x) ? 'integer' : typeof x);
  const ok = (t) => t === type(v) || (t === 'number' && type(v) === 'integer');
  if (s.type && !(Array.isArray(s.type) ? s.type.some(ok) : ok(s.type))) errs.push(`${where}: type ${type(v)} not ${s.type}`);
  if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) errs.push(`${where}: ${JSON.stringify(v)} not in enum`);
  if (typeof v === 'string') {
    const n = [...v].length;
    if (s.minLength !== undefined && n < s.minLength) errs.push(`${where}: shorter than ${s.minLength}`);
    if (s.maxLength !== undefined && n > s.maxLength) errs.push(`${where}: longer than ${s.maxLength}`);
    if (s.pattern && !new RegExp(s.pattern, 'u').test(v)) errs.push(`${where}: does not match ${s.pattern}`);
  }
  if (typeof v === 'number') {
    if (s.minimum !== undefined && v < s.minimum) errs.push(`${where}: below ${s.minimum}`);
    if (s.maximum !== undefined && v > s.maximum) errs.push(`${where}: above ${s.maximum}`);
  }
  if (Array.isArray(v)) {
    if (s.minItems !== undefined && v.length < s.minItems) errs.push(`${where}: fewer than ${s.minItems} items`);
    if (s.maxItems !== undefined && v.length > s.maxItems) errs.push(`${where}: more than ${s.maxItems} items`);
    if (s.items) v.forEach((x, i) => errs.push(...validate(x, s.items, `${where}[${i}]`)));
  }
  if (type(v) === 'object') {
    for (const r of s.required ?? []) if (!(r in v)) errs.push(`${where}: missing ${r}`);
    for (const [k, x] of Object.entries(v)) {
      if (s.properties && k in s.properties) errs.push(...validate(x, s.properties[k], `${where}.${k}`));
      else if (s.additionalProperties === false) errs.push(`${where}: unexpected property ${k}`);
    }
  }
  return errs;
}

const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    mood: { enum: ['happy', 'sad', 'sleepy'] },
    pets: {
      type: 'array', maxItems: 3,
      items: {
        type: 'object',
        properties: { kind: { enum: ['cat', 'dog', 'bird'] }, legs: { type: 'integer', minimum: 0, maximum: 8 } },
        required: ['kind'], additionalProperties: false,
      },
    },
    home: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 10 }, floor: { type: ['integer', 'null'], minimum: -2, maximum: 99 } },
      required: ['city', 'floor'], additionalProperties: false,
    },
    tags: { type: 'array', items: { type: 'string', pattern: '^[a-z]{1,6}$' }, minItems: 1, maxItems: 2 },
    ok: { type: 'boolean' },
  },
  required: ['name', 'age', 'mood', 'pets', 'home', 'tags'],
  additionalProperties: false,
};
const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] },
                    days: { type: 'integer', minimum: 1, maximum: 7 } },
      required: ['city', 'unit'], additionalProperties: false,
    },
  },
};
const TIME = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } };
const toolSchema = (name) => [WEATHER, TIME].find((t) => t.function.name === name).function.parameters;
const messages = [{ role: 'user', content: 'What is the weather in Oslo?' }];

function client(srv) {
  return new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'unused', maxRetries: 0 });
}

// Streams a chat completion and assembles it the way clients do.
async function streamChat(c, body) {
  const s = await c.chat.completions.create({ ...body, stream: true });
  const out = { content: '', reasoning: '', calls: [], finish: null, chunks: 0 };
  for await (const ch of s) {
    out.chunks++;
    for (const choice of ch.choices) {
      const d = choice.delta;
      if (d.content) out.content += d.content;
      if (d.reasoning_content) out.reasoning += d.reasoning_content;
      for (const t of d.tool_calls ?? []) {
        if (t.id) out.calls[t.index] = { id: t.id, type: t.type, name: t.function.name, arguments: '' };
        out.calls[t.index].arguments += t.function?.arguments ?? '';
      }
      if (choice.finish_reason) out.finish = choice.finish_reason;
    }
  }
  return out;
}

function checkCalls(label, calls, wantName) {
  check(calls.length >= 1, `${label}: at least one tool call`, JSON.stringify(calls));
  for (const call of calls) {
    const name = call.function?.name ?? call.name, args = call.function?.arguments ?? call.arguments;
    check(/^call_[0-9a-f]{24}$/.test(call.id) && (call.type ?? 'function') === 'function', `${label}: id and type`,
          JSON.stringify(call));
    if (wantName) eq(name, wantName, `${label}: the named function`);
    let parsed = null;
    try { parsed = JSON.parse(args); } catch { /* checked below */ }
    check(parsed !== null, `${label}: arguments are JSON`, args);
    if (parsed !== null) eq(validate(parsed, toolSchema(name)), [], `${label}: arguments follow ${name}'s schema`);
  }
}

// ---- structured output on the default template
{
  const srv = await startServer(['--served-model-name', 'stories', '--max-n', '16', '--max-num-seqs', '64']);
  const c = client(srv);
  try {
    // 100 sampled completions under a schema with nested objects, arrays, enums and required fields
    const reqs = [];
    for (let i = 0; i < 10; i++)
      reqs.push(c.chat.completions.create({
        model: 'stories', messages: [{ role: 'user', content: 'Describe a person as JSON.' }], n: 10,
        temperature: 1, seed: 1000 + 100 * i, max_tokens: 1500,
        response_format: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON, strict: true } },
      }));
    const results = await Promise.all(reqs);
    let valid = 0, stopped = 0;
    const problems = [];
    for (const r of results)
      for (const ch of r.choices) {
        stopped += ch.finish_reason === 'stop';
        let v;
        try { v = JSON.parse(ch.message.content); } catch (e) { problems.push(`not JSON: ${ch.message.content}`); continue; }
        const errs = validate(v, PERSON);
        if (errs.length) problems.push(errs.join('; ') + ' in ' + ch.message.content);
        else valid++;
      }
    eq(valid, 100, '100 completions at temperature 1 parse and validate against the schema');
    eq(stopped, 100, 'all of them end with finish_reason stop (the grammar completed)');
    check(problems.length === 0, 'no invalid outputs', problems.slice(0, 3).join('\n  '));
    const distinct = new Set(results.flatMap((r) => r.choices.map((ch) => ch.message.content))).size;
    check(distinct > 50, 'the samples differ (sampling is still sampling)', String(distinct));

    // streaming under the same schema: the streamed text is the non-streamed one (same seed), and it validates
    const body = { model: 'stories', messages: [{ role: 'user', content: 'A person?' }], temperature: 1, seed: 7,
                   max_tokens: 1500, response_format: { type: 'json_schema', json_schema: { name: 'p', schema: PERSON } } };
    const whole = await c.chat.completions.create(body);
    const streamed = await streamChat(c, body);
    eq(streamed.content, whole.choices[0].message.content, 'streamed JSON == non-streamed JSON');
    eq(validate(JSON.parse(streamed.content), PERSON), [], 'streamed JSON validates');

    // completions: guided_json (vLLM), guided_regex, guided_choice, grammar (GBNF), structured_outputs
    const g1 = await c.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 400,
                                            temperature: 0, guided_json: PERSON.properties.home });
    eq(validate(JSON.parse(g1.choices[0].text), PERSON.properties.home), [], 'guided_json on /v1/completions');
    const g2 = await c.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 40,
                                            temperature: 1, seed: 3, guided_regex: '[A-Z][a-z]+ (is|was) [0-9]{1,3}' });
    check(/^[A-Z][a-z]+ (is|was) [0-9]{1,3}$/.test(g2.choices[0].text), 'guided_regex', g2.choices[0].text);
    const choices = ['Lily found a ball', 'Tom ate a cake', 'the end'];
    const g3 = await c.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 20,
                                            temperature: 1, seed: 5, n: 8, guided_choice: choices });
    check(g3.choices.every((x) => choices.includes(x.text) && x.finish_reason === 'stop'), 'guided_choice',
          JSON.stringify(g3.choices.map((x) => x.text)));
    const gbnf = 'root ::= "The " animal " said " [a-z]{2,8} "."\nanimal ::= "cat" | "dog"\n';
    const g4 = await c.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 30,
                                            temperature: 0, grammar: gbnf });
    check(/^The (cat|dog) said [a-z]{2,8}\.$/.test(g4.choices[0].text), 'grammar (llama.cpp GBNF)', g4.choices[0].text);
    const g5 = await c.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 30,
                                            temperature: 0, guided_grammar: gbnf });
    eq(g5.choices[0].text, g4.choices[0].text, 'guided_grammar == grammar');
    const g6 = await c.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 20,
                                            temperature: 0, structured_outputs: { choice: choices } });
    check(choices.includes(g6.choices[0].text), 'structured_outputs.choice', g6.choices[0].text);
    // json_object: any JSON object
    const j = await c.chat.completions.create({ model: 'stories', messages, max_tokens: 400, temperature: 0,
                                                response_format: { type: 'json_object' } });
    const jt = j.choices[0].message.content;
    check(j.choices[0].finish_reason === 'length' || (JSON.parse(jt) && typeof JSON.parse(jt) === 'object'),
          'json_object gives an object', jt);
    check(jt.trimStart().startsWith('{'), 'json_object output starts an object', jt);
    // response_format text is no constraint: the greedy text is mopt run's
    const chatPrompt = 'User: What is the weather in Oslo?\nAssistant:';
    const ref = moptRun(chatPrompt, ['-n', '24', '--temp', '0']);
    const t = await c.chat.completions.create({ model: 'stories', messages, max_tokens: 24, temperature: 0,
                                               response_format: { type: 'text' } });
    eq(t.choices[0].message.content, ref, 'response_format text == mopt run');
    // tool_choice none: no parsing, nothing forced (this template prints no tools: the text is mopt run's)
    const none = await c.chat.completions.create({ model: 'stories', messages, max_tokens: 24, temperature: 0,
                                                  tools: [WEATHER], tool_choice: 'none' });
    eq(none.choices[0].message.content, ref, 'tool_choice none: the unconstrained text (== mopt run)');
    check(!none.choices[0].message.tool_calls, 'tool_choice none: no tool_calls');
    const m = await metrics(srv.base);
    eq(m['mopt:kv_cache_usage_perc'], 0, 'KV usage back to zero');
  } finally {
    const { code } = await srv.stop();
    eq(code, 0, 'server exits 0');
  }
}

// ---- tool calls in each template family's format
// One call as each family's model writes it (the formats of Qwen's, Meta's, Mistral's and DeepSeek's documentation).
const CALL_TEXT = {
  hermes: (n, a) => `<tool_call>\n{"name": "${n}", "arguments": ${a}}\n</tool_call>`,
  llama3_json: (n, a) => `<|python_tag|>{"name": "${n}", "parameters": ${a}}`,
  mistral: (n, a) => `[TOOL_CALLS][{"name": "${n}", "arguments": ${a}}]`,
  deepseek_v3: (n, a) => `<\uFF5Ctool\u2581calls\u2581begin\uFF5C><\uFF5Ctool\u2581call\u2581begin\uFF5C>function` +
    `<\uFF5Ctool\u2581sep\uFF5C>${n}\n\`\`\`json\n${a}\n\`\`\`<\uFF5Ctool\u2581call\u2581end\uFF5C>` +
    '<\uFF5Ctool\u2581calls\u2581end\uFF5C>',
};
const FAMILIES = [
  ['hermes_qwen25.jinja', 'hermes'], ['llama31.jinja', 'llama3_json'], ['mistral_v3.jinja', 'mistral'],
  ['deepseek_v3.jinja', 'deepseek_v3'],
];
for (const [file, parser] of FAMILIES) {
  const srv = await startServer(['--served-model-name', 'stories', '--chat-template', path.join(TEMPLATES, file)]);
  const c = client(srv);
  try {
    check(srv.log().includes(`tool calls: ${parser} (from the chat template)`), `${parser}: detected from ${file}`);
    const base = { model: 'stories', messages, tools: [WEATHER, TIME], temperature: 0, max_tokens: 300,
                   parallel_tool_calls: false };
    // required: one call of some tool, arguments following its schema
    const r = await c.chat.completions.create({ ...base, tool_choice: 'required' });
    const msg = r.choices[0].message;
    checkCalls(`${parser} required`, msg.tool_calls ?? [], null);
    eq(msg.tool_calls?.length, 1, `${parser} required with parallel_tool_calls false: one call`);
    eq(r.choices[0].finish_reason, 'tool_calls', `${parser} required: finish_reason tool_calls`);
    eq(msg.content, null, `${parser} required: content null`);
    // named, streaming and not: the same call
    const named = { ...base, tool_choice: { type: 'function', function: { name: 'get_weather' } } };
    const n1 = await c.chat.completions.create(named);
    checkCalls(`${parser} named`, n1.choices[0].message.tool_calls ?? [], 'get_weather');
    const s1 = await streamChat(c, named);
    eq(s1.calls.map((x) => [x.name, x.arguments]),
       (n1.choices[0].message.tool_calls ?? []).map((x) => [x.function.name, x.function.arguments]),
       `${parser} named, streamed: the same call as non-streamed`);
    checkCalls(`${parser} named streamed`, s1.calls, 'get_weather');
    eq(s1.finish, 'tool_calls', `${parser} streamed finish_reason tool_calls`);
    check(s1.chunks > 4, `${parser} streamed the arguments in pieces`, String(s1.chunks));
    // several calls when parallel calls are allowed (sampled), each valid
    const p = await c.chat.completions.create({ ...base, parallel_tool_calls: true, tool_choice: 'required',
                                                temperature: 1, seed: 11, max_tokens: 400 });
    const pcalls = p.choices[0].message.tool_calls ?? [];
    // this model rarely stops calling: at max_tokens the last call is cut off; every earlier one is complete
    if (p.choices[0].finish_reason === 'length') pcalls.pop();
    else eq(p.choices[0].finish_reason, 'tool_calls', `${parser} parallel: finish_reason`);
    checkCalls(`${parser} parallel`, pcalls, null);
    if (parser === 'hermes') {  // a forced call whose tool's parameters the grammar cannot express: a clear 400
      try {
        await c.chat.completions.create({ ...base, tool_choice: 'required', tools: [{ type: 'function', function: {
          name: 'f', parameters: { type: 'object', properties: { a: { type: 'string', not: { const: 'x' } } } } } }] });
        check(false, 'unsupported keyword in tool parameters refused');
      } catch (e) {
        eq([e.status, e.error?.param, e.error?.code], [400, 'tools[0].function.parameters', 'invalid_schema'],
           'tool_choice required with an unsupported schema keyword -> 400 naming the tool parameters');
        check(/'not'/.test(e.error?.message), 'the message names the keyword', e.error?.message);
      }
      const refused = async (label, body, param) => {
        try {
          await c.chat.completions.create(body);
          check(false, `${label}: refused`);
        } catch (e) {
          eq([e.status, e.error?.param], [400, param], `${label} -> 400 naming ${param}`);
        }
      };
      const strictBad = { type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object',
                          properties: { a: { type: 'string', not: { const: 'x' } } } } } };
      await refused('strict tool with an unsupported keyword under auto', { ...base, tool_choice: 'auto',
                    tools: [strictBad] }, 'tools[0].function.parameters');
      await refused('strict tool under auto with response_format', { ...base, tool_choice: 'auto',
                    tools: [{ ...WEATHER, function: { ...WEATHER.function, strict: true } }],
                    response_format: { type: 'json_object' } }, 'tools');
    }
    // auto: the model's own text (this model never calls tools): content, no tool_calls
    const a = await c.chat.completions.create({ ...base, tool_choice: 'auto', max_tokens: 16 });
    check(!a.choices[0].message.tool_calls && typeof a.choices[0].message.content === 'string',
          `${parser} auto: content, no tool call`, JSON.stringify(a.choices[0].message));
    // auto with a strict tool: a grammar holds strict arguments to their schema and otherwise allows any text
    // without the call marker: this model's greedy text is the unconstrained one for the same prompt (/tokenize
    // renders it, /v1/completions continues it)
    const strictTools = [{ ...WEATHER, function: { ...WEATHER.function, strict: true } }, TIME];
    const as = await c.chat.completions.create({ ...base, tools: strictTools, tool_choice: 'auto', max_tokens: 16 });
    const tk = await (await fetch(srv.base + '/tokenize', { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'stories', messages, tools: strictTools }) })).json();
    const ref = await c.completions.create({ model: 'stories', prompt: tk.tokens, max_tokens: 16, temperature: 0 });
    eq([as.choices[0].message.content, as.choices[0].message.tool_calls], [ref.choices[0].text, undefined],
       `${parser} auto with a strict tool: the unconstrained text, no calls`);
    // auto parses the calls in the model's output (forced here by a grammar: this model never writes calls)
    const args = { city: 'Oslo', unit: 'celsius' };
    const out = 'Checking.\n' + CALL_TEXT[parser]('get_weather', JSON.stringify(args));
    const forced = { ...base, tool_choice: 'auto', grammar: `root ::= ${JSON.stringify(out)}\n` };
    const fa = await c.chat.completions.create(forced);
    const fm = fa.choices[0].message;
    eq([fm.content, (fm.tool_calls ?? []).map((x) => [x.function.name, JSON.parse(x.function.arguments)]),
        fa.choices[0].finish_reason], ['Checking.\n', [['get_weather', args]], 'tool_calls'],
       `${parser} auto: content and the call parsed from the output`);
    checkCalls(`${parser} auto parsed`, fm.tool_calls ?? [], 'get_weather');
    const fs = await streamChat(c, forced);
    eq([fs.content, fs.calls.map((x) => [x.name, JSON.parse(x.arguments)]), fs.finish],
       ['Checking.\n', [['get_weather', args]], 'tool_calls'], `${parser} auto streamed: the same`);
  } finally {
    await srv.stop();
  }
}

// ---- reasoning_content; with a reasoning parser a constraint applies to the answer after the think block
{
  // deepseek_r1: the template opens <think> in the prompt, so the output is reasoning until </think>. This model
  // never writes </think>: all of its text is reasoning, and it is mopt run's greedy text for the same prompt.
  const srv = await startServer(['--served-model-name', 'stories', '--reasoning-parser', 'deepseek_r1',
                                 '--chat-template', path.join(TEMPLATES, 'deepseek_r1.jinja'),
                                 '--tool-call-parser', 'deepseek_v3']);
  const c = client(srv);
  try {
    const ref = moptRun('<\uFF5CUser\uFF5C>What is the weather in Oslo?<\uFF5CAssistant\uFF5C><think>\n',
                        ['-n', '24', '--temp', '0']);
    const body = { model: 'stories', messages, temperature: 0, max_tokens: 24 };
    const r = await c.chat.completions.create(body);
    eq([r.choices[0].message.reasoning_content, r.choices[0].message.content, r.choices[0].finish_reason],
       [ref, null, 'length'], 'deepseek_r1: the open think block is reasoning_content (== mopt run), no content');
    const s = await streamChat(c, body);
    eq([s.reasoning, s.content], [ref, ''], 'deepseek_r1 streamed: the same split');
    // a constraint does not touch the reasoning: the same free text (the answer would come after </think>)
    for (const extra of [{ guided_choice: ['yes', 'no'] },
                         { response_format: { type: 'json_schema', json_schema: { name: 'p', schema: PERSON } } },
                         { tools: [WEATHER], tool_choice: 'required' }]) {
      const k = Object.keys(extra).join(',');
      const rc = await c.chat.completions.create({ ...body, ...extra });
      eq([rc.choices[0].message.reasoning_content, rc.choices[0].finish_reason], [ref, 'length'],
         `deepseek_r1 with ${k}: the reasoning is unconstrained`);
      const sc = await streamChat(c, { ...body, ...extra });
      eq(sc.reasoning, ref, `deepseek_r1 with ${k}, streamed: the same reasoning`);
    }
  } finally {
    await srv.stop();
  }
}
{
  // qwen3: thinking is optional (no block open in the prompt); the answer follows the constraint
  const srv = await startServer(['--served-model-name', 'stories', '--reasoning-parser', 'qwen3',
                                 '--chat-template', path.join(TEMPLATES, 'qwen3.jinja')]);
  const c = client(srv);
  try {
    const plain = await c.chat.completions.create({ model: 'stories', messages, temperature: 0, max_tokens: 12 });
    eq(plain.choices[0].message.reasoning_content, null, 'qwen3: no think block, reasoning_content null');
    const body = { model: 'stories', messages, temperature: 0, max_tokens: 60,
                   chat_template_kwargs: { enable_thinking: false }, guided_regex: '[A-Z][a-z ]{3,30}\\.' };
    const r = await c.chat.completions.create(body);
    const m = r.choices[0].message;
    check(m.reasoning_content === null && /^[A-Z][a-z ]{3,30}\.$/.test(m.content) &&
          r.choices[0].finish_reason === 'stop', 'qwen3: the constrained answer, no reasoning', JSON.stringify(m));
    const s = await streamChat(c, body);
    eq([s.reasoning, s.content], ['', m.content], 'qwen3 streamed: the same answer');
  } finally {
    await srv.stop();
  }
}
done();
