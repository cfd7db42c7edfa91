"""Runs troupe's samples through slime's real rollout code.

    SLIME_DIR=/path/to/slime python3 slime_real_check.py SAMPLES.jsonl [SAMPLES.jsonl ...]

Each SAMPLES.jsonl is troupe output in the nested layout (`troupe run --layout nested`: one
episode per line, a JSON array of its samples), per-turn or merged (`--merge-turns`). For each
file this imports slime from SLIME_DIR (a checkout of github.com/THUDM/slime) and runs, with
slime's default flags:

- `slime.rollout.sglang_rollout.generate_rollout`, whose `--custom-generate-function-path` is
  `troupe_generate` below: it returns one episode's samples, `Sample.from_dict` of each, as the
  fan-out list slime's agents return (the same contract as troupe_slime.custom_generate, without
  the HTTP service in between);
- `RolloutManager._convert_samples_to_train_data` (the reward post-process, loss masks, per-rollout
  mask sums, rollout log-probs);
- `slime.utils.dp_schedule.build_dp_schedule` on two data-parallel ranks, by rollout id.

Only the modules that need a GPU, a cluster or the network are stubbed: torch (a few tensor
operations over numpy, for the GRPO normalisation), ray, sglang, transformers, httpx, aiohttp, tqdm
and PIL; the network calls of slime's abort step (the router's /workers) answer no workers. It
prints one JSON line per file with what slime made of it, and exits non-zero on any error.
"""

import argparse
import asyncio
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types

import numpy as np

STUBBED = ["torch", "ray", "sglang", "transformers", "httpx", "aiohttp", "tqdm", "PIL"]
# Dependencies of slime's reward models (rm_hub) and data loading, which troupe's samples never
# reach (their rewards are set): stubbed only when this Python lacks them.
IF_MISSING = ["sglang_router", "wandb", "urllib3", "requests", "sympy", "pylatexenc", "math_verify", "latex2sympy2", "datasets", "pandas", "pyarrow", "pybase64", "regex"]


class _Anything:
    """A stand-in that is every class, function and constant a stubbed module offers."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Anything()

    def __getattr__(self, name):
        return _Anything()

    def __mro_entries__(self, bases):
        return (object,)

    def __iter__(self):
        return iter(())

    def __bool__(self):  # torch.cuda.is_available(): no accelerator here
        return False

    def __eq__(self, o):
        return self is o

    __hash__ = object.__hash__

    def __lt__(self, o):
        return False

    def __or__(self, o):  # annotations: httpx.AsyncClient | None
        return self

    __ror__ = __or__

    def __getitem__(self, k):  # annotations: torch.Tensor[...]
        return self

    __gt__ = __le__ = __ge__ = __lt__

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Tensor:
    """The few torch tensor operations slime's reward normalisation uses, over numpy."""

    def __init__(self, a):
        self.a = np.asarray(a, dtype=np.float64)

    @property
    def shape(self):
        return self.a.shape

    def reshape(self, *shape):
        return _Tensor(self.a.reshape(*shape))

    view = reshape

    def mean(self, dim=None, keepdim=False):
        return _Tensor(self.a.mean(axis=dim, keepdims=keepdim))

    def std(self, dim=None, keepdim=False):
        return _Tensor(self.a.std(axis=dim, keepdims=keepdim, ddof=1))  # torch's default: unbiased

    def flatten(self):
        return _Tensor(self.a.reshape(-1))

    def tolist(self):
        return self.a.tolist()

    def __sub__(self, o):
        return _Tensor(self.a - (o.a if isinstance(o, _Tensor) else o))

    def __add__(self, o):
        return _Tensor(self.a + (o.a if isinstance(o, _Tensor) else o))

    def __truediv__(self, o):
        return _Tensor(self.a / (o.a if isinstance(o, _Tensor) else o))


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        if spec.name == "torch":
            m.tensor = lambda data, dtype=None: _Tensor(data)
            m.float = "float"
            m.Tensor = _Tensor
        if spec.name == "ray":
            # @ray.remote and @ray.remote(num_gpus=...) leave the class as it is.
            m.remote = lambda *a, **k: a[0] if len(a) == 1 and not k and isinstance(a[0], type) else (lambda c: c)
        if spec.name == "tqdm":
            m.tqdm = _Anything
        return m

    def exec_module(self, module):
        pass


# The episodes troupe_generate hands out, in order, and the next one's number.
EPISODES = []
NEXT = [0]


async def troupe_generate(args, sample, sampling_params):
    """slime's custom-generate contract: a list of the episode's samples, one rollout_id."""
    from slime.utils.types import Sample

    episode = EPISODES[NEXT[0] % len(EPISODES)]
    NEXT[0] += 1
    out = [Sample.from_dict(dict(d)) for d in episode]
    for s in out:
        s.group_index, s.index = sample.group_index, sample.index
    return out


