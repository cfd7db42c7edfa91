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
import signal
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

# The rewards a patron can learn from: "score", the environment's default
# reward, the patron's own score φ(x_k) (the "local" reward of the El Farol
# literature), or one of troupe's credit allocators, which the environment
# is opened with (reward=NAME): "team" (every patron gets G), "difference"
# (G minus G with the patron at home: φ(x_k) − φ(x_k − 1)), or any other.
REWARDS = ["score", "team", "difference", "equal-split", "shapley"]


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


def make_env(args, reward: str, seed: int, allocators: Optional[List[str]] = None):
    """El Farol as TorchRL sees it: troupe_env's Parallel environment,
    rewarding with reward's credit, its infos cut to the numbers the
    script checks (the team reward G and each allocator's credit: what
    troupe computed, not the script), under TorchRL's PettingZooWrapper;
    or, with --env vector, --batch episodes stepped in one round trip
    (troupe_env.vector) under troupe_env.torchrl's EnvBase."""
    params = {"agents": args.agents, "nights": args.nights, "capacity": args.capacity}
    if args.env == "vector":
        from troupe_env.torchrl import TorchRLVectorEnv
        from troupe_env.vector import TroupeVectorEnv
        kw = {"allocators": allocators} if allocators else {}
        vec = TroupeVectorEnv("elfarol", args.batch, params=params, base_url=args.base_url, seed=seed,
                              reward=reward, view_bytes=args.view_bytes, **kw)
        return TorchRLVectorEnv(vec, group=GROUP)
    kw = {} if reward == "score" else {"reward": reward}
    if allocators:
        kw["allocators"] = allocators
    pz = parallel_env("elfarol", params=params, base_url=args.base_url, view_bytes=args.view_bytes, **kw)
    keys = {"team": math.nan, **{f"credit.{a}": math.nan for a in (allocators or []) + kw.get("reward", "").split() if a}}
    return PettingZooWrapper(numeric_infos(pz, keys), group_map={GROUP: list(pz.possible_agents)}, use_mask=True,
                             categorical_actions=True, seed=seed)


def checked_g(data, args, reward: Optional[str]) -> torch.Tensor:
    """G of each week in data, from the nights chosen, checked against the
    team reward troupe put in infos, and the reward against reward's
    credit there."""
    nxt = data["next", GROUP]
    g = team_utility(data[GROUP, "action"], args.nights, args.capacity)
    every = nxt["info", "team"].double()  # [weeks, patrons]: every patron's infos
    team = every[..., 0]
    if not (every == team.unsqueeze(-1)).all() or not torch.allclose(g, team, rtol=1e-5):
        raise AssertionError(f"infos' team reward {team.tolist()[:4]} is not G {g.tolist()[:4]}")
    if reward not in (None, "score") and ("info", "credit." + reward) in nxt.keys(True):
        got, want = nxt["reward"].double(), nxt["info", "credit." + reward].double().unsqueeze(-1)
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
            raise AssertionError(f"the reward is not infos' {reward} credit")
    return g


