"""troupe as slime's rollout engine: a custom-generate function and a reward
post-process function for THUDM/slime.

Every slime prompt becomes one troupe multi-agent episode, played by a
`troupe serve` rollout service. The agents' turns come back as sibling
Samples that share one rollout_id (slime's "fan-out"), each with its reward
already set by troupe's allocators, so slime's reward model is not called.

    --custom-generate-function-path troupe_slime.custom_generate
    --custom-reward-post-process-path troupe_slime.post_process_rewards

Standard library only. Settings come from slime's args (``args.troupe_url``
and friends, e.g. from the YAML file given to slime's --custom-config-path),
then from the environment (``TROUPE_URL`` ...), then from defaults; a dataset
row can override the episode's settings under ``metadata["troupe"]``. See
README.md for every setting.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
import urllib.error
import urllib.request
from collections import defaultdict

__all__ = [
    "TroupeError",
    "build_request",
    "custom_generate",
    "post_process_rewards",
    "post_process_rewards_by_role",
    "normalize_rewards",
]

DEFAULT_URL = "http://127.0.0.1:8377"

# slime's sampling parameter names -> the rollout service's names. The rest
# (skip_special_tokens, no_stop_trim, custom_params, ...) travel in "extra".
_SAMPLING_NAMES = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_new_tokens": "max_tokens",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "sampling_seed": "seed",
}

# Keys a dataset row may set under metadata["troupe"].
_ROW_KEYS = {
    "scenario", "params", "policy", "policies", "allocators", "reward_format",
    "emit", "limits", "invalid", "seed", "policy_seed",
}

# Statuses on which a call is retried: the service is draining, restarting
# or behind a proxy that lost it.
_RETRY_STATUSES = {502, 503, 504}


class TroupeError(RuntimeError):
    """An error answered by the rollout service (status, code, message), or
    the service could not be reached."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"troupe service: {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def _setting(args, name: str, default=None):
    """args.troupe_<name>, else $TROUPE_<NAME>, else default."""
    value = getattr(args, "troupe_" + name, None)
    if value is None:
        value = os.environ.get("TROUPE_" + name.upper())
    return default if value is None or value == "" else value


def _json_setting(args, name: str, default=None):
    """A setting that is a JSON value when given as text."""
    value = _setting(args, name)
    if value is None:
        return default
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"troupe setting {name}: {value!r} is not JSON: {e}") from None
    return value


def _list_setting(args, name: str, sep: str | None):
    """A list given as a list, as JSON text, or (when sep is set) as
    sep-separated text."""
    value = _setting(args, name)
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = json.loads(text)
        elif sep is None:
            value = [text]
        else:
            value = [part.strip() for part in text.split(sep) if part.strip()]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"troupe setting {name}: want a list, got {value!r}")
    return list(value)


def _sampling(sampling_params) -> dict:
    out, extra = {}, {}
    for key, value in (sampling_params or {}).items():
        if value is None:
            continue
        if key in _SAMPLING_NAMES:
            out[_SAMPLING_NAMES[key]] = list(value) if isinstance(value, tuple) else value
        else:
            extra[key] = value
    if extra:
        out["extra"] = extra
    return out


