"""PettingZoo environments over troupe's environment server.

TroupeAECEnv is an AEC environment and TroupeParallelEnv a Parallel one: each
episode is one session of the server holding every seat (a controller), the
seats' moves given one at a time (AEC: the next agent; at a simultaneous
step the step is applied once every acting agent has moved) or all at once
(Parallel: the acting agents'; the moves of agents that do not act at a
sequential step are ignored).

Spaces: an agent's action space is Discrete over its role's action set (the
scenario declares it: env.ActionSets), action i being the move set[i]. Its
observation is a dict: "observation", the view's UTF-8 bytes in a uint8 Box
of view_bytes (zero-padded; cut if longer: infos[agent]["view"] has it
whole), or with features=True the scenario's numeric observation (a float32
Box, env.Features; state() and state_space then give the global state), and
"action_mask", an int8 Box with 1 for the moves the rules allow
now (none when the agent does not act). An action outside the mask is
handed to the game marked invalid (the reset field pass_illegal, on by
default), which the episode's on_invalid rule judges ("pass" by default),
as PettingZoo's own seed tests, which sample unmasked, need.

infos[agent] holds, while the agent acts, the view, the legal actions, the
inbox of bus messages, the role's state, the turn and the turn's seed. Once
the episode is over it holds status, end and error and, when it was scored:

    "team"         the team reward G (with sides: their sum)
    "side"         the agent's side ("" with one team)
    "side_reward"  its side's reward G_T (G with one team)
    "sides"        {side: reward}, with sides only
    "score"        the agent's own score from the scenario, when it has one
    "reward"       the agent's reward (rewards[agent] at the end)
    "credit"       {allocator: the agent's credit}, every allocator asked
    "credit_turns" {allocator: [its credit for each of the agent's turns]}
    "credit_steps" [the step of each of those turns]

the values `troupe run --episodes-out` writes for the same seeds and moves.
An environment is made with the allocators to compute (allocators=[spec,
...], troupe's credit allocators: "team", "difference", "shapley", ...)
and the one whose credit is the reward (reward="difference"; it joins the
allocators when they lack it). Without reward, the reward is the agent's
own score, else its side's. Credit needs the episode's outcome, which a
scenario gives at the end: every reward arrives then (PettingZoo's
cumulative rewards carry it to the agent's last observation).

Seeds: reset(seed=s) plays the episode of run seed s (that of a one-episode
`troupe run --seed s`) and seeds the environment's generator with s; a later
reset() with no seed plays the generator's next seed, so a sequence of
resets repeats from the same first seed. Never seeded, reset() lets the
server choose (its --seed and counter).

An episode that a reset or close abandons is left to the session's fallback
("forfeit" by default: the server records it aborted, end "forfeit").

Needs pettingzoo, gymnasium and numpy; the protocol client (client.py) needs
none of them.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional

import gymnasium
import numpy as np
from pettingzoo import AECEnv, ParallelEnv

from .client import Client, ServerError, Session

__all__ = ["TroupeAECEnv", "TroupeParallelEnv", "env", "parallel_env"]


class _Episodes:
    """What both environments share: the client, the seats and spaces, and
    the session of the current episode."""

    def __init__(self, scenario: str, params: Optional[Dict[str, Any]], base_url: str, token: Optional[str],
                 view_bytes: int, reset_fields: Dict[str, Any], client: Optional[Client],
                 allocators: Optional[List[str]] = None, reward: Optional[str] = None):
        self.client = client or Client(base_url, token)
        self.scenario = scenario
        self.params = {k: str(v) for k, v in (params or {}).items()}
        self.view_bytes = view_bytes
        self.fields = dict(reset_fields)
        self.fields.setdefault("fallback", "forfeit")
        self.fields.setdefault("pass_illegal", True)
        if allocators is not None:
            self.fields["allocators"] = list(allocators)
        if reward:
            self.fields["reward"] = reward
        self.rng: Optional[np.random.Generator] = None
        seats = self.client.seats(scenario, self.params)
        self.agents: List[str] = [s["agent"] for s in seats]
        self.moves: Dict[str, List[str]] = {}
        for s in seats:
            if not s.get("actions"):
                raise ValueError(f"scenario {scenario}: role {s['role']} declares no action set "
                                 "(env.ActionSets): it has no Discrete action space")
            self.moves[s["agent"]] = s["actions"]
        self.index = {a: {m: i for i, m in enumerate(ms)} for a, ms in self.moves.items()}
        self.obs_spaces = {a: gymnasium.spaces.Dict({
            "observation": gymnasium.spaces.Box(0, 255, (view_bytes,), np.uint8),
            "action_mask": gymnasium.spaces.Box(0, 1, (len(self.moves[a]),), np.int8),
        }) for a in self.agents}
        # features=True (a reset field): the scenario's numeric observations
        # (env.Features) replace the view's bytes, and state() answers the
        # global state.
        self.features = bool(self.fields.get("features"))
        self.feature_shapes: Dict[str, tuple] = {}
        self.state_box = None
        if self.features:
            answer = self.client.call("POST", "/seats", {"scenario": scenario, "params": self.params})
            for s in answer["seats"]:
                sp = s.get("observation")
                if sp is None:
                    raise ValueError(f"scenario {scenario} declares no numeric observation (env.Features): "
                                     "leave features out, its observations are its views' bytes")
                self.feature_shapes[s["agent"]] = tuple(sp["shape"])
                self.obs_spaces[s["agent"]]["observation"] = gymnasium.spaces.Box(
                    sp["low"], sp["high"], tuple(sp["shape"]), np.float32)
            st = answer["state"]
            self.state_box = gymnasium.spaces.Box(st["low"], st["high"], tuple(st["shape"]), np.float32)
        self.act_spaces = {a: gymnasium.spaces.Discrete(len(self.moves[a])) for a in self.agents}
        self.session: Optional[Session] = None
        self.result: Optional[dict] = None
        self.views: Dict[str, str] = {}
        self.pending: Dict[str, dict] = {}
        self.played: Dict[str, List[str]] = {}

    def open(self, seed: Optional[int]) -> dict:
        self.leave()
        fields = dict(self.fields)
        if seed is not None:
            # The episode of run seed `seed`, and the generator of the
            # resets that bring none.
            self.rng = np.random.default_rng(int(seed))
            fields["seed"] = int(seed)
        elif self.rng is not None:
            fields["seed"] = int(self.rng.integers(0, 2**63))
        self.session, result = self.client.reset(scenario=self.scenario, params=self.params, **fields)
        self.views, self.played = {}, {a: [] for a in self.agents}
        self.take(result)
        return result

    def leave(self) -> None:
        if self.session is not None and self.result is not None and not self.result["done"]:
            try:
                self.session.close()
            except (ServerError, OSError):
                pass  # gone already: the server's idle timeout ends it
        self.session = None

    def take(self, result: dict) -> None:
        self.result = result
        self.pending = {p["agent"]: p for p in result["observation"]["pending"]}
        for a, p in self.pending.items():
            self.views[a] = p["view"]

    def move(self, agent: str, action: Any) -> str:
        """The move of action (an index of the agent's action set, or the
        move's text)."""
        if isinstance(action, str):
            return action
        i = int(action)
        moves = self.moves[agent]
        if not 0 <= i < len(moves):
            raise ValueError(f"agent {agent}: action {i} is not in Discrete({len(moves)})")
        return moves[i]

    def observation(self, agent: str) -> dict:
        if self.features:
            view = np.asarray(self.result["observation"]["features"][agent], np.float32).reshape(self.feature_shapes[agent])
        else:
            view = np.zeros(self.view_bytes, np.uint8)
            b = self.views.get(agent, "").encode()[: self.view_bytes]
            view[: len(b)] = np.frombuffer(b, np.uint8)
        mask = np.zeros(len(self.moves[agent]), np.int8)
        p = self.pending.get(agent)
        if p is not None:
            for m in (p.get("choices") or []):
                mask[self.index[agent][m]] = 1
        return {"observation": view, "action_mask": mask}

    def info(self, agent: str) -> dict:
        p = self.pending.get(agent)
        obs = self.result["observation"]
        # No episode id: two environments seeded alike answer equal infos
        # (PettingZoo's seed_test); env.episode_id has it.
        info: Dict[str, Any] = {"view": self.views.get(agent, "")}
        if p is not None:
            info.update(legal=p["legal"], inbox=p["inbox"], state=p["state"], turn=p["turn"], seed=p["seed"])
        if obs["done"]:
            info.update(status=obs.get("status"), end=obs.get("end"), error=obs.get("error", ""))
            c = (obs.get("credit") or {}).get(agent)
            if obs.get("team") is not None:
                info["team"] = float(obs["team"])
                if obs.get("sides"):
                    info["sides"] = {k: float(v) for k, v in obs["sides"].items()}
            if c is not None:
                info.update(side=c.get("side", ""), side_reward=float(c["side_reward"]), reward=float(c["reward"]),
                            credit={k: float(v) for k, v in c["credit"].items()},
                            credit_turns={k: [float(x) for x in v] for k, v in c["turns"].items()},
                            credit_steps=list(c["steps"]))
                if c.get("score") is not None:
                    info["score"] = float(c["score"])
        return info

    def rewards(self) -> Dict[str, float]:
        """Every agent's reward once the episode is over: its credit from
        the reward allocator, else its score (else its side's reward)."""
        obs = self.result["observation"]
        credit = obs.get("credit")
        if credit is None:
            if obs.get("reward_allocator") and obs.get("status") in ("completed", "truncated"):
                raise RuntimeError(f"episode {obs['episode_id']}: no credit from {obs['reward_allocator']}: "
                                   f"{obs.get('credit_error', '')}")
            return {a: float(v) for a, v in (obs.get("scores") or {}).items()}
        return {a: float(c["reward"]) for a, c in credit.items()}

    def over(self) -> "tuple[bool, bool]":
        """(terminated, truncated) of every agent: the rules ended the
        episode, or a limit, the server or a failure cut it."""
        obs = self.result["observation"]
        if not obs["done"]:
            return False, False
        return obs.get("status") == "completed", obs.get("status") != "completed"


class _Common:
    """What the AEC and Parallel environments share: the episodes, the
    spaces, the moves played."""

    def _setup(self, scenario, params, base_url, token, view_bytes, render_mode, client, reset_fields, allocators, reward):
        self._e = _Episodes(scenario, params, base_url, token, view_bytes, reset_fields, client, allocators, reward)
        self.possible_agents = list(self._e.agents)
        self.agents = []
        self.render_mode = render_mode
        self.metadata = dict(self.metadata, name=f"troupe_{scenario}_v0")

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return self._e.obs_spaces[agent]

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return self._e.act_spaces[agent]

    @property
    def state_space(self):
        """The global state's space (with features=True)."""
        if self._e.state_box is None:
            raise AttributeError("state_space: open the environment with features=True (and a scenario that declares env.Features)")
        return self._e.state_box

    def state(self) -> np.ndarray:
        """The game's global state now, the true one, hidden parts included:
        for a centralised critic (MAPPO, QMIX), never for a policy. Needs
        features=True."""
        if self._e.state_box is None:
            raise NotImplementedError("state(): open the environment with features=True (and a scenario that declares env.Features)")
        return np.asarray(self._e.result["observation"]["state"], np.float32).reshape(self._e.state_box.shape)

    @property
    def episode_id(self) -> Optional[str]:
        return self._e.session.episode_id if self._e.session else None

    @property
    def played(self) -> Dict[str, List[str]]:
        """The moves given in this episode, by agent, in order."""
        return self._e.played

    def _render(self, text):
        if self.render_mode is None:
            gymnasium.logger.warn("render() without a render_mode: pass render_mode='ansi' or 'human'")
            return None
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self):
        self._e.leave()


