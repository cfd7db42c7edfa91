// An agent harness written with the official OpenAI Agents SDK for
// JavaScript, playing one seat of a troupe episode: its model is the
// seat's OpenAI-compatible endpoint, its tools the seat's observe and act,
// over MCP (SEAT_TOOLS=mcp, the SDK's MCPServerStreamableHttp) or as
// function tools (SEAT_TOOLS=function, from GET /tools). seats'
// real_test.go runs it against a real llama-server.
//
// Each round the harness observes (through the observe tool, itself), and
// when it is its turn runs the agent on the observation: the model, which
// is given the act tool alone (grammar-constrained sampling is slow on a
// CPU, and an observe detour would double a turn's calls), must call it
// (tool_choice "required"), and the run stops there. The test model is a
// tiny random one: logit_bias on "{" stands in for a trained model's will
// to call, and llama.cpp's grammar then writes a call of the tools' schemas
// (act's is the scenario's JSON move). Its moves are random, so some are
// illegal: the table refuses them and the agent runs again. After
// SEAT_TRIES refused runs in one turn the harness moves itself, through the
// same act tool (a walk), and says so in its summary.
//
// Prints one JSON summary line on stdout.
import {
  Agent,
  MCPServerStreamableHttp,
  MaxTurnsExceededError,
  OpenAIChatCompletionsModel,
  run,
  setTracingDisabled,
  tool,
} from '@openai/agents';
import OpenAI, { APIError } from 'openai';

const seat = process.env.SEAT_URL;
// SEAT_TOKEN is the bearer token of a seat behind troupe env-serve's
// --token: the OpenAI client sends it as its API key, the tool calls and
// MCP requests as Authorization.
const token = process.env.SEAT_TOKEN || '';
const auth = token ? { authorization: 'Bearer ' + token } : {};
const mode = process.env.SEAT_TOOLS || 'mcp';
const tries = Number(process.env.SEAT_TRIES || 3);
if (!seat) throw new Error('SEAT_URL is not set');
setTracingDisabled(true);

const client = new OpenAI({ baseURL: seat + '/v1', apiKey: token || 'unused', maxRetries: 0 });
const model = new OpenAIChatCompletionsModel(client, 'any-model');

async function post(path, body) {
  const r = await fetch(seat + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`POST ${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

// callTool calls one of the seat's tools outside the model: the harness's
// own observe, and its scripted move.
let callTool;
let tools = [];
let mcpServers = [];
let server;
if (mode === 'function') {
  const defs = await (await fetch(seat + '/tools', { headers: auth })).json();
  tools = defs.filter((d) => d.function.name === 'act').map((d) =>
    tool({
      name: d.function.name,
      description: d.function.description,
      parameters: d.function.parameters,
      strict: false,
      execute: async (args) => (await post('/tools/' + d.function.name, args)).content,
    }),
  );
  callTool = async (name, args) => post('/tools/' + name, args);
} else if (mode === 'mcp') {
  server = new MCPServerStreamableHttp({ url: seat + '/mcp', name: 'seat', toolFilter: { allowedToolNames: ['act'] }, requestInit: { headers: auth } });
  await server.connect();
  mcpServers = [server];
  callTool = async (name, args) => {
    const r = await server.callTool(name, args);
    const text = r.map((c) => c.text).join('');
    return { content: text, is_error: false };
  };
} else {
  throw new Error(`SEAT_TOOLS=${mode}: want mcp or function`);
}

const agent = new Agent({
  name: 'negotiator',
  instructions: 'You play a negotiation game. Read the observation, then make your move with the act tool.',
  model,
  tools,
  mcpServers,
  modelSettings: {
    toolChoice: 'required',
    parallelToolCalls: false,
    maxTokens: 100,
    providerData: { logit_bias: { '{': 20 } },
  },
  resetToolChoice: false,
  // The SDK's MCP tools are not strict by default: additionalProperties
  // true, under which llama.cpp's grammar lets a model write any key.
  mcpConfig: { convertSchemasToStrict: true },
  toolUseBehavior: { stopAtToolNames: ['act'] },
});

const started = Date.now();
const summary = { mode, runs: 0, modelMoves: 0, refused: 0, scriptedMoves: 0, maxTurns: 0, turns: 0 };
let refusedThisTurn = 0;
let lastTurn = -1;
for (let round = 0; round < 100; round++) {
  const obs = await callTool('observe', {});
  console.error('observe:', JSON.stringify(obs.content).slice(0, 300));
  if (obs.content.startsWith('The episode is over') || obs.content.startsWith('You have left')) {
    summary.end = obs.content;
    break;
  }
  if (!obs.content.includes('It is your turn')) continue;
  const turn = /your turn (\d+)/.exec(obs.content)?.[1];
  if (turn !== lastTurn) {
    lastTurn = turn;
    refusedThisTurn = 0;
    summary.turns++;
  }
  if (refusedThisTurn >= tries) {
    const r = await callTool('act', { move: { type: 'walk' } });
    if (!r.content.includes('Move accepted')) throw new Error('scripted move refused: ' + r.content);
    summary.scriptedMoves++;
    continue;
  }
  summary.runs++;
  try {
    const result = await run(agent, obs.content, { maxTurns: 3 });
    const out = String(result.finalOutput ?? '');
    console.error('run:', JSON.stringify(out).slice(0, 300));
    // A function tool's output is its text; an MCP tool's, its content
    // item as JSON.
    if (out.includes('Move accepted')) summary.modelMoves++;
    else {
      summary.refused++;
      refusedThisTurn++;
    }
  } catch (e) {
    if (e instanceof MaxTurnsExceededError) {
      summary.maxTurns++;
    } else if (e instanceof APIError && e.status >= 500) {
      // The server could not parse the call the model wrote (a random
      // model cut off at max_tokens): the seat relays the server's answer.
      summary.serverErrors = (summary.serverErrors || 0) + 1;
    } else {
      throw e;
    }
    refusedThisTurn++;
  }
}
summary.ms = Date.now() - started;
if (server) await server.close();
console.log(JSON.stringify(summary));
