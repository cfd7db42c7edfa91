"""Checks troupe_env's protocol client with the standard library alone.

    PYTHONPATH=python python3 -S python/tests/client_check.py URL

(-S: no site-packages, so only the standard library is importable.)

Two players, each on its own thread with its own Client, share one
tic-tac-toe episode (x creates it, o joins); a move out of turn and an
illegal move come back as ServerError with their codes. Prints a JSON
summary.
"""

import json
import sys
import threading

import troupe_env
from troupe_env import Client, ServerError


def player(url, result_of, moves, **reset):
    client = Client(url)
    session, result = client.reset(**reset)
    while not result["done"]:
        pending = result["observation"]["pending"]
        if not pending:
            result = session.wait()
            continue
        move = pending[0]["legal"][-1]
        moves.append(move)
        result = session.step(move=move)
    result_of.append(result)
    client.close()


def main():
    url = sys.argv[1]
    assert all(m.split(".")[0] in sys.stdlib_module_names or m.startswith("troupe_env") or m == "__main__"
               for m in list(sys.modules)), "troupe_env imported a module outside the standard library"
    summary = {}
    c = Client(url)
    x, first = c.reset(scenario="tictactoe", seed=4, seats=["x"], episode_id="py-1")
    try:
        c.reset(scenario="tictactoe", bogus=1)
    except ServerError as e:
        summary["unknown_field"] = [e.status, e.code, e.message]
    try:
        x.step(move="z9")
    except ServerError as e:
        summary["illegal"] = [e.status, e.code]
    results, o_moves = [], []
    t = threading.Thread(target=player, args=(url, results, o_moves), kwargs={"join": "py-1", "seats": ["o"]})
    t.start()
    x_moves, result = [], first
    while not result["done"]:
        pending = result["observation"]["pending"]
        if not pending:
            result = x.wait()
            continue
        move = pending[0]["legal"][0]
        x_moves.append(move)
        result = x.step(move=move)
    t.join()
    summary.update(x=x_moves, o=o_moves, status=result["observation"]["status"], scores=result["observation"]["scores"],
                   o_done=results[0]["done"], record=len(c.record("py-1")), version=troupe_env.__name__)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
