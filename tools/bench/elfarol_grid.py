#!/usr/bin/env python3
"""The El Farol learning grid of `troupe experiment` as a plain pure-Python
loop: the yardstick of the grid's CPU-time target (a tenth of this loop),
measured beside BenchmarkElFarolGrid in the same minutes, on the same
machine.

The same work as experiment/bench_test.go's grid: agents 20, 60, 100 and
200; rewards team, individual and difference; 3 seeds; 1,000 weeks of 7
nights with capacity 6; per agent and week one epsilon-greedy choice
(epsilon 0.05, ties at random) and one unbiased constant-step update of its
action value (alpha 0.1), as policies/learn's egreedy does. Its random numbers
are Python's, not troupe's seeds, so its numbers differ; its work does not.
It prints the CPU time (user+system) of the loop, and the agent-turns.

    python3 tools/bench/elfarol_grid.py [ROUNDS]
"""
import math
import random
import sys
import time

NIGHTS, CAPACITY, WEEKS, SEEDS = 7, 6.0, 1000, 3
ALPHA, EPSILON = 0.1, 0.05


def cell(n, reward, seed):
    # Written for speed as plain Python goes: locals bound once, the
    # argmax by max/count/index, a tie list only when there is a tie.
    rng = random.Random(seed)
    rand, randrange, exp = rng.random, rng.randrange, math.exp
    q = [[0.0] * NIGHTS for _ in range(n)]
    trace = [[0.0] * NIGHTS for _ in range(n)]
    choice = [0] * n
    team_sum = 0.0
    for _ in range(WEEKS):
        counts = [0] * NIGHTS
        for i in range(n):
            values = q[i]
            if rand() < EPSILON:
                a = randrange(NIGHTS)
            else:
                best = max(values)
                if values.count(best) == 1:
                    a = values.index(best)
                else:
                    ties = [k for k, v in enumerate(values) if v == best]
                    a = ties[randrange(len(ties))]
            choice[i] = a
            counts[a] += 1
        phi = [x * exp(-x / CAPACITY) for x in counts]
        team = sum(phi)
        team_sum += team
        for i in range(n):
            a = choice[i]
            if reward == "team":
                r = team
            elif reward == "individual":
                r = phi[a]
            else:  # difference: G(z) - G(z without i)
                x = counts[a] - 1
                r = phi[a] - x * exp(-x / CAPACITY)
            o = trace[i]
            o[a] += ALPHA * (1 - o[a])
            values = q[i]
            values[a] += ALPHA / o[a] * (r - values[a])
    return team_sum / WEEKS


def grid():
    turns = 0
    for n in (20, 60, 100, 200):
        for reward in ("team", "individual", "difference"):
            for seed in range(SEEDS):
                cell(n, reward, seed)
                turns += n * WEEKS
    return turns


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    for _ in range(rounds):
        start = time.process_time()
        turns = grid()
        cpu = time.process_time() - start
        print(f"pure-python-grid {cpu:.3f} cpu-s/grid {turns} agent-turns {turns / cpu:.0f} agent-turns/cpu-s")


if __name__ == "__main__":
    main()