class TroupeAECEnv(_Common, AECEnv):
    """A troupe scenario as a PettingZoo AEC environment, played on an
    environment server (`troupe env-serve`)."""

    metadata = {"render_modes": ["ansi", "human"], "name": "troupe_v0", "is_parallelizable": True}

    def __init__(self, scenario: str, params: Optional[Dict[str, Any]] = None, base_url: str = "http://127.0.0.1:8378",
                 token: Optional[str] = None, view_bytes: int = 1024, render_mode: Optional[str] = None,
                 client: Optional[Client] = None, allocators: Optional[List[str]] = None, reward: Optional[str] = None,
                 **reset_fields: Any):
        super().__init__()
        self._setup(scenario, params, base_url, token, view_bytes, render_mode, client, reset_fields, allocators, reward)

    def reset(self, seed=None, options=None):
        self._e.open(seed)
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self._update()

    def _update(self) -> None:
        e = self._e
        term, trunc = e.over()
        self.infos = {a: e.info(a) for a in self.agents}
        if term or trunc:
            rewards = e.rewards()
            for a in self.agents:
                self.terminations[a], self.truncations[a] = term, trunc
                self.rewards[a] = rewards.get(a, 0.0)
            self.agent_selection = self.agents[0] if self.agents else None
        elif e.pending:
            self.agent_selection = next(a for a in self.agents if a in e.pending)
        else:
            raise RuntimeError(f"episode {e.session.episode_id}: the server answered no pending seat before the end "
                               "(its max-wait passed: a house policy is slow)")

    def observe(self, agent):
        return self._e.observation(agent)

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        e = self._e
        move = e.move(agent, action)
        self._cumulative_rewards[agent] = 0.0
        e.take(e.session.step(move=move, seat=agent))
        e.played[agent].append(move)
        self._clear_rewards()
        self._update()
        self._accumulate_rewards()
        if self.render_mode == "human":
            self.render()

    def render(self):
        return self._render(self._e.views.get(self.agent_selection, "") if self.agent_selection else "")


