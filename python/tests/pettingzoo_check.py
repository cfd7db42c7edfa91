"""Checks troupe_env's PettingZoo environments against PettingZoo's own tests.

    PYTHONPATH=python $PYENV_E2E/bin/python python/tests/pettingzoo_check.py URL OUT.json

against a running `troupe env-serve` at URL (cli/envserve_test.go runs it
with the pinned PyPI pettingzoo of internal/pyenv's E2E environment). On
every scenario that has an environment it runs pettingzoo.test's api_test,
parallel_api_test, seed_test and parallel_seed_test; it checks that reset()
after reset(seed=s) repeats; then it plays episodes with seeded random
agents (masked sampling), with troupe's credit allocators, and writes their
seeds, moves and what the environment gave each agent at the end (rewards,
infos' credit) to OUT.json, for the caller to replay through `troupe run`
and compare the records and the credit; and it times random play through
the server against PettingZoo's own tic-tac-toe (tictactoe_v3) in the same
run.
"""

import json
import os
import sys
import time
import warnings

import numpy as np
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

from troupe_env.pettingzoo import TroupeAECEnv, TroupeParallelEnv

# Every scenario that has an environment (its roles declare action sets),
# with parameters that keep its episodes short.
SCENARIOS = [
    ("tictactoe", {}),
    ("elfarol", {"agents": "5", "nights": "3"}),
    ("negotiation", {}),
    ("blotto", {}),
    ("signal", {}),
    ("werewolf", {"players": "5", "wolves": "1", "days": "2"}),
    ("committee", {"informed": "1", "uninformed": "2", "options": "3"}),
    ("bargain", {"members": "2", "rounds": "2", "pie": "6"}),
]

# Episodes whose credit is compared with troupe run's: (scenario, params,
# allocators, reward). Bargain and werewolf have two sides.
CREDITED = [
    # Demands of 0 or 1 coin (lowest=2): a deal, whose coins each side
    # and allocator splits.
    ("bargain", {"members": "2", "rounds": "2", "pie": "6"},
     ["team", "equal-split", "individual", "difference", "leave-one-out", "shapley", "shapley-mc:permutations=4",
      "coma:samples=3", "discount:gamma=0.5", "difference:c=average"], "difference"),
    ("werewolf", {"players": "5", "wolves": "1", "days": "2"},
     ["team", "equal-split", "equal-split-sample", "difference", "leave-one-out", "shapley", "coma:samples=2", "rae", "grpo",
      "dr-grpo", "rloo", "magrpo", "at-grpo"], "team"),
    ("elfarol", {"agents": "5", "nights": "3"}, ["team", "individual", "difference", "shapley"], "shapley"),
    ("committee", {"informed": "1", "uninformed": "2", "options": "3"}, ["team", "leave-one-out", "shapley"], None),
]

# Episodes replayed as they are (the scenario's score is the reward).
REPLAYED = [("tictactoe", {}), ("elfarol", {"agents": "5", "nights": "3"}), ("negotiation", {})]


def play(env, rng, seed, lowest=0):
    """Plays one AEC episode of env from seed with a random agent that
    samples the legal moves (among the first `lowest` of them, when set);
    returns its turns and, by agent, the reward and infos last() gave it
    once done."""

    def choose(agent, obs):
        legal = np.flatnonzero(obs["action_mask"])
        return int(rng.choice(legal[:lowest] if lowest else legal))

    return run_episode(env, seed, choose)


def play_moves(env, seed, moves):
    """Plays one AEC episode of env from seed, each agent giving its moves
    in order; returns what play does."""
    given = {a: list(m) for a, m in moves.items()}
    return run_episode(env, seed, lambda agent, obs: given[agent].pop(0))


def run_episode(env, seed, choose):
    """Plays one AEC episode of env from seed, choose(agent, obs) giving
    each move; returns its turns and, by agent, the reward and infos
    last() gave it once done."""
    env.reset(seed=seed)
    turns = 0
    final = {}
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if term or trunc:
            final[agent] = {"reward": reward, "info": info}
            env.step(None)
            continue
        env.step(choose(agent, obs))
        turns += 1
    return turns, final


