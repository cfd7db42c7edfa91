"""A vector environment over troupe's environment server: many episodes of a
scenario stepped in one round trip (docs/vector.md), in the array shapes that
multi-agent trainers consume.

TroupeVectorEnv holds num_envs episodes of one scenario on the server (POST
/vectors), every seat of each the caller's. A step sends one action per env
and agent, [num_envs, num_agents] (an index into the agent's action set; the
agents that do not act now are ignored, -1 by convention), in one binary
frame, and answers, in one binary frame:

- observations [num_envs, num_agents, *observation_shape]: the scenario's
  features (float32, env.Features) where it declares them, in their shape when
  every agent's is the same (else rows of obs_dim, zero-padded), or the UTF-8
  bytes of each agent's last view (uint8, zero-padded or cut to view_bytes);
- rewards [num_envs, num_agents] (float32): the agents' scores (reward="score"),
  their team's reward (reward="team"), or an allocator's credit of them
  (reward="difference", an allocator's spec, which joins allocators=[...]) at
  the step an episode ends, else 0;
- terminations and truncations [num_envs, num_agents] (bool): the episode of
  the env ended by its rules, or was cut (a limit, a failure);
- infos: "action_mask" [num_envs, num_agents, num_actions] (int8, 1 for the
  moves the rules allow now; zeros for an agent that does not act),
  "acting" [num_envs, num_agents] (bool), "state" [num_envs, state_dim]
  (float32, the global state for a centralised critic; absent when the
  scenario declares none), and, for the envs whose episode ended,
  "final_observation" and "final_state" (when final_observations is set),
  "final_info" (status, rollout_id, team reward and, with allocators named,
  each agent's side reward, score and every allocator's credit: the values
  `troupe run --episodes-out` writes) and "_final" [num_envs];
  "started", "seed" and "rollout_id": the envs whose episode started in this
  answer, each one's run seed and rollout id (a reset with that seed plays
  the same episode alone).

open=[agents] makes the others the house's (policies={role: name} on the
server); they stay in the arrays and never act.

Autoreset is Gymnasium's SAME_STEP: an env whose episode ended already holds
the next episode's first observation in the step that ended it. The arrays are
fresh each step, read-only views of the answer (copy to change them).

Needs numpy only (http.client for the transport).
"""

from __future__ import annotations

import http.client
import json
import struct
import urllib.parse
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .client import ServerError, exchange

__all__ = ["TroupeVectorEnv", "decode_batch", "encode_actions"]

_ACTIONS_HEADER = struct.Struct("<4sIII")
_BATCH_HEADER = struct.Struct("<4s11I")
_STARTED = np.dtype([("env", "<u4"), ("_pad", "<u4"), ("seed", "<u8"), ("rollout_id", "<i8")])
_ENDED = np.dtype([("env", "<u4"), ("status", "u1"), ("_pad", "u1", (3,)), ("rollout_id", "<i8"), ("team", "<f8")])
STATUSES = {1: "completed", 2: "truncated", 3: "aborted", 4: "failed"}


def encode_actions(actions: np.ndarray) -> bytes:
    """The actions frame of actions, [num_envs, num_agents] integers."""
    a = np.ascontiguousarray(actions, dtype="<i4")
    if a.ndim != 2:
        raise ValueError(f"actions: shape {a.shape}, not [num_envs, num_agents]")
    return _ACTIONS_HEADER.pack(b"TVA1", a.shape[0], a.shape[1], 0) + a.tobytes()


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def decode_batch(data: bytes) -> Dict[str, Any]:
    """Decodes a batch frame into numpy arrays (read-only views of data)."""
    if len(data) < _BATCH_HEADER.size:
        raise ValueError(f"a batch frame of {len(data)} bytes")
    magic, ne, na, d, dtype, k, s, nstart, nend, flags, nc, zero = _BATCH_HEADER.unpack_from(data)
    if magic != b"TVB1" or dtype not in (1, 2) or flags & ~1 or zero:
        raise ValueError(f"not a batch frame (magic {magic!r}, dtype {dtype}, flags {flags})")
    odt = np.float32 if dtype == 1 else np.uint8
    es = 4 if dtype == 1 else 1
    final = bool(flags & 1)
    final_len = _pad8(es * na * d + 4 * s) if final else 0
    credits = na * (2 + nc) if nc else 0
    per = 24 + final_len + 8 * credits
    body = _pad8(_BATCH_HEADER.size + 4 * ne * na + 4 * ne * s + es * ne * na * d + ne * na * k + ne * na + 2 * ne)
    if len(data) != body + 24 * nstart + per * nend:
        raise ValueError(f"a batch frame of {len(data)} bytes, not {body + 24 * nstart + per * nend}")
    p = _BATCH_HEADER.size

    def take(dt, count, shape):
        nonlocal p
        a = np.frombuffer(data, dt, count, p).reshape(shape)
        p += a.nbytes
        return a

    out: Dict[str, Any] = {"num_envs": ne, "num_agents": na}
    out["rewards"] = take("<f4", ne * na, (ne, na))
    out["state"] = take("<f4", ne * s, (ne, s))
    out["obs"] = take(odt, ne * na * d, (ne, na, d))
    out["masks"] = take(np.int8, ne * na * k, (ne, na, k))
    out["acting"] = take(np.bool_, ne * na, (ne, na))
    out["terminated"] = take(np.bool_, ne, (ne,))
    out["truncated"] = take(np.bool_, ne, (ne,))
    out["started"] = np.frombuffer(data, _STARTED, nstart, body)
    p = body + 24 * nstart
    ended = []
    for _ in range(nend):
        e = np.frombuffer(data, _ENDED, 1, p)[0]
        entry = {"env": int(e["env"]), "status": STATUSES.get(int(e["status"]), "unknown"),
                 "rollout_id": int(e["rollout_id"]), "team": float(e["team"])}
        if final:
            q = p + 24
            entry["final_observation"] = np.frombuffer(data, odt, na * d, q).reshape(na, d)
            entry["final_state"] = np.frombuffer(data, "<f4", s, q + es * na * d)
        if credits:
            entry["credit"] = np.frombuffer(data, "<f8", credits, p + 24 + final_len).reshape(na, 2 + nc)
        ended.append(entry)
        p += per
    out["ended"] = ended
    return out


