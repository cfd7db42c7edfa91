"""Plays a single-seat troupe game with OpenEnv's own client code.

    PYTHONPATH=python $TROUPE_CACHE/pyenv-e2e/bin/python python/tests/openenv_check.py URL

OpenEnv's client is openenv-core from PyPI (python/requirements/e2e.txt):
its GenericEnvClient, over its WebSocket session (/ws).

It plays tic-tac-toe as x against troupe's house policy in o, checks that
an illegal move is refused with the server's error, reads the state, and
prints a JSON summary.
"""

import json
import sys

from openenv.core.generic_client import GenericEnvClient


def main():
    url = sys.argv[1]
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