def timed(env, rng, n):
    """Plays n episodes of env with a random agent over the legal moves:
    their time (the process's CPU, the wall clock) and turns."""
    cpu, wall = time.process_time(), time.perf_counter()
    turns = sum(play(env, rng, k)[0] for k in range(n))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"turns": turns, "client_cpu_s": cpu, "wall_s": wall, "episodes_per_s": n / wall, "us_per_turn_wall": 1e6 * wall / turns}


def first_views(env, seed, n):
    """The first infos (views, inboxes) of reset(seed=seed), then of n
    resets without a seed."""
    out = []
    for k in range(n + 1):
        env.reset(seed=seed if k == 0 else None)
        out.append({a: env.infos[a] for a in env.agents})
    return out


def main():
    url, out = sys.argv[1], sys.argv[2]
    cycles = int(os.environ.get("CHECK_CYCLES", "200"))
    result = {"api_test": [], "parallel_api_test": [], "seed_test": [], "parallel_seed_test": [], "episodes": [], "bench": {}}
    for name, params in SCENARIOS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env = TroupeAECEnv(name, params, base_url=url)
            api_test(env, num_cycles=cycles)
            env.close()
            result["api_test"].append(name)
            par = TroupeParallelEnv(name, params, base_url=url)
            parallel_api_test(par, num_cycles=cycles)
            par.close()
            result["parallel_api_test"].append(name)
            seed_test(lambda: TroupeAECEnv(name, params, base_url=url), num_cycles=cycles)
            result["seed_test"].append(name)
            parallel_seed_test(lambda: TroupeParallelEnv(name, params, base_url=url), num_cycles=cycles)
            result["parallel_seed_test"].append(name)
        result.setdefault("warnings", {})[name] = sorted({str(w.message)[:120] for w in caught})

    # reset() after reset(seed=s) goes on from s, alike in two environments.
    a, b = TroupeAECEnv("signal", base_url=url), TroupeAECEnv("signal", base_url=url)
    va, vb = first_views(a, 5, 3), first_views(b, 5, 3)
    a.close()
    b.close()
    result["reseeded"] = {"equal": va == vb, "distinct": len({json.dumps(v, sort_keys=True) for v in va})}

    rng = np.random.default_rng(7)
    rid = 1000
    runs = [(n, p, None, None) for n, p in REPLAYED] + CREDITED
    for name, params, allocators, reward in runs:
        env = TroupeAECEnv(name, params, base_url=url, fallback="policy", allocators=allocators, reward=reward)
        for k in range(3):
            seed = 100 + k
            env._e.fields["rollout_id"] = rid
            _, final = play(env, rng, seed, lowest=2 if name == "bargain" else 0)
            result["episodes"].append({"scenario": name, "params": params, "seed": seed, "rollout_id": rid,
                                       "allocators": allocators, "reward": reward,
                                       "episode_id": env.episode_id, "moves": env.played, "final": final})
            rid += 1
        env.close()

    # The Parallel environment ends with the same infos and rewards as the
    # AEC one, for the same seed and moves.
    name, params, allocators, reward = CREDITED[0]
    par = TroupeParallelEnv(name, params, base_url=url, allocators=allocators, reward=reward)
    aec = TroupeAECEnv(name, params, base_url=url, allocators=allocators, reward=reward)
    obs, infos = par.reset(seed=300)
    while par.agents:
        acts = {a: int(np.flatnonzero(o["action_mask"])[:2][-1]) if o["action_mask"].any() else 0 for a, o in obs.items()}
        obs, rewards, terms, truncs, infos = par.step(acts)
    _, final = play_moves(aec, 300, par.played)
    assert set(final) == set(rewards), (final.keys(), rewards.keys())
    for a in rewards:
        assert rewards[a] == final[a]["reward"] == infos[a]["reward"], (a, rewards[a], final[a])
        assert infos[a] == final[a]["info"], (a, infos[a], final[a]["info"])
        assert sorted(infos[a]["credit"]) == sorted(allocators), infos[a]["credit"]
    result["parallel_credit"] = {"scenario": name, "agents": len(rewards)}
    par.close()
    aec.close()

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
