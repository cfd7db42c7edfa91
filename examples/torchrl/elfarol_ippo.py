"""TorchRL's PPO learns El Farol through troupe_env: independent PPO (IPPO),
one policy and one critic per patron, every piece TorchRL's own.

    PYTHONPATH=python python examples/torchrl/elfarol_ippo.py --troupe out/troupe \\
        --reward team --reward difference --seeds 5 --out out/marl

The environment is troupe's El Farol bar (N patrons pick one of K nights;
the week is worth G = Σ_k φ(x_k), φ(x) = x·e^(−x/c)), played on a `troupe
env-serve` that the script starts (--troupe) or finds (--base-url), through
troupe_env.pettingzoo's Parallel environment wrapped by TorchRL's
PettingZooWrapper. What learns is TorchRL's, unmodified: MultiAgentMLP
(share_params=False: a network per patron, as independent learners),
ProbabilisticActor over a MaskedCategorical, ClipPPOLoss with its GAE, a
Collector and a replay buffer; the loop is TorchRL's multi-agent PPO
tutorial's. The script adds only the choice of reward (--reward: which
allocator's credit the environment rewards with) and the measurements.

For each reward and seed it trains for --weeks weeks and records, per
batch, G, the mean reward per patron, and G over the exact optimum G*
(dynamic programming over nights); a uniform random policy's G, measured
over as many weeks, is the baseline. It writes OUT/curves.csv (one row per
reward, seed and batch), OUT/finals.csv (the last --final weeks of each
run) and OUT/summary.json (means with 95% intervals over seeds, the paired
differences between rewards), and prints the summary.

Needs torch, torchrl, pettingzoo, gymnasium and numpy
(python/requirements/marl.txt: `make trainers`). Runs on CPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.data.replay_buffers import ReplayBuffer
from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
from torchrl.data.replay_buffers.storages import LazyTensorStorage
from torchrl.envs.libs.pettingzoo import PettingZooWrapper
from torchrl.modules import MaskedCategorical, MultiAgentMLP, ProbabilisticActor
from torchrl.objectives import ClipPPOLoss, ValueEstimators

from troupe_env.pettingzoo import parallel_env
from troupe_env.wrappers import numeric_infos

GROUP = "patron"

# The rewards a patron can learn from. "score" is the environment's
# default reward, the patron's own score φ(x_k) (the "local" reward of the
# El Farol literature); the others are credit allocators the environment
# is opened with (REWARDS[name]: the reset fields that select them).
REWARDS: Dict[str, dict] = {
    "score": {},
    "team": {"reward": "team"},
    "difference": {"reward": "difference"},
}


def phi(x: float, c: float) -> float:
    return x * math.exp(-x / c)


def optimum(n: int, k: int, c: float) -> float:
    """G*: the best Σ_k φ(x_k) over attendances x_1..x_K summing to n (every
    patron goes out: the null action, home, is not offered)."""
    best = [0.0] + [-math.inf] * n  # best[m]: m patrons over the nights so far
    for _ in range(k):
        best = [max(best[m - x] + phi(x, c) for x in range(m + 1)) for m in range(n + 1)]
    return best[n]


def team_utility(actions: torch.Tensor, k: int, c: float) -> torch.Tensor:
    """G of each week, from the nights chosen (actions: [..., N])."""
    counts = torch.nn.functional.one_hot(actions.long(), k).sum(-2).double()
    return (counts * torch.exp(-counts / c)).sum(-1)


class Server:
    """A `troupe env-serve` on a free loopback port, for the run's life."""

    def __init__(self, binary: str):
        self.proc = subprocess.Popen([binary, "env-serve", "--addr", "127.0.0.1:0", "--max-retained", "16"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        m = re.search(r"environment server on (\S+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"{binary} env-serve did not start: {line.strip()!r}")
        addr = m.group(1)
        self.base_url = addr if addr.startswith("http") else "http://" + addr

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def make_env(args, reward: str, seed: int) -> PettingZooWrapper:
    params = {"agents": args.agents, "nights": args.nights, "capacity": args.capacity}
    pz = parallel_env("elfarol", params=params, base_url=args.base_url, view_bytes=args.view_bytes,
                      **REWARDS[reward])
    env = PettingZooWrapper(numeric_infos(pz), group_map={GROUP: list(pz.possible_agents)}, use_mask=True,
                            categorical_actions=True, seed=seed)
    return env


def random_baseline(args) -> List[float]:
    """G of --weeks weeks of patrons picking nights uniformly."""
    env = make_env(args, "score", args.seed_base)
    g = []
    torch.manual_seed(args.seed_base)
    for _ in range(args.random_weeks):
        td = env.rollout(1)  # TorchRL's random policy: the action spec's rand
        g.append(float(team_utility(td[GROUP, "action"], args.nights, args.capacity).mean()))
    env.close()
    return g


def train(args, reward: str, seed: int, log) -> List[dict]:
    torch.manual_seed(seed)
    env = make_env(args, reward, seed)
    n = args.agents
    obs_key = (GROUP, "observation", "observation")

    # The view's bytes, scaled: a constant for El Farol (every patron sees
    # the same week), so each patron's network learns its own distribution
    # over nights from its bias, as a tabular independent learner would.
    scale = TensorDictModule(lambda x: x.float() / 255.0, in_keys=[obs_key], out_keys=[(GROUP, "x")])
    actor_net = TensorDictModule(
        MultiAgentMLP(n_agent_inputs=args.view_bytes, n_agent_outputs=args.nights, n_agents=n, centralized=False,
                      share_params=False, depth=1, num_cells=args.cells, activation_class=nn.Tanh),
        in_keys=[(GROUP, "x")], out_keys=[(GROUP, "logits")])
    from tensordict.nn import TensorDictSequential
    policy = ProbabilisticActor(
        module=TensorDictSequential(scale, actor_net),
        spec=env.full_action_spec[GROUP, "action"],
        in_keys={"logits": (GROUP, "logits"), "mask": (GROUP, "action_mask")},
        out_keys=[(GROUP, "action")],
        distribution_class=MaskedCategorical,
        return_log_prob=True,
    )
    critic = TensorDictSequential(scale, TensorDictModule(
        MultiAgentMLP(n_agent_inputs=args.view_bytes, n_agent_outputs=1, n_agents=n, centralized=False,
                      share_params=False, depth=1, num_cells=args.cells, activation_class=nn.Tanh),
        in_keys=[(GROUP, "x")], out_keys=[(GROUP, "state_value")]))

    collector = Collector(env, policy, frames_per_batch=args.batch, total_frames=args.weeks)
    buffer = ReplayBuffer(storage=LazyTensorStorage(args.batch), sampler=SamplerWithoutReplacement(),
                          batch_size=args.minibatch)
    loss = ClipPPOLoss(actor_network=policy, critic_network=critic, clip_epsilon=args.clip,
                       entropy_coeff=args.entropy, normalize_advantage=True)
    loss.set_keys(reward=(GROUP, "reward"), action=(GROUP, "action"), value=(GROUP, "state_value"),
                  done=(GROUP, "done"), terminated=(GROUP, "terminated"))
    loss.make_value_estimator(ValueEstimators.GAE, gamma=1.0, lmbda=1.0)
    optim = torch.optim.Adam(loss.parameters(), args.lr)

    rows = []
    weeks = 0
    g_star = optimum(args.agents, args.nights, args.capacity)
    for i, data in enumerate(collector):
        g = team_utility(data["next", GROUP, "action"] if ("next", GROUP, "action") in data.keys(True)
                         else data[GROUP, "action"], args.nights, args.capacity)
        r = data["next", GROUP, "reward"]
        weeks += data.numel()
        rows.append({"reward": reward, "seed": seed, "batch": i, "weeks": weeks, "G": float(g.mean()),
                     "G_over_opt": float(g.mean()) / g_star, "mean_reward": float(r.mean())})
        with torch.no_grad():
            loss.value_estimator(data, params=loss.critic_network_params,
                                 target_params=loss.target_critic_network_params)
        buffer.extend(data.reshape(-1))
        for _ in range(args.epochs):
            for _ in range(max(1, args.batch // args.minibatch)):
                vals = loss(buffer.sample())
                total = vals["loss_objective"] + vals["loss_critic"] + vals["loss_entropy"]
                total.backward()
                torch.nn.utils.clip_grad_norm_(loss.parameters(), args.max_grad_norm)
                optim.step()
                optim.zero_grad()
        collector.update_policy_weights_()
        if i % 10 == 0:
            log(f"{reward} seed {seed} week {weeks}: G {rows[-1]['G']:.3f} ({rows[-1]['G_over_opt']:.3f} of G*), "
                f"mean reward {rows[-1]['mean_reward']:.3f}")
    collector.shutdown()
    env.close()
    return rows


def interval(xs: List[float]) -> dict:
    """Mean and a 95% t interval."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return {"mean": m, "lo": m, "hi": m, "n": len(xs)}
    t = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}.get(len(xs), 2.0)
    h = t * statistics.stdev(xs) / math.sqrt(len(xs))
    return {"mean": m, "lo": m - h, "hi": m + h, "n": len(xs)}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--troupe", help="the troupe binary: the script serves the environment with it")
    p.add_argument("--base-url", help="a running `troupe env-serve` (instead of --troupe)")
    p.add_argument("--reward", action="append", choices=sorted(REWARDS), help="reward(s) to learn from (repeatable)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seed-base", type=int, default=1)
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--nights", type=int, default=7)
    p.add_argument("--capacity", type=float, default=6)
    p.add_argument("--weeks", type=int, default=3000, help="weeks (episodes) of training per run")
    p.add_argument("--batch", type=int, default=30, help="weeks per PPO batch")
    p.add_argument("--minibatch", type=int, default=10)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.03)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--entropy", type=float, default=0.0)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--cells", type=int, default=16)
    p.add_argument("--view-bytes", type=int, default=8)
    p.add_argument("--random-weeks", type=int, default=200)
    p.add_argument("--final", type=int, default=300, help="weeks at the end a run's final G is the mean of")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--out", default="out/marl")
    args = p.parse_args(argv)
    rewards = args.reward or ["score"]
    torch.set_num_threads(args.threads)
    if torch.cuda.is_available():
        print("note: a GPU is visible; this run stays on the CPU", file=sys.stderr)

    server = None
    if args.base_url is None:
        if not args.troupe:
            p.error("give --troupe BINARY (or --base-url of a running troupe env-serve)")
        server = Server(args.troupe)
        args.base_url = server.base_url
    os.makedirs(args.out, exist_ok=True)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    try:
        t0 = time.process_time()
        rand = random_baseline(args)
        g_star = optimum(args.agents, args.nights, args.capacity)
        log(f"random policy: G {statistics.fmean(rand):.3f} ({statistics.fmean(rand) / g_star:.3f} of G* = {g_star:.3f})")
        rows: List[dict] = []
        for reward in rewards:
            for s in range(args.seeds):
                rows += train(args, reward, args.seed_base + s, log)
        cpu = time.process_time() - t0
    finally:
        if server:
            server.close()

    with open(os.path.join(args.out, "curves.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    finals: Dict[str, Dict[int, float]] = {}
    for reward in rewards:
        for s in range(args.seeds):
            seed = args.seed_base + s
            mine = [r for r in rows if r["reward"] == reward and r["seed"] == seed]
            tail = [r for r in mine if r["weeks"] > mine[-1]["weeks"] - args.final]
            finals.setdefault(reward, {})[seed] = statistics.fmean(r["G_over_opt"] for r in tail)
    with open(os.path.join(args.out, "finals.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["reward", "seed", "G_over_opt"])
        for reward, by in finals.items():
            for seed, v in by.items():
                w.writerow([reward, seed, f"{v:.6f}"])
    summary = {
        "command": " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])),
        "agents": args.agents, "nights": args.nights, "capacity": args.capacity, "weeks": args.weeks,
        "G_star": g_star, "random_G_over_opt": interval([g / g_star for g in rand]),
        "final_G_over_opt": {r: interval(list(by.values())) for r, by in finals.items()},
        "paired": {f"{a}-{b}": interval([finals[a][s] - finals[b][s] for s in finals[a]])
                   for i, a in enumerate(rewards) for b in rewards[i + 1:]},
        "cpu_seconds": cpu, "torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