def build_request(args, sample, sampling_params) -> dict:
    """The rollout request for one slime sample: one episode (n=1) of the
    configured scenario, under slime's group_index and the sample's
    rollout_id (else its index), with the row's prompt and label and
    slime's sampling parameters."""
    metadata = getattr(sample, "metadata", None) or {}
    row = metadata.get("troupe") or {}
    if not isinstance(row, dict):
        raise ValueError(f'sample {sample.index}: metadata["troupe"] must be a dict, got {type(row).__name__}')
    unknown = sorted(set(row) - _ROW_KEYS)
    if unknown:
        raise ValueError(f'sample {sample.index}: metadata["troupe"] has unknown keys {unknown} (allowed: {sorted(_ROW_KEYS)})')

    scenario = row.get("scenario") or _setting(args, "scenario")
    if not scenario:
        raise ValueError("no troupe scenario: set args.troupe_scenario, $TROUPE_SCENARIO or the row's metadata['troupe']['scenario']")
    req = {"scenario": scenario, "n": 1}

    params = dict(_json_setting(args, "params", {}) or {})
    params.update(row.get("params") or {})
    if params:
        req["params"] = params

    prompt = getattr(sample, "prompt", None)
    if prompt not in (None, ""):
        req["prompt"] = prompt
    if getattr(sample, "label", None) is not None:
        req["label"] = sample.label
    if sample.group_index is not None:
        req["group_index"] = sample.group_index
    if sample.index is not None:
        req["index"] = sample.index
    rollout_id = getattr(sample, "rollout_id", None)
    if rollout_id is None:
        rollout_id = sample.index
    if rollout_id is not None:
        req["rollout_id"] = rollout_id
    if getattr(sample, "session_id", None):
        req["session_id"] = sample.session_id

    sampling = _sampling(sampling_params)
    if sampling:
        req["sampling"] = sampling

    settings = {
        "policy": row.get("policy", _setting(args, "policy")),
        "policies": row.get("policies", _json_setting(args, "policies")),
        "allocators": row.get("allocators", _list_setting(args, "allocators", sep=None)),
        "emit": row.get("emit", _list_setting(args, "emit", sep=",")),
        "limits": row.get("limits", _json_setting(args, "limits")),
        "invalid": row.get("invalid", _setting(args, "invalid")),
        "seed": row.get("seed", _json_setting(args, "seed")),
        "policy_seed": row.get("policy_seed"),
    }
    # Dict rewards are what slime's --reward-key reads.
    reward_format = row.get("reward_format", _setting(args, "reward_format"))
    if reward_format is None and getattr(args, "reward_key", None):
        reward_format = "dict"
    settings["reward_format"] = reward_format
    req.update({k: v for k, v in settings.items() if v is not None})
    return req


def _opener():
    # The service usually runs on the same host: do not send loopback calls
    # through an http_proxy meant for the internet.
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _post(url: str, body: bytes, token: str | None, timeout: float, retries: int) -> dict:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    opener = _opener()
    for attempt in range(retries + 1):
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with opener.open(req, timeout=timeout) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:
            err = _decode_error(e)
            if e.code not in _RETRY_STATUSES or attempt == retries:
                raise err from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            if attempt == retries:
                raise TroupeError(0, "unreachable", f"POST {url}: {e}") from None
        # Exponential backoff with jitter, so that many workers do not come
        # back at the same instant.
        time.sleep(min(0.25 * 2**attempt, 8.0) * (0.5 + random.random() / 2))
    raise AssertionError("unreachable")


def _decode_error(e: urllib.error.HTTPError) -> TroupeError:
    raw = e.read()
    try:
        body = json.loads(raw)["error"]
        return TroupeError(e.code, body["code"], body["message"])
    except (ValueError, KeyError, TypeError):
        return TroupeError(e.code, "http_error", raw[:200].decode("utf-8", "replace"))


async def custom_generate(args, sample, sampling_params):
    """slime's custom generate function: plays one troupe episode for the
    prompt of ``sample`` and returns its agents' turns as a list of Samples
    (always a list, even of zero or one), all sharing the episode's
    rollout_id, with troupe's rewards set.

    Each returned Sample is built with ``type(sample).from_dict`` (slime's
    Sample class), and keeps slime's group_index, index, label and
    session_id; troupe's own per-turn number is kept in
    metadata["troupe_index"], and the row's metadata keys are carried over
    where troupe did not set them.
    """
    request = build_request(args, sample, sampling_params)
    url = str(_setting(args, "url", DEFAULT_URL)).rstrip("/") + "/v1/rollouts"
    body = json.dumps(request).encode()
    answer = await asyncio.to_thread(
        _post,
        url,
        body,
        _setting(args, "token"),
        float(_setting(args, "timeout", 900)),
        int(_setting(args, "retries", 3)),
    )
    cls = type(sample)
    out = []
    for rollout in answer["rollouts"]:
        for d in rollout["samples"]:
            s = cls.from_dict(d)
            s.metadata["troupe_index"] = d["index"]
            if sample.group_index is not None:
                s.group_index = sample.group_index
            # Siblings keep the slime sample's index, as slime's own fan-out
            # does; they are told apart by rollout_id and metadata.
            s.index = sample.index
            if getattr(sample, "label", None) is not None:
                s.label = sample.label
            if getattr(sample, "session_id", None):
                s.session_id = sample.session_id
            for key, value in (getattr(sample, "metadata", None) or {}).items():
                s.metadata.setdefault(key, value)
            out.append(s)
    return out


