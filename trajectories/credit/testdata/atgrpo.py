"""AT-GRPO's advantages recomputed from a sample file, independently of troupe.

Zhao et al., "Stronger Together: On-Policy Reinforcement Learning for
Collaborative LLMs" (arXiv 2510.11062), Algorithm 1: at turn t of agent i of
environment e, K candidates are sampled from the same prompt; the group key is
(e, i, t); candidate c is rewarded r_c = alpha * r_team + r_local, and its
advantage is GRPO's normalisation within the group,

    A_c = (r_c - mean(r)) / (std(r) + eps),   std with K - 1 (torch.std).

MAGRPO (Liu et al., arXiv 2508.04652): A_c = R_c - mean(R) over the same
groups, R_c the candidate's team reward; with std, divided as above.

Usage: atgrpo.py SAMPLES.jsonl ALPHA K
Reads troupe's flat samples (one JSON object a line), groups them by
(rollout_id, agent, turn), checks that every group has K candidates that
share their prompt (text and token ids), recomputes r_c from the candidates'
tree_team and tree_local, and the advantages from r_c, and compares them
with the rewards troupe wrote under "at-grpo" and "magrpo:std=true". Exits 1
on any difference, printing it; prints a summary otherwise.
"""

import json
import math
import sys
from collections import OrderedDict

EPS = 1e-6


def advantages(rewards, std):
    n = len(rewards)
    if n < 2:
        return [0.0] * n
    mean = sum(rewards) / n
    if not std:
        return [r - mean for r in rewards]
    sd = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    if sd + EPS == 0:
        return [0.0] * n
    return [(r - mean) / (sd + EPS) for r in rewards]


def main():
    path, alpha, k = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    groups = OrderedDict()
    with open(path) as f:
        for line in f:
            s = json.loads(line)
            md = s["metadata"]
            if "tree_candidate" not in md:
                continue
            key = (s["rollout_id"], md["agent"], md["turn"])
            groups.setdefault(key, []).append(s)
    problems = []
    checked = 0
    for key, g in groups.items():
        if [s["metadata"]["tree_candidate"] for s in g] != list(range(k)):
            problems.append(f"{key}: candidates {[s['metadata']['tree_candidate'] for s in g]}, want 0..{k-1}")
            continue
        if sum(1 for s in g if s["metadata"]["tree_chosen"]) != 1:
            problems.append(f"{key}: not exactly one chosen candidate")
        prompts = {json.dumps(s["prompt"], sort_keys=True) for s in g}
        if len(prompts) != 1:
            problems.append(f"{key}: the candidates' prompts differ")
        ids = {json.dumps(s.get("tokens", [])[: len(s.get("tokens", [])) - s.get("response_length", 0)]) for s in g}
        if len(ids) != 1:
            problems.append(f"{key}: the candidates' prompt token ids differ")
        r = [alpha * s["metadata"]["tree_team"] + s["metadata"]["tree_local"] for s in g]
        for s, rc in zip(g, r):
            if s["metadata"]["tree_reward"] != rc:
                problems.append(f"{key}: tree_reward {s['metadata']['tree_reward']} != alpha*team+local {rc}")
        team = [s["metadata"]["tree_team"] for s in g]
        for name, want in (("at-grpo", advantages(r, True)), ("magrpo:std=true", advantages(team, True))):
            for s, a in zip(g, want):
                got = s["reward"][name]
                if abs(got - a) > 1e-9 * max(1.0, abs(a)):
                    problems.append(f"{key} candidate {s['metadata']['tree_candidate']}: {name} {got}, recomputed {a}")
        checked += 1
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    if checked == 0:
        print("no tree-sampled groups in", path)
        sys.exit(1)
    print(f"{checked} groups of {k} candidates: prompts shared, advantages equal")


main()
