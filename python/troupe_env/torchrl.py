"""troupe's vector environment as a TorchRL environment.

TorchRLVectorEnv wraps a troupe_env.vector.TroupeVectorEnv (num_envs
episodes stepped in one round trip) as a TorchRL EnvBase of batch size
[num_envs], with every agent in one group, as TorchRL's multi-agent
environments (VMAS, PettingZoo) lay them out:

    (group, "observation")   [num_envs, num_agents, *observation_shape]
    (group, "action_mask")   [num_envs, num_agents, num_actions] (bool)
    (group, "action")        [num_envs, num_agents] (an index into the agent's action set)
    (group, "reward")        [num_envs, num_agents, 1]: the vector's reward (score, team or
                             an allocator's credit) at the step an episode ends, else 0
    (group, "info", "team")  [num_envs, num_agents]: the team reward G of an episode that
                             ended at this step, else NaN; (group, "info", "credit.NAME") the
                             same for each allocator the vector computes (allocators=[...])
    "done", "terminated", "truncated"  [num_envs, 1], and per agent under group,
                             [num_envs, num_agents, 1] (what TorchRL's multi-agent losses read)

The vector resets an episode the step it ends (Gymnasium's SAME_STEP): the
step answers the ended episode's final observation where the vector was made
with final_observations=True (else the next episode's first one), and the
reset TorchRL then asks for those envs answers the next episode's first
observation without a round trip. A reset with no "_reset" entry (the first,
or env.reset() by hand) restarts every episode on the server, from the seed
set_seed gave.

Needs torch, tensordict and torchrl (the torchrl extra) and numpy.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

__all__ = ["TorchRLVectorEnv"]


class TorchRLVectorEnv(EnvBase):
    """A TroupeVectorEnv as a TorchRL EnvBase: see the module's doc."""

    def __init__(self, vec, group: Optional[str] = None, device="cpu"):
        super().__init__(device=device, batch_size=torch.Size([vec.num_envs]))
        self.vec = vec
        self.group = group or vec.roles[0]
        ne, n, na = vec.num_envs, vec.num_agents, vec.num_actions
        dtype = torch.float32 if vec.features else torch.uint8
        obs_shape = tuple(vec.observation_shape)
        self.observation_spec = Composite({self.group: Composite({
            "observation": Unbounded(shape=(ne, n) + obs_shape, dtype=dtype, device=device),
            "action_mask": Categorical(2, shape=(ne, n, na), dtype=torch.bool, device=device),
            "info": Composite({k: Unbounded(shape=(ne, n), dtype=torch.float64, device=device)
                               for k in ["team"] + ["credit." + a for a in vec.allocators]}, shape=(ne, n)),
        }, shape=(ne, n))}, shape=(ne,))
        self.action_spec = Composite({self.group: Composite({
            "action": Categorical(na, shape=(ne, n), dtype=torch.int64, device=device)}, shape=(ne, n))}, shape=(ne,))
        self.reward_spec = Composite({self.group: Composite({
            "reward": Unbounded(shape=(ne, n, 1), device=device)}, shape=(ne, n))}, shape=(ne,))
        flags = ("done", "terminated", "truncated")
        self.done_spec = Composite({
            **{k: Categorical(2, shape=(ne, 1), dtype=torch.bool, device=device) for k in flags},
            self.group: Composite({k: Categorical(2, shape=(ne, n, 1), dtype=torch.bool, device=device) for k in flags},
                                  shape=(ne, n)),
        }, shape=(ne,))
        self._seed: Optional[int] = None
        self._next: Optional[TensorDict] = None  # the observations of the episodes the vector restarted

    def _observations(self, obs: np.ndarray, masks: np.ndarray, final_info=None) -> TensorDict:
        ne, n = self.vec.num_envs, self.vec.num_agents
        info = {k: np.full((ne, n), np.nan) for k in ["team"] + ["credit." + a for a in self.vec.allocators]}
        for e, fi in enumerate(final_info if final_info is not None else ()):
            if fi is not None:
                info["team"][e] = fi["team"]
                for a, c in (fi.get("credit") or {}).items():
                    info["credit." + a][e] = c
        return TensorDict({
            "observation": torch.as_tensor(np.array(obs)),
            "action_mask": torch.as_tensor(np.array(masks, dtype=bool)),
            "info": TensorDict({k: torch.as_tensor(v) for k, v in info.items()}, [ne, n]),
        }, [ne, n], device=self.device)

    def _reset(self, tensordict: Optional[TensorDictBase] = None, **kwargs) -> TensorDictBase:
        ne = self.vec.num_envs
        partial = tensordict is not None and any(
            (k == "_reset") or (isinstance(k, tuple) and k[-1] == "_reset") for k in tensordict.keys(True))
        if partial and self._next is not None:
            group = self._next  # autoreset: the vector restarted them when they ended
        else:
            obs, infos = self.vec.reset(seed=self._seed)
            self._seed = None
            group = self._observations(obs, infos["action_mask"])
        self._next = None
        return self._with_flags(group, torch.zeros(ne, 1, dtype=torch.bool), torch.zeros(ne, 1, dtype=torch.bool))

    def _with_flags(self, group: TensorDict, te: torch.Tensor, tr: torch.Tensor) -> TensorDict:
        ne, n = self.vec.num_envs, self.vec.num_agents
        for k, v in (("done", te | tr), ("terminated", te), ("truncated", tr)):
            group.set(k, v.unsqueeze(1).expand(ne, n, 1).clone())
        return TensorDict({self.group: group, "done": te | tr, "terminated": te, "truncated": tr}, [ne],
                          device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        ne = self.vec.num_envs
        actions = tensordict.get((self.group, "action")).cpu().numpy().astype(np.int32)
        obs, rewards, term, trunc, infos = self.vec.step(actions)
        final_obs = np.array(obs)
        if "final_observation" in infos:
            final_obs[infos["_final"]] = infos["final_observation"][infos["_final"]]
        self._next = self._observations(obs, infos["action_mask"])
        group = self._observations(final_obs, infos["action_mask"], infos.get("final_info"))
        group.set("reward", torch.as_tensor(np.array(rewards, dtype=np.float32)).unsqueeze(-1))
        return self._with_flags(group, torch.as_tensor(np.array(term[:, :1])), torch.as_tensor(np.array(trunc[:, :1])))

    def _set_seed(self, seed: Optional[int]):
        self._seed = seed

    def close(self, **kwargs):
        self.vec.close()
        super().close(**kwargs)