def _flatten(samples):
    out = []
    for s in samples:
        if isinstance(s, (list, tuple)):
            out.extend(_flatten(s))
        else:
            out.append(s)
    return out


def _reward_value(args, sample, position: int) -> float:
    if sample.reward is None:
        raise ValueError(f"sample at position {position} (index {sample.index}) has no reward")
    key = getattr(args, "reward_key", None)
    if isinstance(sample.reward, dict):
        if not key:
            raise ValueError(f"sample at position {position} has a dict reward {sorted(sample.reward)}: set --reward-key")
        if key not in sample.reward:
            raise ValueError(f"sample at position {position}: reward has no key {key!r} (it has {sorted(sample.reward)})")
        return float(sample.reward[key])
    return float(sample.reward)


def normalize_rewards(rewards, group_keys, rollout_keys, *, std: bool, eps: float = 1e-6):
    """Group-normalise rewards: within each group key, subtract the group
    mean (and divide by the group std + eps when ``std``).

    Every rollout counts once in its group, however many sibling samples
    it has: a sample's weight is 1/(its rollout's samples in the group).
    With one sample per rollout this is exactly slime's GRPO normalisation
    (mean, unbiased std, + 1e-6); with fan-out, a 9-turn episode does not
    weigh 9 times a 3-turn one. A group of one rollout is only centred.
    """
    if not (len(rewards) == len(group_keys) == len(rollout_keys)):
        raise ValueError("rewards, group_keys and rollout_keys must have the same length")
    positions = defaultdict(list)
    for pos, key in enumerate(group_keys):
        positions[key].append(pos)
    out = [0.0] * len(rewards)
    for members in positions.values():
        count = defaultdict(int)
        for p in members:
            count[rollout_keys[p]] += 1
        weight = {p: 1.0 / count[rollout_keys[p]] for p in members}
        n_rollouts = len(count)
        mean = sum(weight[p] * rewards[p] for p in members) / n_rollouts
        scale = 1.0
        if std and n_rollouts > 1:
            var = sum(weight[p] * (rewards[p] - mean) ** 2 for p in members) / (n_rollouts - 1)
            scale = math.sqrt(var) + eps
        for p in members:
            out[p] = (rewards[p] - mean) / scale
    return out


def _post_process(args, samples, by_role: bool):
    flat = _flatten(samples)
    raw = [_reward_value(args, s, i) for i, s in enumerate(flat)]
    estimator = getattr(args, "advantage_estimator", "grpo")
    if estimator not in ("grpo", "gspo", "reinforce_plus_plus_baseline") or not getattr(args, "rewards_normalization", True):
        return raw, list(raw)
    use_std = estimator in ("grpo", "gspo") and getattr(args, "grpo_std_normalization", True)
    group_keys, rollout_keys = [], []
    for i, s in enumerate(flat):
        if s.group_index is None:
            raise ValueError(f"sample at position {i} (index {s.index}) has no group_index: cannot normalise by group")
        role = (s.metadata or {}).get("role") if by_role else None
        group_keys.append((s.group_index, role))
        rid = getattr(s, "rollout_id", None)
        # A sample without a rollout_id is a rollout of its own.
        rollout_keys.append(("rollout", rid) if rid is not None else ("position", i))
    return raw, normalize_rewards(raw, group_keys, rollout_keys, std=use_std)


def post_process_rewards(args, samples):
    """slime's --custom-reward-post-process-path function: normalises
    rewards by group_index (slime's default reshapes the batch by position
    and mixes groups once fan-out changes the sample count, slime #1414).
    Returns (raw_rewards, rewards), one of each per sample, as slime
    expects. It follows slime's switches: --advantage-estimator (grpo,
    gspo and reinforce_plus_plus_baseline normalise),
    --disable-rewards-normalization, --disable-grpo-std-normalization and
    --reward-key."""
    return _post_process(args, samples, by_role=False)


def post_process_rewards_by_role(args, samples):
    """post_process_rewards with one group per (group_index, role): each
    role is compared with the same role in the other episodes of its prompt
    (metadata["role"]), as in role-conditioned self-play."""
    return _post_process(args, samples, by_role=True)
