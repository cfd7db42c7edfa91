"""Reads a seat's model through every path the OpenAI SDK and the Agents
SDK for Python have: the Agents SDK's Responses model, streamed
(Runner.run_streamed) and not (Runner.run), and the OpenAI client's chat
completions, streamed (with the usage) and not. Prints one JSON line: each
path's text and what it counted."""

import asyncio
import json
import os

from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

SEAT = os.environ["SEAT_URL"]


async def main():
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=SEAT + "/v1", api_key="unused", max_retries=0)
    agent = Agent(name="talker", instructions="Talk.", model=OpenAIResponsesModel(model="any", openai_client=client),
                  model_settings=ModelSettings(temperature=0.5))
    out = {}
    streamed = Runner.run_streamed(agent, "Say something.")
    deltas = []
    async for ev in streamed.stream_events():
        if ev.type == "raw_response_event" and ev.data.type == "response.output_text.delta":
            deltas.append(ev.data.delta)
    out["responses_stream"] = {"final": streamed.final_output, "deltas": "".join(deltas), "pieces": len(deltas),
                               "usage": streamed.context_wrapper.usage.output_tokens}
    whole = await Runner.run(agent, "Say something.")
    out["responses"] = {"final": whole.final_output, "usage": whole.context_wrapper.usage.output_tokens}
    chunks = await client.chat.completions.create(model="any", messages=[{"role": "user", "content": "Say something."}],
                                                  stream=True, stream_options={"include_usage": True})
    text, usage = [], None
    async for c in chunks:
        if c.choices and c.choices[0].delta.content:
            text.append(c.choices[0].delta.content)
        if c.usage:
            usage = c.usage.completion_tokens
    out["chat_stream"] = {"final": "".join(text), "usage": usage}
    r = await client.chat.completions.create(model="any", messages=[{"role": "user", "content": "Say something."}])
    out["chat"] = {"final": r.choices[0].message.content, "usage": r.usage.completion_tokens}
    print(json.dumps(out))


asyncio.run(main())
