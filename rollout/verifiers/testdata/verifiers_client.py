"""verifiers' own EnvClient (PyPI verifiers, pinned) against a troupe server.

Usage: python verifiers_client.py SPEC.json OUT.json

SPEC: {"address": "tcp://...", "base_url": ..., "model": ..., "sampling": {...},
       "runs": [task_data, ...], "cancel_after": seconds or null}
OUT:  {"health": bool, "runs": [episode | {"error": text}], "cancelled": bool}
Each episode is typed by verifiers itself (WireEpisode.model_validate, inside
EnvClient.run) and written with what a trainer reads of it: each trace's agent,
trainable, reward, rewards, info and its branches' token ids, sampled mask and
log-probs (verifiers' Branch properties).
"""

import asyncio
import json
import sys

from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient
from verifiers.v1.types import SamplingConfig


def episode_json(ep):
    traces = []
    for t in ep.traces:
        traces.append(
            {
                "id": t.id,
                "agent": t.agent.name,
                "trainable": t.agent.trainable,
                "model": t.agent.config.model,
                "reward": t.reward,
                "rewards": {k: (v.score, v.weight) for k, v in t.rewards.items() if v},
                "metrics": t.metrics,
                "info": t.info,
                "ok": t.ok,
                "stop_condition": t.stop_condition,
                "num_turns": t.num_turns,
                "num_output_tokens": t.num_output_tokens,
                "branches": [
                    {
                        "token_ids": b.token_ids,
                        "sampled_mask": b.sampled_mask,
                        "logprobs": b.logprobs,
                        "trainable": b.trainable,
                        "messages": [m.role for m in b.messages],
                    }
                    for b in t.branches
                ],
            }
        )
    # What prime-rl writes of an episode: its JSON record must build.
    json.dumps(ep.to_record())
    return {
        "id": ep.id,
        "ok": ep.ok,
        "env": ep.env.id,
        "task": ep.task.data.model_dump(mode="json"),
        "errors": [e.message for e in ep.errors],
        "by_agent": {k: len(v) for k, v in ep.by_agent.items()},
        "traces": traces,
    }


async def main(spec_path, out_path):
    with open(spec_path) as f:
        spec = json.load(f)
    client = EnvClient(spec["address"])
    out = {"runs": [], "cancelled": False}
    try:
        await client.wait_for_server_startup(timeout=60, interval=0.2)
        out["health"] = await client.health()
        cc = EvalClientConfig(base_url=spec["base_url"], api_key_var="TROUPE_TEST_NO_KEY")
        sampling = SamplingConfig(**spec.get("sampling", {}))
        for task in spec["runs"]:
            run = client.run(cc, spec["model"], sampling, task)
            try:
                if spec.get("cancel_after") is not None:
                    await asyncio.wait_for(run, spec["cancel_after"])
                    out["runs"].append({"error": "not cancelled"})
                else:
                    out["runs"].append(episode_json(await run))
            except TimeoutError:
                out["cancelled"] = True
                out["runs"].append({"error": "timed out, cancelled"})
            except RuntimeError as e:
                out["runs"].append({"error": str(e)})
        # The server still answers after all of it.
        out["health_after"] = await client.health()
    finally:
        await client.close()
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
