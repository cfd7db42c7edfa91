"""PettingZoo wrappers for trainers that read more than PettingZoo asks.

TorchRL's PettingZooWrapper (and BenchMARL on top of it) turns every entry
of an agent's infos into a tensor, with the shape it had at the first
reset: strings (the view, the legal moves, the episode id) cannot be, and
an entry that appears only at the end of an episode (a credit, the team
reward) has no place. numeric_infos keeps the entries a trainer names,
each a number, present at every reset and step (its default until the
environment gives it).

Needs pettingzoo; nothing here reaches the network.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

from pettingzoo.utils.wrappers import BaseParallelWrapper

__all__ = ["NumericInfos", "numeric_infos"]


class NumericInfos(BaseParallelWrapper):
    """A Parallel environment whose infos hold exactly the keys of
    defaults, each a float: the environment's value where its infos have
    one (a dotted key, "credit.difference", reads a nested dict), else
    the default. Everything else in infos is dropped."""

    def __init__(self, env, defaults: Mapping[str, float]):
        super().__init__(env)
        self.defaults: Dict[str, float] = {k: float(v) for k, v in defaults.items()}

    def _filter(self, infos: Dict[str, dict]) -> Dict[str, dict]:
        return {a: {k: _lookup(info, k, d) for k, d in self.defaults.items()} for a, info in infos.items()}

    def reset(self, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return obs, self._filter(infos)

    def step(self, actions):
        obs, rewards, terms, truncs, infos = self.env.step(actions)
        return obs, rewards, terms, truncs, self._filter(infos)


def _lookup(info: Mapping[str, Any], key: str, default: float) -> float:
    v: Any = info
    for part in key.split("."):
        if not isinstance(v, Mapping) or part not in v:
            return default
        v = v[part]
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"infos[{key!r}] is {v!r}, not a number") from None


def numeric_infos(env, defaults: Mapping[str, float] = {}) -> NumericInfos:
    """env (a PettingZoo Parallel environment) with numeric infos: see
    NumericInfos. With no defaults, infos are empty dicts."""
    return NumericInfos(env, defaults)
