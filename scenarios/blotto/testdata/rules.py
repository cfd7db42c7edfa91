"""Team Colonel Blotto's rewards recomputed from the rules, independently of troupe.

Usage: rules.py FIELDS EPISODES.jsonl

EPISODES.jsonl is troupe's episode file (troupe.episode/v2) of blotto
episodes with the credit of these allocators, in this order:
    team, individual, difference, difference:sim=resimulate, leave-one-out

From each episode's seats (their teams) and turns (the answer of each
soldier) alone, the script applies docs/experiments/blotto.md's rules:

  - an answer that is a battlefield number 0..FIELDS-1, written as troupe
    writes it, sends the soldier there; anything else keeps it home;
  - a side wins a battlefield with strictly more soldiers there than the
    other side; a tie (an empty battlefield too) is half of one to each;
  - a side's reward is the share of the battlefields it won;
  - a soldier's local reward is its battlefield's outcome for its side
    (1, 1/2, 0), 0 at home;
  - a soldier's difference reward is its side's reward minus the side's
    reward with the soldier home, everybody else as played (the same when
    the others re-simulate: their answers do not depend on the soldier's);
    leave-one-out, with the soldier absent, is the same number.

It checks the recorded team rewards, agent scores and every credit value,
exits 1 on any difference (printing them), and prints a summary otherwise.
"""

import json
import sys

ALLOCATORS = ["team", "individual", "difference", "difference:sim=resimulate", "leave-one-out"]
TOL = 1e-12


def side_rewards(where, team_of, fields):
    """Each side's share of the battlefields, where[i] the battlefield of soldier i or None."""
    counts = [[0] * fields, [0] * fields]
    for i, f in enumerate(where):
        if f is not None:
            counts[team_of[i]][f] += 1
    out = []
    for t in (0, 1):
        won = 0.0
        for f in range(fields):
            mine, theirs = counts[t][f], counts[1 - t][f]
            won += 1.0 if mine > theirs else 0.5 if mine == theirs else 0.0
        out.append(won / fields)
    return out, counts


def main():
    fields = int(sys.argv[1])
    legal = {str(f): f for f in range(fields)}
    problems, checked, pivotal, home = [], 0, 0, 0
    episodes = [json.loads(line) for line in open(sys.argv[2])]
    for ep in episodes:
        rid = ep["rollout_id"]
        if ep["credit"]["allocators"] != ALLOCATORS:
            problems.append(f"episode {rid}: allocators {ep['credit']['allocators']}, want {ALLOCATORS}")
            continue
        teams = ep["teams"]
        if teams != ["red", "blue"]:
            problems.append(f"episode {rid}: teams {teams}")
            continue
        n = len(ep["seats"])
        team_of = [teams.index(s["team"]) for s in ep["seats"]]
        where = [None] * n
        emitted = []
        for tr in ep["turns"]:
            where[tr["seat"]] = legal.get(tr["action"])
            if tr["emit"]:
                emitted.append(tr["seat"])
        home += sum(1 for f in where if f is None)
        G, counts = side_rewards(where, team_of, fields)
        if any(abs(a - b) > TOL for a, b in zip(G, ep["score"]["teams"])) or abs(ep["score"]["team"] - 1) > TOL:
            problems.append(f"episode {rid}: sides {ep['score']['teams']} (sum {ep['score']['team']}), rules {G}")
        local = []
        for i in range(n):
            f, t = where[i], team_of[i]
            if f is None:
                local.append(0.0)
            else:
                mine, theirs = counts[t][f], counts[1 - t][f]
                local.append(1.0 if mine > theirs else 0.5 if mine == theirs else 0.0)
        if any(abs(a - b) > TOL for a, b in zip(local, ep["score"]["agents"])):
            problems.append(f"episode {rid}: agent scores {ep['score']['agents']}, rules {local}")
        diff = []
        for i in range(n):
            without = list(where)
            without[i] = None
            d = G[team_of[i]] - side_rewards(without, team_of, fields)[0][team_of[i]]
            pivotal += d != 0
            diff.append(d)
        per_seat = {"team": [G[t] for t in team_of], "individual": local, "difference": diff,
                    "difference:sim=resimulate": diff, "leave-one-out": diff}
        for a, name in enumerate(ALLOCATORS):
            got = ep["credit"]["values"][a]
            want = [per_seat[name][i] for i in emitted]
            if len(got) != len(want):
                problems.append(f"episode {rid} {name}: {len(got)} values, want {len(want)}")
                continue
            for k, (x, y) in enumerate(zip(got, want)):
                checked += 1
                if abs(x - y) > TOL:
                    problems.append(f"episode {rid} {name} sample {k} ({ep['seats'][emitted[k]]['id']}): troupe {x!r}, rules {y!r}")
    if problems:
        print("\n".join(problems[:40]))
        print(f"{len(problems)} differences")
        sys.exit(1)
    print(f"{len(episodes)} episodes, {checked} credit values of {len(ALLOCATORS)} allocators agree with the rules; "
          f"{pivotal} pivotal soldiers, {home} at home")


if __name__ == "__main__":
    main()