class DataSource:
    """slime's data source contract: groups of n_samples_per_prompt (2) prompt samples, each its own index."""

    def __init__(self):
        self.n = 0

    def get_samples(self, n):
        from slime.utils.types import Sample

        groups = []
        for _ in range(n):
            g = self.n // 2
            groups.append([Sample(prompt="troupe episode", index=self.n + j, group_index=g) for j in range(2)])
            self.n += 2
        return groups

    def add_samples(self, samples):
        pass


def slime_args(n_rollouts):
    from slime.utils.arguments import get_slime_extra_args_provider

    parser = argparse.ArgumentParser()
    get_slime_extra_args_provider()(parser)
    args, _ = parser.parse_known_args(
        ["--custom-generate-function-path", "slime_real_check.troupe_generate", "--rollout-batch-size", str(n_rollouts)]
    )
    # Megatron's and the cluster's flags, which slime's own parser does not define.
    # GRPO groups of two: each prompt's two copies are two episodes.
    args.n_samples_per_prompt = 2
    args.rollout_batch_size = n_rollouts // 2
    args.over_sampling_batch_size = args.rollout_batch_size
    args.rollout_global_dataset = True
    args.global_batch_size = n_rollouts
    args.micro_batch_size = 1
    # Fan-out makes the number of samples per rollout vary, which slime's
    # static micro-batches refuse unless it divides evenly: pack by tokens.
    args.use_dynamic_batch_size = True
    args.max_tokens_per_gpu = 16384
    args.balance_data = False
    args.sglang_server_concurrency = getattr(args, "sglang_server_concurrency", 64) or 64
    args.sglang_dp_size = 1
    args.sglang_router_ip, args.sglang_router_port = "127.0.0.1", 0
    args.hf_checkpoint = None
    return args


def check(path):
    EPISODES.clear()
    NEXT[0] = 0
    with open(path) as f:
        for line in f:
            if line.strip():
                EPISODES.append(json.loads(line))
    if not EPISODES or len(EPISODES) % 2:
        raise SystemExit(f"{path}: {len(EPISODES)} episodes: want an even number (GRPO groups of two)")

    import slime.rollout.sglang_rollout as sr
    from slime.ray.rollout import RolloutManager
    from slime.utils.dp_schedule import build_dp_schedule
    from slime.utils.types import Sample

    async def no_workers(url, *a, **k):
        return {"workers": []}

    async def idle(urls, *a, **k):
        return None

    sr.get, sr.abort_servers_until_idle = no_workers, idle
    sr.get_rollout_num_engines = lambda args: 1
    sr.load_tokenizer = lambda *a, **k: None
    sr.load_processor = lambda *a, **k: None
    sr.GenerateState._instances = {} if hasattr(sr.GenerateState, "_instances") else None

    args = slime_args(len(EPISODES))
    out = sr.generate_rollout(args, 0, DataSource())
    groups = out.samples
    assert len(groups) == len(EPISODES) // 2, (len(groups), len(EPISODES))

    manager = object.__new__(RolloutManager)
    manager.args = args
    manager.custom_reward_post_process_func = None
    manager.custom_convert_samples_to_train_data_func = None
    data = groups
    while isinstance(data[0], list):
        data = [s for g in data for s in g]
    for s in data:
        assert isinstance(s, Sample)
    train = manager._convert_samples_to_train_data(data)

    config = {"dp_size": 2, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1}
    lengths = [len(t) for t in train["tokens"]]
    partitions, mbs, num_mbs, gbs = build_dp_schedule(
        args, config, lengths, global_batch_size=args.global_batch_size, rollout_indices=train["rollout_ids"]
    )
    placed = sorted(i for p in partitions for i in p)
    assert placed == list(range(len(data))), "the schedule lost or duplicated samples"
    print(json.dumps({
        "file": os.path.basename(path),
        "episodes": len(EPISODES),
        "samples": len(data),
        "rollouts": len(set(train["rollout_ids"])),
        "trained_tokens": sum(sum(m) for m in train["loss_masks"]),
        "response_tokens": sum(train["response_lengths"]),
        "rollout_log_probs": "rollout_log_probs" in train,
        "raw_rewards": [round(r, 4) for r in train["raw_reward"][:6]],
        "rewards": [round(r, 4) for r in train["rewards"][:6]],
        "dp_partition_sizes": [len(p) for p in partitions],
        "global_batch_sizes": gbs,
        "num_microbatches": num_mbs,
    }))


def main():
    slime_dir = os.environ.get("SLIME_DIR")
    if not slime_dir:
        raise SystemExit("set SLIME_DIR to a checkout of github.com/THUDM/slime")
    import importlib.util

    STUBBED.extend(m for m in IF_MISSING if importlib.util.find_spec(m) is None)
    sys.meta_path.insert(0, _StubFinder())
    sys.path.insert(0, slime_dir)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.modules.setdefault("slime_real_check", sys.modules[__name__])
    for path in sys.argv[1:]:
        check(path)


if __name__ == "__main__":
    main()
