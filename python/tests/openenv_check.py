"""Plays a single-seat troupe game with OpenEnv's own client code.

    PYTHONPATH=$TROUPE_OPENENV_PATH /usr/bin/python3 python/tests/openenv_check.py URL OPENENV_SRC

OPENENV_SRC is the src/ directory of a huggingface/OpenEnv snapshot; the
PYTHONPATH must make `websockets` (>= 13) importable. OpenEnv's
openenv/__init__ and openenv/core/__init__ import its server side (FastAPI,
pydantic), which a client does not need: the packages are declared here with
their directories, so that `openenv.core.generic_client` and the modules it
imports (env_client, sync_client, client_types, utils, containers.runtime)
load from the snapshot as they are. uv_provider imports `requests` at the
top for a provider this run never starts: an empty module stands in for it
when it is missing.

It plays tic-tac-toe as x over OpenEnv's WebSocket session (/ws) against
troupe's house policy in o, checks that an illegal move is refused with the
server's error, reads the state, and prints a JSON summary.
"""

import json
import os
import sys
import types


def load_openenv(src):
    for name, sub in (("openenv", "openenv"), ("openenv.core", os.path.join("openenv", "core"))):
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(src, sub)]
        sys.modules[name] = m
    try:
        import requests  # noqa: F401
    except ImportError:
        sys.modules["requests"] = types.ModuleType("requests")
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient


def main():
    url, src = sys.argv[1], sys.argv[2]
    GenericEnvClient = load_openenv(src)
    summary = {"games": []}
    with GenericEnvClient(base_url=url).sync() as env:
        for seed in (1, 2, 3):
            result = env.reset(scenario="tictactoe", open=["x"], policies={"o": "minimax"}, seed=seed)
            assert not result.done and result.reward is None, result
            obs = result.observation
            assert [p["agent"] for p in obs["pending"]] == ["x"], obs
            if seed == 1:
                try:
                    env.step({"move": "z9"})
                    raise AssertionError("an illegal move was taken")
                except RuntimeError as e:
                    assert "illegal_action" in str(e) and '"z9" is not one of' in str(e), e
                    summary["illegal"] = str(e)
            moves = []
            while not result.done:
                pending = result.observation["pending"][0]
                move = pending["legal"][len(moves) * 7 % len(pending["legal"])]
                moves.append(move)
                result = env.step({"move": move})
            state = env.state()
            assert state["done"] and state["episode_id"] == obs["episode_id"], state
            summary["games"].append({"seed": seed, "moves": moves, "reward": result.reward,
                                     "status": result.observation["status"], "scores": result.observation["scores"],
                                     "step_count": state["step_count"]})
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
