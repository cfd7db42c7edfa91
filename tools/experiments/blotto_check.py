"""Recompute the team Blotto experiment's statistics from its per-seed CSV, independently of troupe.

Usage: /usr/bin/python3 blotto_check.py BLUE_TEAM_DIR BLUE_DIFFERENCE_DIR

The two directories are the outputs of the two `troupe experiment blotto`
commands of docs/experiments/blotto.md (blue fixed at the team reward, red's
reward in {team, individual, difference}; blue fixed at the difference
reward, red's in {team, difference}). From each finals.csv (every seed's
final and overall G_red) the script recomputes, with numpy and its own
Student t distribution:

  - per arm and n: the mean over seeds, the standard deviation, a
    percentile-bootstrap 95% interval (its own resamples) and Student's t
    interval, for the final and the overall share;
  - every paired comparison of comparisons.csv: the mean difference and the
    two-sided paired t-test's p;
  - where episodes.csv is there (it is not kept in docs/), every seed's
    final and overall share from the per-episode series itself;

and checks them against what troupe wrote (results.csv, comparisons.csv):
means, standard deviations and p(t) to rounding, bootstrap bounds to 0.004
(the resamples differ). It then applies the preregistered criteria
(paired t-tests, Holm across the four team sizes) and prints the tables and
verdicts docs/experiments/blotto.md reports. Exits 1 on any disagreement.
"""

import csv
import math
import sys
from collections import defaultdict

import numpy as np

SIZES = ["3", "6", "12", "24"]
TOL = 1e-9
BOOT_TOL = 0.004


def betacf(a, b, x):
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lbt) * betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * betacf(b, a, 1 - x) / b


def t_two_sided(t, df):
    """Two-sided p of Student's t with df degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2, 0.5, df / (df + t * t))


def t_quantile(q, df):
    """Student's t quantile by bisection on the distribution above."""
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        # P(T > mid) = p_two_sided / 2
        if t_two_sided(mid, df) / 2 > 1 - q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def paired_t(d):
    d = np.asarray(d, dtype=float)
    n = len(d)
    sd = d.std(ddof=1)
    if sd == 0:
        return 1.0 if d.mean() == 0 else 0.0
    return t_two_sided(d.mean() / (sd / math.sqrt(n)), n - 1)


