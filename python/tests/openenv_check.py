"""Plays troupe env-serve with OpenEnv's own code, openenv-core from PyPI.

    python python/tests/openenv_check.py URL

The server must have been started with a default episode: tic-tac-toe as x
against minimax (troupe env-serve --scenario tictactoe --open x --policy
o=minimax). In order:

1. OpenEnv's validator (openenv.cli._validation.validate_running_environment,
   what `openenv validate --url` runs) must pass.
2. GenericEnvClient over OpenEnv's WebSocket session: reset() with no
   arguments (the default episode), with a seed, and with troupe's own reset
   fields; an illegal move is refused with the server's error; state().
3. Plain HTTP as OpenEnv's HTTP servers are called (no session id):
   POST /reset {}, POST /step {"action": ...}, GET /state.
4. MCPToolClient: tools over the WebSocket's step (ListToolsAction,
   CallToolAction) and over HTTP /mcp in production mode (its
   openenv/session/create sessions).

It prints a JSON summary on stdout.
"""

import json
import sys

import requests
from openenv.cli._validation import validate_running_environment
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient


def play(step, result, summary_moves):
    """Plays x's first legal cell, rotated, until the end."""
    moves = []
    while not result.done:
        pending = result.observation["pending"][0]
        assert pending["agent"] == "x", pending
        move = pending["legal"][len(moves) * 7 % len(pending["legal"])]
        moves.append(move)
        result = step(move)
    summary_moves.append(moves)
    return result


def main():
    url = sys.argv[1]
    summary = {}

    report = validate_running_environment(url)
    assert report["passed"], json.dumps(report, indent=1)
    summary["validate"] = {
        "profile": report["standard_profile"],
        "mode": report["mode"],
        "criteria": {c["id"]: c["passed"] for c in report["criteria"]},
    }

    games, moves = [], []
    with GenericEnvClient(base_url=url).sync() as env:
        for kwargs in ({}, {"seed": 2}, {"scenario": "tictactoe", "open": ["x"], "policies": {"o": "minimax"}, "seed": 3}):
            result = env.reset(**kwargs)
            assert not result.done and result.reward is None, result
            if not games:
                try:
                    env.step({"move": "z9"})
                    raise AssertionError("an illegal move was taken")
                except RuntimeError as e:
                    assert "illegal_action" in str(e) and '"z9" is not one of' in str(e), e
                    summary["illegal"] = str(e)
            result = play(lambda m: env.step({"move": m}), result, moves)
            state = env.state()
            assert state["done"] and state["scenario"] == "tictactoe", state
            games.append({"reward": result.reward, "status": result.observation["status"], "episode_id": state["episode_id"]})
    summary["ws_games"], summary["ws_moves"] = games, moves

    # OpenEnv's HTTP calls carry no session: reset, then steps, then state.
    r = requests.post(f"{url}/reset", json={}, timeout=30)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["reward"] is None and not data["done"], data
    ep = data["observation"]["episode_id"]
    http_moves = []
    while not data["done"]:
        legal = data["observation"]["pending"][0]["legal"]
        http_moves.append(legal[0])
        r = requests.post(f"{url}/step", json={"action": {"move": legal[0]}, "request_id": "check"}, timeout=30)
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["observation"]["episode_id"] == ep, data
    state = requests.get(f"{url}/state", timeout=30).json()
    assert state["episode_id"] == ep and state["done"] and state["step_count"] > 0, state
    summary["http"] = {"episode_id": ep, "moves": http_moves, "reward": data["reward"], "step_count": state["step_count"]}

    # MCP, over the WebSocket's step (MCPToolClient's default) ...
    with MCPToolClient(base_url=url).sync() as env:
        tools = env.list_tools()
        names = [t.name for t in tools]
        assert names == ["scenarios", "new_episode", "observe", "act"], names
        scenarios = env.call_tool("scenarios")
        assert "tictactoe" in [s["name"] for s in scenarios["scenarios"]], scenarios
        res = env.call_tool("new_episode", seed=5)
        mcp_moves = []
        while not res["done"]:
            legal = res["observation"]["pending"][0]["legal"]
            mcp_moves.append(legal[-1])
            res = env.call_tool("act", move=legal[-1])
        summary["mcp_ws"] = {"tools": names, "moves": mcp_moves, "reward": res["reward"]}
    # ... and over HTTP /mcp (production mode: OpenEnv's MCP sessions).
    env = MCPToolClient(base_url=url)
    env.use_production_mode = True
    with env.sync() as sync:
        names = [t.name for t in sync.list_tools()]
        assert names == ["scenarios", "new_episode", "observe", "act"], names
        res = sync.call_tool("new_episode", seed=6)
        prod_moves = []
        while not res["done"]:
            legal = res["observation"]["pending"][0]["legal"]
            prod_moves.append(legal[0])
            res = sync.call_tool("act", move=legal[0])
            res = sync.call_tool("observe") if not res["done"] else res
        summary["mcp_http"] = {"tools": names, "moves": prod_moves, "reward": res["reward"]}

    print(json.dumps(summary))


if __name__ == "__main__":
    main()
