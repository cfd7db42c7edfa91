"""Checks troupe_env's vector environment and feature observations.

    PYTHONPATH=python PYENV_E2E_PYTHON python/tests/vector_check.py URL OUT.json

against a running `troupe env-serve` at URL. It runs PettingZoo's api_test and
parallel_api_test on the AEC and Parallel environments opened with
features=True (numeric observations, state()), then steps vector environments
(tictactoe with features, negotiation with view bytes, blotto by team reward,
El Farol by difference credit)
with a random agent over the masks, checking the arrays' shapes, bounds, masks
and autoreset, and writes the finished episodes' seeds and moves to OUT.json
for the caller to replay through `troupe run` and compare the records.
"""

import json
import sys
import warnings

import numpy as np
from pettingzoo.test import api_test, parallel_api_test

from troupe_env.pettingzoo import TroupeAECEnv, TroupeParallelEnv
from troupe_env.vector import TroupeVectorEnv

FEATURES = [
    ("tictactoe", {}),
    ("elfarol", {"agents": "5", "nights": "3"}),
    ("blotto", {"n": "2", "fields": "3"}),
]

VECTORS = [
    ("tictactoe", {}, {}),
    ("negotiation", {}, {"view_bytes": 256}),
    ("blotto", {"n": "2", "fields": "3"}, {"reward": "team", "final_observations": True}),
    ("elfarol", {"agents": "4", "nights": "2"}, {"reward": "difference", "allocators": ["team", "difference"]}),
]


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def vector_episodes(url, name, params, opts, rid, steps=12, num_envs=6):
    env = TroupeVectorEnv(name, num_envs, params, base_url=url, seed=5, rollout_id=rid, **opts)
    ne, na = env.num_envs, env.num_agents
    rng = np.random.default_rng(3)
    obs, infos = env.reset()
    check(obs.shape[:2] == (ne, na), f"{name}: obs shape {obs.shape}")
    check(infos["action_mask"].shape == (ne, na, env.num_actions), f"{name}: mask shape")
    playing = {}
    for e, seed, r in zip(infos["started"], infos["seed"], infos["rollout_id"]):
        playing[int(e)] = {"seed": int(seed), "rollout_id": int(r), "moves": {a: [] for a in env.possible_agents}}
    done = []
    for _ in range(steps):
        masks, acting = infos["action_mask"], infos["acting"]
        check(((masks.sum(axis=2) > 0) == acting).all(), f"{name}: masks for exactly the acting agents")
        actions = env.sample_actions(rng)
        for e, a in zip(*np.nonzero(acting)):
            playing[int(e)]["moves"][env.possible_agents[a]].append(env.action_sets[a][actions[e, a]])
        obs, rewards, term, trunc, infos = env.step(actions)
        check(rewards.shape == (ne, na) and term.shape == (ne, na), f"{name}: reward/termination shapes")
        if env.features:
            sp = env.single_observation_space(0)
            check(((obs >= sp.low.min()) & (obs <= sp.high.max())).all(), f"{name}: observations within bounds")
            check(infos["state"].shape == (ne,) + env.state_shape, f"{name}: state shape")
        ended = np.nonzero(term[:, 0] | trunc[:, 0])[0]
        check((ended == np.nonzero(infos.get("_final", np.zeros(ne, bool)))[0]).all(), f"{name}: _final marks the ended envs")
        for e in ended:
            p = playing.pop(int(e))
            p["status"] = infos["final_info"][e]["status"]
            check(p["rollout_id"] == infos["final_info"][e]["rollout_id"], f"{name}: rollout ids")
            if name == "tictactoe":
                check(rewards[e].sum() == 0, "tictactoe is zero-sum")
            if opts.get("reward") == "team":
                check(np.isclose(rewards[e].sum(), na / 2), "blotto's sides' rewards sum to 1 a side")
            if opts.get("reward") == "difference":
                fi = infos["final_info"][e]
                check(np.allclose(rewards[e], fi["credit"]["difference"]), "the reward is the difference credit")
                check(np.allclose(fi["credit"]["team"], fi["side_reward"]), "team credit is the side reward")
            if opts.get("final_observations"):
                check("final_observation" in infos and "final_state" in infos, f"{name}: final observations")
            entry = {"scenario": name, "params": params, "allocators": opts.get("allocators", []),
                     **{k: p[k] for k in ("seed", "rollout_id", "moves")}}
            if "credit" in infos["final_info"][e]:
                entry["credit"] = {k: [float(x) for x in v] for k, v in infos["final_info"][e]["credit"].items()}
            done.append(entry)
        for e, seed, r in zip(infos["started"], infos["seed"], infos["rollout_id"]):
            playing[int(e)] = {"seed": int(seed), "rollout_id": int(r), "moves": {a: [] for a in env.possible_agents}}
    check(len(done) > 0, f"{name}: no episode ended")
    env.close()
    return done


def main():
    url, out = sys.argv[1], sys.argv[2]
    result = {"api_test": [], "parallel_api_test": [], "episodes": []}
    for name, params in FEATURES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = TroupeAECEnv(name, params, base_url=url, features=True)
            api_test(env, num_cycles=30)
            env.reset(seed=1)
            check(env.state().shape == env.state_space.shape, f"{name}: state()")
            env.close()
            par = TroupeParallelEnv(name, params, base_url=url, features=True)
            parallel_api_test(par, num_cycles=30)
            par.close()
        result["api_test"].append(name)
        result["parallel_api_test"].append(name)
    rid = 5000
    for name, params, opts in VECTORS:
        result["episodes"] += vector_episodes(url, name, params, opts, rid)
        rid += 1000
    with open(out, "w") as f:
        json.dump(result, f)
    print("vector_check: passed,", len(result["episodes"]), "episodes")


if __name__ == "__main__":
    main()