def holm(ps):
    """Holm's step-down adjustment of ps, in their order."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def bootstrap(xs, rng, resamples=20000):
    xs = np.asarray(xs, dtype=float)
    idx = rng.integers(0, len(xs), size=(resamples, len(xs)))
    means = xs[idx].mean(axis=1)
    return np.quantile(means, 0.025), np.quantile(means, 0.975)


def t_interval(xs):
    xs = np.asarray(xs, dtype=float)
    half = t_quantile(0.975, len(xs) - 1) * xs.std(ddof=1) / math.sqrt(len(xs))
    return xs.mean() - half, xs.mean() + half


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    dirs = {"blue=team": sys.argv[1], "blue=difference": sys.argv[2]}
    rng = np.random.default_rng(20260)
    problems = []
    finals = {}  # (experiment, n, allocator) -> {"final": [..by seed], "overall": [..]}
    for exp, d in dirs.items():
        per = defaultdict(lambda: {"final": {}, "overall": {}})
        for r in read(f"{d}/finals.csv"):
            if r["metric"] != "G_red":
                problems.append(f"{exp}: metric {r['metric']}, want G_red")
            k = (exp, r["n"], r["allocator"])
            per[k]["final"][int(r["seed"])] = float(r["final"])
            per[k]["overall"][int(r["seed"])] = float(r["overall"])
        for k, v in per.items():
            seeds = sorted(v["final"])
            finals[k] = {m: np.array([v[m][s] for s in seeds]) for m in ("final", "overall")}
        # The per-episode series, when there: every seed's final and overall.
        try:
            f = open(f"{d}/episodes.csv", newline="")
        except FileNotFoundError:
            print(f"{exp}: no episodes.csv: the seeds' finals are taken from finals.csv")
        else:
            series = defaultdict(list)
            with f:
                for r in csv.DictReader(f):
                    series[(r["n"], r["allocator"], int(r["seed"]))].append(float(r["team_red"]))
            window = None
            for (n, alloc, seed), xs in series.items():
                window = window or int(read(f"{d}/results.csv")[0]["window"])
                xs = np.array(xs)
                for m, want in (("final", xs[-window:].mean()), ("overall", xs.mean())):
                    got = per[(exp, n, alloc)][m][seed]
                    if abs(got - want) > TOL:
                        problems.append(f"{exp} n={n} {alloc} seed {seed}: {m} {got}, series {want}")
            print(f"{exp}: {len(series)} cells' finals and overalls recomputed from episodes.csv")

        for r in read(f"{d}/results.csv"):
            x = finals[(exp, r["n"], r["allocator"])]
            for m in ("final", "overall"):
                xs = x[m]
                if abs(xs.mean() - float(r[f"{m}_mean"])) > TOL or abs(xs.std(ddof=1) - float(r[f"{m}_std"])) > TOL:
                    problems.append(f"{exp} n={r['n']} {r['allocator']} {m}: troupe mean {r[f'{m}_mean']} std {r[f'{m}_std']}, numpy {xs.mean()} {xs.std(ddof=1)}")
                lo, hi = bootstrap(xs, rng)
                if abs(lo - float(r[f"{m}_ci_low"])) > BOOT_TOL or abs(hi - float(r[f"{m}_ci_high"])) > BOOT_TOL:
                    problems.append(f"{exp} n={r['n']} {r['allocator']} {m}: troupe CI [{r[f'{m}_ci_low']}, {r[f'{m}_ci_high']}], numpy bootstrap [{lo}, {hi}]")
        for r in read(f"{d}/comparisons.csv"):
            a, b = finals[(exp, r["n"], r["allocator_a"])]["final"], finals[(exp, r["n"], r["allocator_b"])]["final"]
            dd = a - b
            p = paired_t(dd)
            if abs(dd.mean() - float(r["diff"])) > TOL or abs(p - float(r["p_t"])) > max(1e-9, 1e-6 * p):
                problems.append(f"{exp} n={r['n']} {r['allocator_a']}-{r['allocator_b']}: troupe diff {r['diff']} p(t) {r['p_t']}, numpy {dd.mean()} {p}")

    def fmt(x):
        lo, hi = t_interval(x)
        blo, bhi = bootstrap(x, rng)
        return f"{x.mean():.4f} [{blo:.4f}, {bhi:.4f}]"

    arms = [("blue=team", "team", "control: team vs team"), ("blue=team", "individual", "local vs team"),
            ("blue=team", "difference", "difference vs team"), ("blue=difference", "team", "team vs difference"),
            ("blue=difference", "difference", "difference vs difference")]
    print()
    print("| arm (red vs blue) | n | final G_red [95% CI] | overall G_red [95% CI] | final − overall (paired p) |")
    print("| --- | --- | --- | --- | --- |")
    for exp, alloc, label in arms:
        for n in SIZES:
            x = finals[(exp, n, alloc)]
            d = x["final"] - x["overall"]
            print(f"| {label} | {n} | {fmt(x['final'])} | {fmt(x['overall'])} | {d.mean():+.4f} (p {paired_t(d):.2g}) |")

    print()
    print("Paired comparisons of red's final share with the control arm (red on the team reward against the same blue),")
    print("seed by seed, two-sided paired t-test, Holm across the four team sizes:")
    print()
    print("| red's reward against blue's | n | Δ final vs control | wins / 20 | p(t) | p(Holm, 4 sizes) |")
    print("| --- | --- | --- | --- | --- | --- |")
    verdict = {}
    for exp, alloc, control in [("blue=team", "difference", "team"), ("blue=team", "individual", "team"),
                                ("blue=difference", "difference", "team")]:
        ds = [finals[(exp, n, alloc)]["final"] - finals[(exp, n, control)]["final"] for n in SIZES]
        ps = [paired_t(d) for d in ds]
        hs = holm(ps)
        for n, d, p, h in zip(SIZES, ds, ps, hs):
            print(f"| {alloc} vs {exp.split('=')[1]} | {n} | {d.mean():+.4f} | {int((d > 0).sum())} | {p:.2g} | {h:.2g} |")
        verdict[(exp, alloc)] = (ds, hs)

    print()
    share = lambda exp, alloc, n: finals[(exp, n, alloc)]["final"]
    ctl = {n: share("blue=team", "team", n) for n in SIZES}
    p1 = all(bootstrap(ctl[n], rng)[0] <= 0.5 <= bootstrap(ctl[n], rng)[1] for n in SIZES)
    print(f"1. control at 0.5 within its CI at every n: {p1} ({', '.join(f'{ctl[n].mean():.4f}' for n in SIZES)})")
    ds, hs = verdict[("blue=team", "difference")]
    above = {n: share("blue=team", "difference", n).mean() for n in SIZES}
    sig = {n: h < 0.05 for n, h in zip(SIZES, hs)}
    grows = all(above[a] < above[b] for a, b in zip(SIZES, SIZES[1:]))
    p2 = all(above[n] > 0.5 and sig[n] for n in SIZES[1:]) and grows
    print(f"2. difference vs team above 0.5 with p(Holm) < 0.05 from n = 6 up, margin growing: {p2} "
          f"(share {', '.join(f'{n}: {above[n]:.4f} p(Holm) {h:.2g}' for n, h in zip(SIZES, hs))}; margin grows: {grows})")
    loc = {n: share("blue=team", "individual", n).mean() for n in SIZES}
    ds3, hs3 = verdict[("blue=team", "individual")]
    p3 = all(loc[n] > 0.5 for n in SIZES) and all(loc[n] < above[n] for n in ("12", "24"))
    print(f"3. local vs team wins, by less than difference at n >= 12: {p3} (share {', '.join(f'{n}: {loc[n]:.4f}' for n in SIZES)})")
    dd = {n: share("blue=difference", "difference", n) for n in SIZES}
    p4 = all(bootstrap(dd[n], rng)[0] <= 0.5 <= bootstrap(dd[n], rng)[1] for n in SIZES)
    print(f"4. difference vs difference at 0.5 within its CI at every n: {p4} ({', '.join(f'{dd[n].mean():.4f}' for n in SIZES)})")
    ov = {n: finals[("blue=team", n, "difference")]["overall"].mean() for n in SIZES}
    arms_race = all(above[n] < ov[n] for n in SIZES)
    print(f"arms race (difference's final share below its overall share at every n): {arms_race} "
          f"({', '.join(f'{n}: {above[n]:.4f} vs {ov[n]:.4f}' for n in SIZES)})")
    null = all(abs(above[n] - 0.5) <= 0.02 for n in SIZES)
    print(f"no help (difference's share within 0.02 of 0.5 at every n): {null}")

    if problems:
        print("\n".join(problems[:40]))
        print(f"{len(problems)} disagreements with troupe's outputs")
        sys.exit(1)
    print("\nevery mean, standard deviation, bootstrap interval and paired p(t) troupe wrote agrees with numpy")


if __name__ == "__main__":
    main()
