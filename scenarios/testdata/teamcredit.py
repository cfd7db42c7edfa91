"""Per-side credit of a two-team game recomputed by brute force, independently of troupe.

Usage: teamcredit.py EPISODES.jsonl SAMPLES.jsonl VALUES.json

EPISODES.jsonl is troupe's episode file (troupe.episode/v2): per episode its
seats with their team, the teams' names, the score's team rewards, its turns
(the k-th emitted turn is the k-th sample) and its credit: one list of values
per allocator, in the order
    team, equal-split, difference, leave-one-out, shapley, dr-grpo, magrpo
(difference with the null action, leave-one-out and shapley with absent
seats, all three re-simulating the other players).

VALUES.json holds, per rollout_id, what a re-simulation of the episode gives
each team when only some seats take part: "present"[mask] = [G_0, G_1, ...]
with bit i of mask set when seat i is present (the others absent), and
"null"[i] = [G_0, G_1, ...] with seat i playing the null action. The script
decides itself which of them each allocator needs:

  team          r_i = G_T(z), T the team of seat i
  equal-split   r_i = G_T(z) / |T|
  difference    D_i = G_T(z) - G_T(z, i playing the null action)
  leave-one-out r_i = G_T(N) - G_T(N without i)
  shapley       the mean over every ordering of T's members of i's marginal
                contribution to v_T(S) = G_T(S and every seat of the other
                teams present, T's other members absent)
  dr-grpo       R - mean R over the units (episode, seat) of the same group,
                role and team, R = G_T
  magrpo        G_T(e) - mean over the group's episodes of G_T

The samples' metadata must name the seat's team and carry G_T as
team_reward. Exits 1 on any difference, printing them; prints a summary
otherwise.
"""

import itertools
import json
import sys
from collections import defaultdict

ALLOCATORS = ["team", "equal-split", "difference", "leave-one-out", "shapley", "dr-grpo", "magrpo"]
TOL = 1e-9


def shapley(members, value):
    """Shapley values of members under value(frozenset), by enumerating orderings."""
    phi = {i: 0.0 for i in members}
    orders = list(itertools.permutations(members))
    for order in orders:
        before = frozenset()
        for i in order:
            phi[i] += value(before | {i}) - value(before)
            before = before | {i}
    return {i: p / len(orders) for i, p in phi.items()}


def main():
    ep_path, samples_path, values_path = sys.argv[1:4]
    with open(values_path) as f:
        values = json.load(f)
    episodes = [json.loads(line) for line in open(ep_path)]
    samples = defaultdict(list)
    for line in open(samples_path):
        s = json.loads(line)
        samples[s["rollout_id"]].append(s)

    problems = []
    want = {}  # (rollout_id, allocator) -> per sample values
    units = []  # dr-grpo: (rollout_id, sample index, group, role, team, R)
    by_group = defaultdict(list)  # magrpo: group -> episodes
    checked = 0
    for ep in episodes:
        rid = ep["rollout_id"]
        assert ep["credit"]["allocators"] and len(ep["credit"]["allocators"]) == len(ALLOCATORS), ep["credit"]["allocators"]
        teams = ep["teams"]
        seats = ep["seats"]
        n = len(seats)
        team_of = [teams.index(s["team"]) for s in seats]
        G = ep["score"]["teams"]
        members = {t: [i for i in range(n) if team_of[i] == t] for t in range(len(teams))}
        v = values[str(rid)]
        present = v["present"]
        full = (1 << n) - 1

        def value_of(t):
            others = sum(1 << i for i in range(n) if team_of[i] != t)

            def value(S):
                mask = others | sum(1 << i for i in S)
                if mask == full:
                    return G[t]  # v(N) is the episode as played
                return present[mask][t]
            return value

        phi = {}
        for t, m in members.items():
            phi.update(shapley(m, value_of(t)))
        per_seat = {
            "team": [G[team_of[i]] for i in range(n)],
            "equal-split": [G[team_of[i]] / len(members[team_of[i]]) for i in range(n)],
            "difference": [G[team_of[i]] - v["null"][i][team_of[i]] for i in range(n)],
            "leave-one-out": [G[team_of[i]] - present[full & ~(1 << i)][team_of[i]] for i in range(n)],
            "shapley": [phi[i] for i in range(n)],
        }
        sample_seats = [t["seat"] for t in ep["turns"] if t["emit"]]
        for name, vals in per_seat.items():
            want[(rid, name)] = [vals[i] for i in sample_seats]
        for k, i in enumerate(sample_seats):
            units.append((rid, k, i, ep["group_index"], seats[i]["role"], seats[i]["team"], G[team_of[i]]))
        by_group[ep["group_index"]].append(ep)

        # The samples say the seat's team and its team's reward.
        ss = samples[rid]
        if len(ss) != len(sample_seats):
            problems.append(f"episode {rid}: {len(ss)} samples, {len(sample_seats)} emitted turns")
            continue
        for k, s in enumerate(ss):
            i = sample_seats[k]
            md = s["metadata"]
            if md["agent"] != seats[i]["id"] or md.get("team") != seats[i]["team"] or md["team_reward"] != G[team_of[i]]:
                problems.append(f"episode {rid} sample {k}: agent {md['agent']} team {md.get('team')} team_reward {md['team_reward']}, want {seats[i]['id']} {seats[i]['team']} {G[team_of[i]]}")

    # dr-grpo: units of one (group, role, team) across the group's episodes.
    dr = defaultdict(list)
    seen_unit = {}
    for rid, k, i, g, role, team, r in units:
        key = (rid, i)
        if key not in seen_unit:
            seen_unit[key] = (g, role, team, r)
            dr[(g, role, team)].append(r)
    for rid, k, i, g, role, team, r in units:
        rs = dr[(g, role, team)]
        adv = 0.0 if len(rs) < 2 else r - sum(rs) / len(rs)
        want.setdefault((rid, "dr-grpo"), []).append(adv)
    # magrpo: per side, the episodes of a group.
    for g, eps in by_group.items():
        for ep in eps:
            teams = ep["teams"]
            sample_seats = [t["seat"] for t in ep["turns"] if t["emit"]]
            out = []
            for i in sample_seats:
                t = teams.index(ep["seats"][i]["team"])
                rs = [e["score"]["teams"][t] for e in eps]
                out.append(0.0 if len(rs) < 2 else ep["score"]["teams"][t] - sum(rs) / len(rs))
            want[(ep["rollout_id"], "magrpo")] = out

    for ep in episodes:
        rid = ep["rollout_id"]
        for a, name in enumerate(ALLOCATORS):
            got = ep["credit"]["values"][a]
            w = want[(rid, name)]
            if len(got) != len(w):
                problems.append(f"episode {rid} {name}: {len(got)} values, want {len(w)}")
                continue
            for k, (x, y) in enumerate(zip(got, w)):
                checked += 1
                if abs(x - y) > TOL * max(1.0, abs(y)):
                    problems.append(f"episode {rid} {name} sample {k}: troupe {x!r}, brute force {y!r}")
    if problems:
        print("\n".join(problems[:40]))
        print(f"{len(problems)} differences")
        sys.exit(1)
    nonzero = sum(1 for (rid, name), w in want.items() if name == "shapley" for x in w if abs(x) > TOL)
    print(f"{len(episodes)} episodes, {checked} values of {len(ALLOCATORS)} allocators agree; {nonzero} non-zero Shapley shares")


if __name__ == "__main__":
    main()
