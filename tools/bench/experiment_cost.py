#!/usr/bin/python3
"""What troupe experiment's outputs and start-up cost, as a share of the whole
command's CPU time (user+sys), measured in the same run.

For ROUNDS rounds, alternately: the El Farol grid of docs/experiments/elfarol.md
with 3 seeds (BenchmarkElFarolGrid's grid) writing its outputs; the same grid
with --out "" (which writes nothing: start-up and the grid); and `troupe --help`
(start-up alone). Per round, outputs = whole - no-outputs, and the share is
(outputs + start-up) / whole; the medians over the rounds are printed. CPU time
is the child's rusage (microseconds), so a shared machine's other load does not
count, though it does slow what is measured.

Usage: tools/bench/experiment_cost.py [-r ROUNDS] TROUPE_BINARY [TROUPE_BINARY...]
(several binaries are measured in turn within each round, for comparisons).
"""
import argparse, os, shutil, statistics, subprocess, tempfile

GRID = ["experiment", "elfarol", "--grid", "agents=20,60,100,200", "--param", "nights=7", "--param", "capacity=6",
        "--allocator", "team,individual,difference", "--seeds", "3", "--episodes", "1000", "-q"]


def cpu(argv):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(argv)}: exit status {status}")
    return ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-r", "--rounds", type=int, default=7)
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    rows = {b: [] for b in args.binaries}
    try:
        for r in range(args.rounds):
            for b in args.binaries:
                out = os.path.join(tmp, "out")
                shutil.rmtree(out, ignore_errors=True)
                whole = cpu([b] + GRID + ["--out", out])
                bare = cpu([b] + GRID + ["--out", ""])
                start = cpu([b, "--help"])
                rows[b].append((whole, bare, start))
                print(f"round {r + 1} {b}: whole {whole:.3f}  no-outputs {bare:.3f}  start-up {start:.3f}  "
                      f"outputs+start-up {100 * (whole - bare + start) / whole:.1f}%", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for b, rs in rows.items():
        med = lambda xs: statistics.median(xs)
        print(f"{b}: median over {len(rs)} rounds: whole {med([w for w, _, _ in rs]):.3f} CPU-s, "
              f"no-outputs {med([n for _, n, _ in rs]):.3f}, start-up {med([s for _, _, s in rs]):.4f}, "
              f"outputs {med([w - n for w, n, _ in rs]):.3f}; "
              f"outputs+start-up {100 * med([(w - n + s) / w for w, n, s in rs]):.1f}% of the whole")


if __name__ == "__main__":
    main()