def random_baseline(args, rewards: List[str]) -> Dict[str, List[float]]:
    """Per week of patrons picking nights uniformly (TorchRL's random
    policy: the action spec's rand), G and each reward's mean over the
    patrons."""
    allocs = [r for r in rewards if r != "score"]
    env = make_env(args, "score", args.seed_base, allocs)
    out: Dict[str, List[float]] = {"G": [], **{r: [] for r in rewards}}
    torch.manual_seed(args.seed_base)
    for _ in range(max(1, args.random_weeks // env.batch_size.numel())):
        td = env.rollout(1)
        out["G"] += checked_g(td, args, None).reshape(-1).tolist()
        for r in rewards:
            key = "reward" if r == "score" else ("info", "credit." + r)
            if key in td["next", GROUP].keys(True):
                out[r].append(float(td["next", GROUP][key].mean()))
    env.close()
    return out


def train(args, reward: str, seed: int, log) -> List[dict]:
    torch.manual_seed(seed)
    env = make_env(args, reward, seed)
    n = args.agents
    # PettingZoo's observation is a dict (the view's bytes, the mask);
    # the vector's, the scenario's features where it declares them.
    obs_key = (GROUP, "observation", "observation") if args.env == "pettingzoo" else (GROUP, "observation")
    obs_spec = env.observation_spec[obs_key]
    n_in, div = obs_spec.shape[-1], 255.0 if obs_spec.dtype == torch.uint8 else 1.0

    # The view's bytes, scaled: a constant for El Farol (every patron sees
    # the same week), so each patron's network learns its own distribution
    # over nights from its bias, as a tabular independent learner would.
    scale = TensorDictModule(lambda x: x.float() / div, in_keys=[obs_key], out_keys=[(GROUP, "x")])
    actor_net = TensorDictModule(
        MultiAgentMLP(n_agent_inputs=n_in, n_agent_outputs=args.nights, n_agents=n, centralized=False,
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
        MultiAgentMLP(n_agent_inputs=n_in, n_agent_outputs=1, n_agents=n, centralized=False,
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
        g = checked_g(data, args, reward)
        r = data["next", GROUP, "reward"]
        weeks += data.numel()
        rows.append({"reward": reward, "seed": seed, "batch": i, "weeks": weeks, "G": round(float(g.mean()), 6),
                     "G_over_opt": round(float(g.mean()) / g_star, 6), "mean_reward": round(float(r.mean()), 6)})
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


def curve(rows: List[dict], rewards: List[str], batch: int, g_star: float) -> Dict[str, List[dict]]:
    """The learning curve over seeds: per reward, at every tenth of the
    run, G/G* and the mean reward per patron over the preceding tenth's
    batches (a mean per seed), with intervals over seeds."""
    out: Dict[str, List[dict]] = {}
    for reward in rewards:
        mine = [r for r in rows if r["reward"] == reward]
        last = max(r["batch"] for r in mine)
        step = max(1, (last + 1) // 10)
        points = []
        for end in range(step - 1, last + 1, step):
            seeds: Dict[int, List[dict]] = {}
            for r in mine:
                if end - step < r["batch"] <= end:
                    seeds.setdefault(r["seed"], []).append(r)
            points.append({"weeks": (end + 1) * batch,
                           "G_over_opt": interval([statistics.fmean(r["G_over_opt"] for r in rs) for rs in seeds.values()]),
                           "mean_reward": interval([statistics.fmean(r["mean_reward"] for r in rs) for rs in seeds.values()])})
        out[reward] = points
    return out


COLOURS = {"team": "#d62728", "difference": "#1f77b4", "score": "#2ca02c", "equal-split": "#9467bd", "shapley": "#8c564b"}


def plot(rows: List[dict], rewards: List[str], random_g: dict, title: str, path: str) -> None:
    """An SVG of G/G* per batch: for each reward the mean over seeds and its
    95% interval, and the random policy's level (standard library only)."""
    w, h, left, right, top, bottom = 640, 360, 56, 120, 28, 44
    weeks = sorted({r["weeks"] for r in rows})
    x0, x1 = 0, weeks[-1]
    lines = []
    lo_all, hi_all = random_g["lo"], random_g["hi"]
    for reward in rewards:
        pts = []
        for wk in weeks:
            iv = interval([r["G_over_opt"] for r in rows if r["reward"] == reward and r["weeks"] == wk])
            pts.append((wk, iv))
            lo_all, hi_all = min(lo_all, iv["lo"]), max(hi_all, iv["hi"])
        lines.append((reward, pts))
    y0, y1 = math.floor(lo_all * 10) / 10, min(1.0, math.ceil(hi_all * 10) / 10)
    sx = lambda x: left + (x - x0) / (x1 - x0) * (w - left - right)
    sy = lambda y: top + (y1 - y) / (y1 - y0) * (h - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="16" font-size="12">{title}</text>']
    for i in range(int(round((y1 - y0) * 10)) + 1):
        y = y0 + i / 10
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.1f}</text>')
    tick = next(t for t in (50, 100, 200, 250, 500, 1000, 2000, 5000, 10**9) if x1 / t <= 6)
    for x in range(0, x1 + 1, tick):
        out.append(f'<text x="{sx(x):.1f}" y="{h - bottom + 16}" text-anchor="middle">{x}</text>')
    out.append(f'<text x="{(left + w - right) / 2}" y="{h - 8}" text-anchor="middle">weeks (episodes) of training</text>')
    out.append(f'<text x="14" y="{(top + h - bottom) / 2}" transform="rotate(-90 14 {(top + h - bottom) / 2})" '
               f'text-anchor="middle">G / G*</text>')
    ry = sy(random_g["mean"])
    out.append(f'<line x1="{left}" x2="{w - right}" y1="{ry:.1f}" y2="{ry:.1f}" stroke="#555" stroke-dasharray="4,3"/>')
    # The labels at the right end, each at its line's last value, moved
    # apart where they would overlap.
    labels = sorted([(ry, "random", "#555")] + [(sy(pts[-1][1]["mean"]), r, COLOURS.get(r, "#000")) for r, pts in lines])
    for i in range(1, len(labels)):
        if labels[i][0] - labels[i - 1][0] < 13:
            labels[i] = (labels[i - 1][0] + 13,) + labels[i][1:]
    for y, name, c in labels:
        out.append(f'<text x="{w - right + 6}" y="{y + 4:.1f}" fill="{c}">{name}</text>')
    for reward, pts in lines:
        c = COLOURS.get(reward, "#000")
        band = [f"{sx(x):.1f},{sy(iv['hi']):.1f}" for x, iv in pts] + [f"{sx(x):.1f},{sy(iv['lo']):.1f}" for x, iv in reversed(pts)]
        out.append(f'<polygon points="{" ".join(band)}" fill="{c}" fill-opacity="0.18" stroke="none"/>')
        mean = " ".join(f"{sx(x):.1f},{sy(iv['mean']):.1f}" for x, iv in pts)
        out.append(f'<polyline points="{mean}" fill="none" stroke="{c}" stroke-width="1.6"/>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


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
    p.add_argument("--reward", action="append", choices=REWARDS, help="reward(s) to learn from (repeatable)")
    p.add_argument("--env", choices=["pettingzoo", "vector"], default="pettingzoo",
                   help="pettingzoo: troupe_env.pettingzoo under TorchRL's PettingZooWrapper, a week per round trip; "
                        "vector: troupe_env.vector under troupe_env.torchrl, --batch weeks per round trip")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seed-base", type=int, default=1)
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--nights", type=int, default=7)
    p.add_argument("--capacity", type=float, default=6)
    p.add_argument("--weeks", type=int, default=1200, help="weeks (episodes) of training per run")
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

    # A SIGTERM (make interrupted, a timeout) exits through the finally
    # below, which stops the server this script started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
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
        rand = random_baseline(args, rewards)
        g_star = optimum(args.agents, args.nights, args.capacity)
        log(f"random policy: G {statistics.fmean(rand['G']):.3f} ({statistics.fmean(rand['G']) / g_star:.3f} of G* = {g_star:.3f}); "
            + ", ".join(f"mean {r} reward {statistics.fmean(rand[r]):.4f}" for r in rewards if rand[r]))
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
        "G_star": g_star, "random_G_over_opt": interval([g / g_star for g in rand["G"]]),
        "random_mean_reward": {r: interval(rand[r]) for r in rewards if rand[r]},
        "curve": curve(rows, rewards, args.batch, g_star),
        "final_G_over_opt": {r: interval(list(by.values())) for r, by in finals.items()},
        "paired": {f"{a}-{b}": interval([finals[a][s] - finals[b][s] for s in finals[a]])
                   for i, a in enumerate(rewards) for b in rewards[i + 1:]},
        "env": args.env, "cpu_seconds": cpu, "torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
    }
    plot(rows, rewards, summary["random_G_over_opt"],
         f"TorchRL IPPO on troupe's El Farol (N = {args.agents}, K = {args.nights}, c = {args.capacity:g}), "
         f"{args.seeds} seeds, 95% intervals", os.path.join(args.out, "curves.svg"))
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
