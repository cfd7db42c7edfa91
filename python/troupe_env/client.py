"""The protocol client of troupe's environment server (`troupe env-serve`).

Standard library only. One Client holds one keep-alive HTTP connection; a
Session is one player of an episode: it holds one seat or several.

    client = Client("http://127.0.0.1:8378")
    session, result = client.reset(scenario="tictactoe", seed=3, seats=["x"])
    while not result["done"]:
        mine = result["observation"]["pending"]
        if mine:
            result = session.step(move=mine[0]["legal"][0])
        else:
            result = session.wait()

The wire protocol is documented in docs/envserver.md (and the Go package
envserver/envclient).
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import Any, Dict, List, Optional


class ServerError(Exception):
    """An error answer of the server: its HTTP status, code and message."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"troupe environment server: {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def exchange(conn: http.client.HTTPConnection, method: str, path: str, body: Optional[bytes],
             headers: Dict[str, str]) -> bytes:
    """Sends one request on conn and returns its answer's body; raises
    ServerError for an error answer.

    A request that a kept-alive connection the server closed while idle
    never delivered is sent once more, on a new connection (http.client
    reopens a closed one). Never once an answer has begun: a step is applied
    before it is answered, and sent again it would move the next state, so
    an answer cut short fails (the connection closed) instead.
    """
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
    except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
        conn.close()
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
    try:
        raw = resp.read()
    except BaseException:
        conn.close()
        raise
    if resp.status >= 300:
        try:
            err = json.loads(raw)["error"]
            raise ServerError(resp.status, err.get("code", ""), err.get("message", ""))
        except (ValueError, KeyError, TypeError):
            raise ServerError(resp.status, "internal", raw.decode(errors="replace").strip()) from None
    return raw


class Client:
    """A client of one environment server, over one HTTP connection.

    Not safe for concurrent use: give each thread its own Client.
    """

    def __init__(self, base_url: str = "http://127.0.0.1:8378", token: Optional[str] = None, timeout: float = 120.0):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "") or not u.hostname:
            raise ValueError(f"base_url {base_url!r}: want http://HOST:PORT")
        self._host, self._port = u.hostname, u.port or 80
        self._timeout = timeout
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = "Bearer " + token
        self._conn: Optional[http.client.HTTPConnection] = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        return self._conn

    def call(self, method: str, path: str, body: Optional[dict] = None) -> Any:
        """Sends one request and returns its decoded JSON answer (raw text
        for /record); raises ServerError for an error answer."""
        data = None if body is None else json.dumps(body).encode()
        raw = exchange(self._connection(), method, path, data, self._headers)
        if path.startswith("/record"):
            return raw.decode()
        return json.loads(raw)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def health(self) -> dict:
        return self.call("GET", "/health")

    def metadata(self) -> dict:
        return self.call("GET", "/metadata")

    def seats(self, scenario: str, params: Optional[Dict[str, str]] = None) -> List[dict]:
        """The seats of a scenario under params, with their action sets."""
        body: Dict[str, Any] = {"scenario": scenario}
        if params:
            body["params"] = {k: str(v) for k, v in params.items()}
        return self.call("POST", "/seats", body)["seats"]

    def reset(self, **fields: Any) -> "tuple[Session, dict]":
        """Starts a session: a new episode (scenario=..., params=...,
        seed=..., seats=[...], open=[...], policies={role: name},
        fallback="policy"|"forfeit", allocators=[...], ...), or a seat at
        one (join=EPISODE_ID, seats=[...]). Returns the session and the
        first result, once one of its seats must act or the episode is
        over."""
        body = {k: v for k, v in fields.items() if v is not None}
        if "params" in body:
            body["params"] = {k: str(v) for k, v in body["params"].items()}
        result = self.call("POST", "/reset", body)
        obs = result["observation"]
        return Session(self, obs["session_id"], obs["episode_id"]), result

    def record(self, episode_id: str) -> str:
        """The record of an episode that is over: one troupe.episode/v2
        line, as an episodes file holds it."""
        return self.call("GET", "/record?episode_id=" + urllib.parse.quote(episode_id))


class Session:
    """One player of an episode: the seats it holds."""

    def __init__(self, client: Client, session_id: str, episode_id: str):
        self.client = client
        self.id = session_id
        self.episode_id = episode_id

    def step(self, move: Optional[str] = None, seat: Optional[str] = None, moves: Optional[Dict[str, str]] = None) -> dict:
        """Gives one seat's move (seat: which, when several of the
        session's act now) or several (moves, by agent id), and returns the
        result once the session must act again or the episode is over."""
        action: Dict[str, Any] = {}
        if move is not None:
            action["move"] = move
        if seat is not None:
            action["seat"] = seat
        if moves is not None:
            action["moves"] = moves
        return self.client.call("POST", "/step", {"session_id": self.id, "action": action})

    def wait(self) -> dict:
        """Gives no move: waits for the session's turn (or the end)."""
        return self.step()

    def state(self) -> dict:
        return self.client.call("GET", "/state?session_id=" + urllib.parse.quote(self.id))

    def close(self) -> dict:
        """Leaves the episode: the session's seats fall back (the house
        policy plays them, or the episode ends forfeited)."""
        return self.client.call("POST", "/close", {"session_id": self.id})