def _same_step():
    """Gymnasium's AutoresetMode.SAME_STEP when Gymnasium is installed,
    else its value, "SameStep"."""
    try:
        from gymnasium.vector import AutoresetMode
        return AutoresetMode.SAME_STEP
    except ImportError:
        return "SameStep"


class TroupeVectorEnv:
    """num_envs episodes of a troupe scenario stepped together on an
    environment server (`troupe env-serve`): see the module's doc."""

    def __init__(self, scenario: str, num_envs: int, params: Optional[Dict[str, Any]] = None,
                 base_url: str = "http://127.0.0.1:8378", token: Optional[str] = None, seed: Optional[int] = None,
                 reward: str = "score", view_bytes: int = 0, final_observations: bool = False,
                 timeout: float = 120.0, **fields: Any):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base_url {base_url!r}: an http(s) URL")
        conn = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        self._conn = conn(u.hostname, u.port or (443 if u.scheme == "https" else 80), timeout=timeout)
        self._prefix = u.path.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        req = {"scenario": scenario, "num_envs": int(num_envs), "reward": reward,
               "params": {k: str(v) for k, v in (params or {}).items()}, **fields}
        if seed is not None:
            req["seed"] = int(seed)
        if view_bytes:
            req["view_bytes"] = int(view_bytes)
        if final_observations:
            req["final_observations"] = True
        a = json.loads(self._post("/vectors", json.dumps(req).encode(), "application/json"))
        self.spec = a
        self.vector_id: str = a["vector_id"]
        self.scenario = scenario
        self.num_envs: int = a["num_envs"]
        self.possible_agents: List[str] = [g["agent"] for g in a["agents"]]
        self.agents = list(self.possible_agents)
        self.num_agents = len(self.agents)
        self.roles: List[str] = [g["role"] for g in a["agents"]]
        self.action_sets: List[List[str]] = [g["actions"] for g in a["agents"]]
        self.num_actions: int = a["num_actions"]
        self.allocators: List[str] = a.get("allocators") or []
        self.obs_dim: int = a["obs_dim"]
        self.obs_dtype = np.float32 if a["obs_dtype"] == "float32" else np.uint8
        self.features = a["obs_dtype"] == "float32"
        self.observation_shapes = [tuple(g["observation"]["shape"]) if g.get("observation") else (self.obs_dim,)
                                   for g in a["agents"]]
        # The observations' shape when every agent's is the same, else
        # the rows of obs_dim.
        shapes = set(self.observation_shapes)
        self.observation_shape: Tuple[int, ...] = shapes.pop() if len(shapes) == 1 else (self.obs_dim,)
        st = a.get("state")
        self.state_shape: Optional[Tuple[int, ...]] = tuple(st["shape"]) if st else None
        self.metadata = {"autoreset_mode": _same_step(), "name": f"troupe_{scenario}_vector_v0"}
        self._batch: Optional[Dict[str, Any]] = None
        self._closed = False

    # Spaces, as Gymnasium's when it is installed (numpy is all the
    # environment itself needs).
    def single_observation_space(self, agent: Union[int, str]):
        import gymnasium
        i = self._agent(agent)
        g = self.spec["agents"][i]
        if g.get("observation"):
            o = g["observation"]
            return gymnasium.spaces.Box(o["low"], o["high"], tuple(o["shape"]), np.float32)
        return gymnasium.spaces.Box(0, 255, (self.obs_dim,), np.uint8)

    def single_action_space(self, agent: Union[int, str]):
        import gymnasium
        return gymnasium.spaces.Discrete(len(self.action_sets[self._agent(agent)]))

    @property
    def state_space(self):
        import gymnasium
        st = self.spec.get("state")
        if not st:
            return None
        return gymnasium.spaces.Box(st["low"], st["high"], tuple(st["shape"]), np.float32)

    def _agent(self, agent: Union[int, str]) -> int:
        return agent if isinstance(agent, int) else self.possible_agents.index(agent)

    def _post(self, path: str, body: bytes, ctype: str) -> bytes:
        if getattr(self, "_closed", False):
            raise RuntimeError("the vector environment is closed")
        headers = dict(self._headers, **{"Content-Type": ctype})
        return exchange(self._conn, "POST", self._prefix + path, body, headers)

    def _answer(self, data: bytes):
        b = decode_batch(data)
        self._batch = b
        ne, na = self.num_envs, self.num_agents
        term = np.broadcast_to(b["terminated"][:, None], (ne, na))
        trunc = np.broadcast_to(b["truncated"][:, None], (ne, na))
        infos: Dict[str, Any] = {"action_mask": b["masks"], "acting": b["acting"],
                                 "started": b["started"]["env"], "seed": b["started"]["seed"],
                                 "rollout_id": b["started"]["rollout_id"]}
        if self.state_shape is not None:
            infos["state"] = b["state"].reshape((ne,) + self.state_shape)
        if b["ended"]:
            final = np.zeros(ne, np.bool_)
            final_info = np.full(ne, None, dtype=object)
            fobs = fstate = None
            for e in b["ended"]:
                final[e["env"]] = True
                fi = {k: e[k] for k in ("status", "rollout_id", "team")}
                if "credit" in e:
                    c = e["credit"]
                    fi["side_reward"], fi["score"] = c[:, 0], c[:, 1]
                    fi["credit"] = {name: c[:, 2 + j] for j, name in enumerate(self.allocators)}
                final_info[e["env"]] = fi
                if "final_observation" in e:
                    if fobs is None:
                        fobs = np.zeros((ne, na) + self.observation_shape, self.obs_dtype)
                        fstate = np.zeros((ne,) + (self.state_shape or (0,)), np.float32)
                    fobs[e["env"]] = e["final_observation"].reshape((na,) + self.observation_shape)
                    fstate[e["env"]] = e["final_state"].reshape(self.state_shape or (0,))
            infos["_final"], infos["final_info"] = final, final_info
            if fobs is not None:
                infos["final_observation"], infos["final_state"] = fobs, fstate
        obs = b["obs"].reshape((ne, na) + self.observation_shape)
        return obs, b["rewards"], term, trunc, infos

    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None):
        """Stops the episodes in play and starts num_envs new ones (their
        run seeds derive from seed when given): (observations, infos)."""
        body = json.dumps({} if seed is None else {"seed": int(seed)}).encode()
        obs, _, _, _, infos = self._answer(self._post(f"/vector/{self.vector_id}/reset", body, "application/json"))
        return obs, infos

    def step(self, actions: Union[np.ndarray, Sequence, Dict[str, Any]]):
        """Gives one action per env and agent ([num_envs, num_agents], or a
        dict of [num_envs] by agent) and answers (observations, rewards,
        terminations, truncations, infos)."""
        if isinstance(actions, dict):
            actions = np.stack([np.asarray(actions[a]) if a in actions else np.full(self.num_envs, -1)
                                for a in self.possible_agents], axis=1)
        return self._answer(self._post(f"/vector/{self.vector_id}/step", encode_actions(actions),
                                       "application/octet-stream"))

    def state(self) -> np.ndarray:
        """The global state of every env, [num_envs, *state_shape]: for a
        centralised critic (raises when the scenario declares none)."""
        if self.state_shape is None:
            raise NotImplementedError(f"scenario {self.scenario} declares no state (env.Features)")
        if self._batch is None:
            raise RuntimeError("state() before reset()")
        return self._batch["state"].reshape((self.num_envs,) + self.state_shape)

    def action_masks(self) -> np.ndarray:
        """The current action masks, [num_envs, num_agents, num_actions]."""
        if self._batch is None:
            raise RuntimeError("action_masks() before reset()")
        return self._batch["masks"]

    def sample_actions(self, rng: Optional[np.random.Generator] = None) -> np.ndarray:
        """A uniformly random legal action for every acting agent (-1 for
        the others): a random policy, vectorised."""
        m = self.action_masks()
        rng = rng or np.random.default_rng()
        u = rng.random(m.shape) * m
        a = u.argmax(axis=2).astype(np.int32)
        a[m.sum(axis=2) == 0] = -1
        return a

    def close(self) -> None:
        """Ends the vector: its episodes in play end aborted."""
        if self._closed:
            return
        try:
            self._post(f"/vector/{self.vector_id}/close", b"{}", "application/json")
        except (ServerError, OSError):
            pass
        self._closed = True
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
