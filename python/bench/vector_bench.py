"""CPU per move of random tic-tac-toe through troupe's vector environment
against PettingZoo's own tictactoe_v3, in the same run.

    python python/bench/vector_bench.py TROUPE_BINARY [--moves N] [--batch B ...] [--out FILE]

(`make bench-vector` runs it with the pinned Python environment.) It starts
`TROUPE_BINARY env-serve` on a loopback port and measures, each in one client
process against the one server:

- pettingzoo: tictactoe_v3's AEC loop, every move PettingZoo's random agent
  (env.action_space(agent).sample(mask)), the process's CPU (user+sys);
- troupe-pz-agent: the vector environment (python/troupe_env/vector.py) at
  each batch size, every acting agent's move drawn by the same random agent
  (the agent's Discrete space's sample(mask)), CPU of the client process and
  of the server process (/proc/PID/stat) together;
- troupe-numpy-agent: the same, every move drawn at once for the batch
  (TroupeVectorEnv.sample_actions: numpy over the masks).

It prints one JSON object: microseconds of CPU per move for each, the
server's share, and the ratio to PettingZoo's (below 1: troupe is cheaper).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import types

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from troupe_env.vector import TroupeVectorEnv  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """The CPU seconds (user+sys) process pid has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def pettingzoo(moves: int, seed: int) -> dict:
    try:
        import pygame  # noqa: F401
    except ImportError:
        # tictactoe_v3 imports pygame for render() only, never called here.
        sys.modules["pygame"] = types.ModuleType("pygame")
    from pettingzoo.classic import tictactoe_v3
    env = tictactoe_v3.env()
    done, episodes, k = 0, 0, seed
    cpu = self_cpu()
    wall = time.perf_counter()
    while done < moves:
        env.reset(seed=k)
        k += 1
        for agent in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            env.step(env.action_space(agent).sample(obs["action_mask"]))
            done += 1
        episodes += 1
    cpu, wall = self_cpu() - cpu, time.perf_counter() - wall
    env.close()
    return {"moves": done, "episodes": episodes, "cpu_us_per_move": 1e6 * cpu / done, "wall_us_per_move": 1e6 * wall / done}


def troupe(url: str, server: int, batch: int, moves: int, seed: int, agent: str) -> dict:
    env = TroupeVectorEnv("tictactoe", batch, base_url=url, seed=seed)
    spaces = [env.single_action_space(a) for a in range(env.num_agents)]
    for s in spaces:
        s.seed(seed)
    rng = np.random.default_rng(seed)
    obs, infos = env.reset()
    done, episodes = 0, 0
    cpu_c, cpu_s, wall = self_cpu(), proc_cpu(server), time.perf_counter()
    while done < moves:
        masks, acting = infos["action_mask"], infos["acting"]
        if agent == "pz":
            actions = np.full((env.num_envs, env.num_agents), -1, np.int32)
            for e, a in zip(*np.nonzero(acting)):
                actions[e, a] = spaces[a].sample(masks[e, a])
        else:
            actions = env.sample_actions(rng)
        done += int(acting.sum())
        obs, rewards, term, trunc, infos = env.step(actions)
        episodes += int(term[:, 0].sum() + trunc[:, 0].sum())
    cpu_c, cpu_s, wall = self_cpu() - cpu_c, proc_cpu(server) - cpu_s, time.perf_counter() - wall
    env.close()
    return {"batch": batch, "moves": done, "episodes": episodes, "cpu_us_per_move": 1e6 * (cpu_c + cpu_s) / done,
            "client_cpu_us_per_move": 1e6 * cpu_c / done, "server_cpu_us_per_move": 1e6 * cpu_s / done,
            "wall_us_per_move": 1e6 * wall / done}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("troupe", help="the troupe binary")
    ap.add_argument("--moves", type=int, default=200_000)
    ap.add_argument("--batch", type=int, action="append")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args()
    batches = args.batch or [16, 256]
    srv = subprocess.Popen([args.troupe, "env-serve", "--addr", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    try:
        line = srv.stderr.readline()
        m = re.search(r"(http://\S+)", line)
        if not m:
            raise SystemExit(f"env-serve did not start: {line}")
        url = m.group(1)
        result = {"moves": args.moves, "pettingzoo": pettingzoo(args.moves, args.seed), "troupe": []}
        for b in batches:
            for agent in ("pz", "numpy"):
                r = troupe(url, srv.pid, b, args.moves, args.seed, agent)
                r["agent"] = "pettingzoo-random" if agent == "pz" else "numpy-random"
                r["ratio_to_pettingzoo"] = r["cpu_us_per_move"] / result["pettingzoo"]["cpu_us_per_move"]
                result["troupe"].append(r)
        # PettingZoo again, last: the machine's load drifts over a run.
        result["pettingzoo_again"] = pettingzoo(args.moves, args.seed + 1)
    finally:
        srv.terminate()
        srv.wait(10)
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
