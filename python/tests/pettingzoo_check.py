"""Checks troupe_env's PettingZoo environments against PettingZoo's own tests.

    PYTHONPATH=python $TROUPE_CACHE/pyenv-e2e/bin/python python/tests/pettingzoo_check.py URL OUT.json

against a running `troupe env-serve` at URL. It runs pettingzoo.test.api_test
and parallel_api_test on tic-tac-toe, El Farol and negotiation, then plays
episodes with seeded random agents (masked sampling) and writes their seeds
and moves to OUT.json, for the caller to replay through `troupe run` and
compare the records; and it times random play through the server against
PettingZoo's own tic-tac-toe (tictactoe_v3) in the same run.
"""

import json
import os
import sys
import time
import warnings

import numpy as np
from pettingzoo.test import api_test, parallel_api_test

from troupe_env.pettingzoo import TroupeAECEnv, TroupeParallelEnv

SCENARIOS = [
    ("tictactoe", {}),
    ("elfarol", {"agents": "5", "nights": "3"}),
    ("negotiation", {}),
]


def play(env, rng, seed):
    """Plays one AEC episode of env from seed with a random agent that
    samples the legal moves; returns its turns."""
    env.reset(seed=seed)
    turns = 0
    for agent in env.agent_iter():
        obs, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
            continue
        env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        turns += 1
    return turns


def random_episode(env, rng, seed, rollout_id):
    """One episode of env at seed and rollout_id: its id on the server."""
    env._e.fields["rollout_id"] = rollout_id
    play(env, rng, seed)
    return env.episode_id


def timed(env, rng, n):
    """Plays n episodes of env with a random agent over the legal moves:
    their time (the process's CPU, the wall clock) and turns."""
    cpu, wall = time.process_time(), time.perf_counter()
    turns = sum(play(env, rng, k) for k in range(n))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"turns": turns, "client_cpu_s": cpu, "wall_s": wall, "episodes_per_s": n / wall, "us_per_turn_wall": 1e6 * wall / turns}


def main():
    url, out = sys.argv[1], sys.argv[2]
    cycles = int(os.environ.get("CHECK_CYCLES", "200"))
    result = {"api_test": [], "parallel_api_test": [], "episodes": [], "bench": {}}
    for name, params in SCENARIOS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env = TroupeAECEnv(name, params, base_url=url)
            api_test(env, num_cycles=cycles)
            env.close()
            par = TroupeParallelEnv(name, params, base_url=url)
            parallel_api_test(par, num_cycles=cycles)
            par.close()
        result["api_test"].append(name)
        result["parallel_api_test"].append(name)
        result.setdefault("warnings", {})[name] = sorted({str(w.message)[:120] for w in caught})

    rng = np.random.default_rng(7)
    rid = 1000
    for name, params in SCENARIOS:
        env = TroupeAECEnv(name, params, base_url=url, fallback="policy")
        for k in range(3):
            seed = 100 + k
            ep = random_episode(env, rng, seed, rid)
            result["episodes"].append({"scenario": name, "params": params, "seed": seed, "rollout_id": rid,
                                       "episode_id": ep, "moves": env.played})
            rid += 1
        env.close()

    n = int(os.environ.get("CHECK_BENCH_EPISODES", "200"))
    env = TroupeAECEnv("tictactoe", base_url=url)
    troupe = timed(env, rng, n)
    env.close()

    try:
        import pygame  # noqa: F401
    except ImportError:
        # tictactoe_v3 imports pygame at the top for render() only, which
        # this run never calls: an empty module stands in for it.
        import types
        sys.modules["pygame"] = types.ModuleType("pygame")
    from pettingzoo.classic import tictactoe_v3
    pz = timed(tictactoe_v3.env(), rng, n)
    result["bench"] = {"episodes": n, "troupe_server": troupe, "pettingzoo_tictactoe_v3": pz}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print("pettingzoo_check: passed", json.dumps(result["bench"]))


if __name__ == "__main__":
    main()