class TroupeParallelEnv(_Common, ParallelEnv):
    """A troupe scenario as a PettingZoo Parallel environment, played on an
    environment server (`troupe env-serve`). At a sequential step only the
    acting agent's action is used; the others' are ignored (their masks
    are all zeros)."""

    metadata = {"render_modes": ["ansi", "human"], "name": "troupe_v0"}

    def __init__(self, scenario: str, params: Optional[Dict[str, Any]] = None, base_url: str = "http://127.0.0.1:8378",
                 token: Optional[str] = None, view_bytes: int = 1024, render_mode: Optional[str] = None,
                 client: Optional[Client] = None, allocators: Optional[List[str]] = None, reward: Optional[str] = None,
                 **reset_fields: Any):
        self._setup(scenario, params, base_url, token, view_bytes, render_mode, client, reset_fields, allocators, reward)

    def reset(self, seed=None, options=None):
        self._e.open(seed)
        self.agents = list(self.possible_agents)
        return {a: self._e.observation(a) for a in self.agents}, {a: self._e.info(a) for a in self.agents}

    def step(self, actions):
        e = self._e
        moves = {}
        for a in e.pending:
            if a not in actions:
                raise ValueError(f"agent {a} acts now and was given no action")
            moves[a] = e.move(a, actions[a])
        e.take(e.session.step(moves=moves))
        for a, m in moves.items():
            e.played[a].append(m)
        term, trunc = e.over()
        final = e.rewards() if term or trunc else {}
        live = self.agents
        obs = {a: e.observation(a) for a in live}
        rewards = {a: final.get(a, 0.0) for a in live}
        terminations = {a: term for a in live}
        truncations = {a: trunc for a in live}
        infos = {a: e.info(a) for a in live}
        if term or trunc:
            self.agents = []
        elif not e.pending:
            raise RuntimeError(f"episode {e.session.episode_id}: the server answered no pending seat before the end")
        if self.render_mode == "human":
            self.render()
        return obs, rewards, terminations, truncations, infos

    def render(self):
        return self._render("\n".join(f"{a}: {v}" for a, v in self._e.views.items()))


def env(scenario: str, **kwargs: Any) -> TroupeAECEnv:
    """The AEC environment of scenario (see TroupeAECEnv)."""
    return TroupeAECEnv(scenario, **kwargs)


def parallel_env(scenario: str, **kwargs: Any) -> TroupeParallelEnv:
    """The Parallel environment of scenario (see TroupeParallelEnv)."""
    return TroupeParallelEnv(scenario, **kwargs)
