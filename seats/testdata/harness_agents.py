"""An agent harness written with the OpenAI Agents SDK for Python
(openai-agents, from PyPI), playing one seat of a troupe episode.

Its model is the seat's Responses API (OpenAIResponsesModel: POST
/v1/responses), streamed as the SDK streams by default (Runner.run_streamed);
its tool is the seat's act, a function tool made from GET /tools whose calls
POST /tools/act. seats' real_python_test.go runs it against a real
llama-server.

Each round the harness observes (the observe tool, itself), and when it is its
turn runs the agent on the observation: the model must call act
(tool_choice "required"; logit_bias on "{" stands in for a trained model's
will to call, and llama.cpp's grammar writes a call of act's schema), and the
run stops there. The tiny random model's moves are random, so some are
illegal: the table refuses them, and the agent runs again on the new
observation after the conversation so far (the earlier call and its refused
output go back as function_call and function_call_output items). After
SEAT_TRIES refused runs in a turn the harness moves itself (a walk).

Prints one JSON summary line on stdout.
"""

import asyncio
import json
import os
import sys
import urllib.request

from agents import (
    Agent,
    FunctionTool,
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    set_tracing_disabled,
)
from agents.agent import StopAtTools
from openai import APIStatusError, AsyncOpenAI

SEAT = os.environ["SEAT_URL"]
TOKEN = os.environ.get("SEAT_TOKEN", "")
TRIES = int(os.environ.get("SEAT_TRIES", "3"))
AUTH = {"Authorization": "Bearer " + TOKEN} if TOKEN else {}


def http(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(SEAT + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **AUTH})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def call_tool(name, args):
    return http("POST", "/tools/" + name, args)


def act_tool():
    for d in http("GET", "/tools"):
        f = d["function"]
        if f["name"] != "act":
            continue

        async def invoke(ctx, args):
            return call_tool("act", json.loads(args or "{}"))["content"]

        return FunctionTool(name=f["name"], description=f["description"], params_json_schema=f["parameters"],
                            on_invoke_tool=invoke, strict_json_schema=False)
    raise RuntimeError("the seat offers no act tool")


async def main():
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=SEAT + "/v1", api_key=TOKEN or "unused", max_retries=0)
    agent = Agent(
        name="negotiator",
        instructions="You play a negotiation game. Read the observation, then make your move with the act tool.",
        model=OpenAIResponsesModel(model="any-model", openai_client=client),
        tools=[act_tool()],
        model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False, max_tokens=100,
                                     extra_body={"logit_bias": {"{": 20}}),
        reset_tool_choice=False,
        tool_use_behavior=StopAtTools(stop_at_tool_names=["act"]),
    )
    summary = {"runs": 0, "modelMoves": 0, "refused": 0, "scriptedMoves": 0, "maxTurns": 0, "turns": 0,
               "serverErrors": 0, "incomplete": 0, "replayed": 0, "events": {}}
    refused_this_turn, last_turn, history = 0, None, []
    for _ in range(100):
        obs = call_tool("observe", {})["content"]
        print("observe:", json.dumps(obs)[:300], file=sys.stderr)
        if obs.startswith("The episode is over") or obs.startswith("You have left"):
            summary["end"] = obs
            break
        if "It is your turn" not in obs:
            continue
        turn = obs.split("your turn ", 1)[1].split(",", 1)[0]
        if turn != last_turn:
            last_turn, refused_this_turn, history = turn, 0, []
            summary["turns"] += 1
        if refused_this_turn >= TRIES:
            r = call_tool("act", {"move": {"type": "walk"}})
            if "Move accepted" not in r["content"]:
                raise RuntimeError("scripted move refused: " + r["content"])
            summary["scriptedMoves"] += 1
            continue
        summary["runs"] += 1
        if history:
            summary["replayed"] += 1
        try:
            result = Runner.run_streamed(agent, history + [{"role": "user", "content": obs}], max_turns=3)
            async for ev in result.stream_events():
                if ev.type == "raw_response_event":
                    t = ev.data.type
                    summary["events"][t] = summary["events"].get(t, 0) + 1
            out = str(result.final_output or "")
            print("run:", json.dumps(out)[:300], file=sys.stderr)
            if "Move accepted" in out:
                summary["modelMoves"] += 1
                continue
            summary["refused"] += 1
            # The next run goes on from this one's conversation: its call
            # and the refusal go back as items.
            history = result.to_input_list()
        except MaxTurnsExceeded:
            summary["maxTurns"] += 1
        except APIStatusError as e:
            if e.status_code < 500:
                raise
            # The server could not parse the call the model wrote (a random
            # model cut off at max_tokens): the seat relays its answer.
            summary["serverErrors"] += 1
        except ModelBehaviorError:
            # The model ran out of tokens: the seat's response is
            # incomplete, which the SDK raises.
            summary["incomplete"] += 1
        refused_this_turn += 1
    print(json.dumps(summary))


asyncio.run(main())
