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

The HTTP client is native asyncio (asyncio.open_connection, HTTP/1.1, one
connection per call): no thread is held per call, so as many calls are in
flight as slime lets run at once (its semaphore of
sglang_server_concurrency x rollout engines), not the default executor's
min(32, cpu + 4).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import ssl
import urllib.parse
import weakref
from collections import defaultdict

__all__ = [
    "TroupeError",
    "PostProcessed",
    "build_request",
    "custom_generate",
    "post_process_rewards",
    "post_process_rewards_by_role",
    "normalize_rewards",
    "concurrency_limit",
]

logger = logging.getLogger("troupe_slime")

DEFAULT_URL = "http://127.0.0.1:8377"

# slime's sampling parameter names (as slime's GenerateState and its
# evaluation build them) -> the rollout service's names (protocol.Sampling).
_SAMPLING_NAMES = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_new_tokens": "max_tokens",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "sampling_seed": "sampling_seed",
    "skip_special_tokens": "skip_special_tokens",
    "no_stop_trim": "no_stop_trim",
    "spaces_between_special_tokens": "spaces_between_special_tokens",
    "repetition_penalty": "repetition_penalty",
    "min_new_tokens": "min_tokens",
}

# Keys a dataset row may set under metadata["troupe"].
_ROW_KEYS = {
    "scenario", "params", "policy", "policies", "allocators", "reward_format",
    "emit", "limits", "invalid", "seed", "policy_seed", "tree", "roles",
    "max_context",
}

# Keys of a role's settings (troupe serve's rollout.RoleSettings).
_ROLE_KEYS = {"endpoint", "model", "sampling", "max_context", "frozen"}

# The merged rewards troupe serve knows (trajectories.MergeReward).
_MERGE_REWARDS = ("mean", "sum", "last")

# A call is retried only when the service cannot have played it: the
# connection was refused (nothing was sent), or it answered 503 (draining:
# troupe serve refuses before playing). A timeout, a connection lost after
# the request was sent, a 502 or a 504 may come after the service played
# the episode and updated its stateful allocators (RAE's baselines), and a
# second try would update them twice: those raise.
_RETRY_STATUSES = {503}

# Sample statuses of turns that are not a training signal unless the user
# asks to keep them (troupe_keep_failed).
_FAILED_STATUSES = {"aborted", "failed"}

# slime's --advantage-estimator choices (slime/utils/arguments.py) and what
# its default reward post-process does for each (slime/ray/rollout.py).
_CENTRED_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
_STD_ESTIMATORS = ("grpo", "gspo", "cispo")
_RAW_ESTIMATORS = ("reinforce_plus_plus", "ppo")


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


def _bool_setting(args, name: str, default: bool = False) -> bool:
    value = _setting(args, name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"troupe setting {name}: want a boolean, got {value!r}")


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


def _check_top_p(args, sampling_params, evaluation: bool):
    """slime trains with top-p < 1 only on samples that carry
    rollout_top_p_token_ids / _offsets (it asserts them in
    _convert_samples_to_train_data); OpenAI-compatible servers do not
    return them, so troupe refuses such a run up front."""
    params = sampling_params or {}
    custom = params.get("custom_params") or {}
    wants_ids = isinstance(custom, dict) and bool(custom.get("return_top_p_token_ids"))
    if evaluation and not wants_ids:
        return  # evaluation does not train: any top_p is fine
    top_p = params.get("top_p")
    rollout_top_p = getattr(args, "rollout_top_p", None)
    if wants_ids or (top_p is not None and top_p < 1.0) or (rollout_top_p is not None and rollout_top_p != 1.0):
        raise ValueError(
            f"troupe cannot train with --rollout-top-p {rollout_top_p if rollout_top_p is not None else top_p} "
            "(< 1.0): slime then requires rollout_top_p_token_ids on every sample, which troupe's LLM agents "
            "cannot get from OpenAI-compatible servers; use --rollout-top-p 1.0 (slime's default)"
        )


def _sampling(sampling_params, unset=()) -> dict:
    """slime's sampling_params in the rollout service's terms. None means
    "not set" and is left out, as is max_new_tokens -1; top_k -1 (slime's
    default: off) is sent as -1, which the service reads as "no top-k" and
    sends as each server kind says it (nothing to vLLM and SGLang, top_k 0
    and min_p 0 to llama.cpp). Keys
    troupe does not know travel under "extra" to the model server. Keys in
    ``unset`` (troupe_unset_sampling) are not sent at all."""
    out, extra = {}, {}
    for key, value in (sampling_params or {}).items():
        if value is None or key in unset:
            continue
        if key == "max_new_tokens" and value == -1:
            continue
        if key == "custom_params":
            # slime adds {"return_top_p_token_ids": true} when top_p != 1,
            # refused by _check_top_p; anything else is SGLang's custom
            # logit processor parameters, passed through.
            if not isinstance(value, dict):
                extra["custom_params"] = value
                continue
            custom = {k: v for k, v in value.items() if k != "return_top_p_token_ids"}
            if custom:
                extra["custom_params"] = custom
            continue
        if key in ("stop", "stop_token_ids"):
            if isinstance(value, (str, int)):
                value = [value]
            value = list(value)
            if not value:
                continue
        if key in _SAMPLING_NAMES:
            out[_SAMPLING_NAMES[key]] = value
        else:
            extra[key] = value
    if extra:
        out["extra"] = extra
    return out


def _roles(value, where: str):
    """A roles setting, checked: {role: {endpoint, model, sampling,
    max_context, frozen}}. A role's sampling is slime-named as the
    sampling_params are (max_new_tokens, min_new_tokens) and mapped the
    same way."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: roles must be a dict of role -> settings, got {type(value).__name__}")
    out = {}
    for role, settings in value.items():
        if not isinstance(settings, dict):
            raise ValueError(f"{where}: roles[{role!r}] must be a dict, got {type(settings).__name__}")
        unknown = sorted(set(settings) - _ROLE_KEYS)
        if unknown:
            raise ValueError(f"{where}: roles[{role!r}] has unknown keys {unknown} (allowed: {sorted(_ROLE_KEYS)})")
        rs = dict(settings)
        if "sampling" in rs:
            rs["sampling"] = _sampling(rs["sampling"])
        out[role] = rs
    return out


def _max_context(args, row, evaluation: bool):
    """The context budget every LLM role plays with: the row's, else
    troupe_max_context, else slime's own context length
    (--eval-max-context-len when evaluating, which slime defaults to
    --rollout-max-context-len, else --rollout-max-context-len); None when
    none is set (the service's --llm-max-context)."""
    value = row.get("max_context")
    if value is None:
        value = _setting(args, "max_context")
    if value is None and evaluation:
        value = getattr(args, "eval_max_context_len", None)
    if value is None:
        value = getattr(args, "rollout_max_context_len", None)
    if value is None:
        return None
    n = int(value)
    if n < 1:
        raise ValueError(f"troupe max_context: want a budget in tokens >= 1, got {value!r}")
    return n


def _reward_key(args, evaluation: bool):
    if evaluation:
        return getattr(args, "eval_reward_key", None) or getattr(args, "reward_key", None)
    return getattr(args, "reward_key", None)


def build_request(args, sample, sampling_params, *, evaluation: bool = False) -> dict:
    """The rollout request for one slime sample: one episode (n=1) of the
    configured scenario, under slime's group_index and the sample's
    rollout_id (else its index), with the row's prompt and label and
    slime's sampling parameters."""
    _check_top_p(args, sampling_params, evaluation)
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
    label = getattr(sample, "label", None)
    if label is not None:
        req["label"] = label  # any JSON value, as the dataset has it
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

    sampling = _sampling(sampling_params, set(_list_setting(args, "unset_sampling", sep=",") or ()))
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
        # AT-GRPO's / MAGRPO's tree sampling: {"k": 4, "alpha": 0.5}.
        "tree": row.get("tree", _json_setting(args, "tree")),
        # Per-role endpoint, model, sampling, budget and freezing.
        "roles": _roles(row.get("roles", _json_setting(args, "roles")), f"sample {sample.index}"),
        # slime's context length: every LLM role's budget.
        "max_context": _max_context(args, row, evaluation),
    }
    # Dict rewards are what slime's --reward-key reads.
    reward_format = row.get("reward_format", _setting(args, "reward_format"))
    if reward_format is None and _reward_key(args, evaluation):
        reward_format = "dict"
    settings["reward_format"] = reward_format
    req.update({k: v for k, v in settings.items() if v is not None})
    req["keep_failed"] = _bool_setting(args, "keep_failed", False)
    # The merged layout: one sample per agent per episode, its whole
    # conversation with loss_mask 1 on the model's own tokens. Sent only
    # when on, so that per-turn requests stay as they were.
    if _bool_setting(args, "merge_turns", False):
        req["merge_turns"] = True
        how = _setting(args, "merge_reward")
        if how is not None:
            if how not in _MERGE_REWARDS:
                raise ValueError(f"troupe setting merge_reward: want one of {list(_MERGE_REWARDS)}, got {how!r}")
            req["merge_reward"] = how
    elif _setting(args, "merge_reward") is not None:
        raise ValueError("troupe setting merge_reward needs merge_turns: only merged samples have a merged reward")
    return req


# --- concurrency -----------------------------------------------------------


def _rollout_num_engines(args) -> int:
    """The number of rollout engines behind slime's router, as slime counts
    them (slime/utils/http_utils.get_rollout_num_engines)."""
    n = getattr(args, "rollout_num_engines", None)
    if n is not None:
        return int(n)
    gpus = getattr(args, "rollout_num_gpus", None) or 0
    per_engine = getattr(args, "rollout_num_gpus_per_engine", None) or 1
    if gpus <= 0:
        return 0
    return max(1, gpus // per_engine)


def concurrency_limit(args) -> int | None:
    """The most calls to the rollout service in flight at once (per event
    loop): troupe_concurrency when set, else slime's own bound on
    concurrent generate calls, sglang_server_concurrency x rollout engines
    (at least one engine), else no bound."""
    value = _setting(args, "concurrency")
    if value is not None:
        n = int(value)
        if n < 1:
            raise ValueError(f"troupe setting concurrency: want >= 1, got {value!r}")
        return n
    per_engine = getattr(args, "sglang_server_concurrency", None)
    if per_engine is None:
        return None
    return int(per_engine) * max(1, _rollout_num_engines(args))


# One semaphore per (event loop, size): slime runs one long-lived loop, tests
# run several.
_semaphores: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict]" = weakref.WeakKeyDictionary()


class _NoLimit:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


def _limiter(args):
    n = concurrency_limit(args)
    if n is None:
        return _NoLimit()
    per_loop = _semaphores.setdefault(asyncio.get_running_loop(), {})
    if n not in per_loop:
        per_loop[n] = asyncio.Semaphore(n)
    return per_loop[n]


# --- HTTP/1.1 over asyncio -------------------------------------------------


class _ProtocolError(Exception):
    pass


class _NotSent(Exception):
    """The connection could not be made: the request never reached the
    service, so it is safe to try again."""


async def _read_body(reader: asyncio.StreamReader, headers: dict) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            line = await reader.readline()
            if not line:
                raise _ProtocolError("connection closed inside a chunked body")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _ProtocolError(f"bad chunk size line {line[:40]!r}") from None
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)  # CRLF after the chunk
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read()  # Connection: close delimits it


async def _http_post(url: str, body: bytes, token: str | None) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"troupe url {url!r}: want http:// or https://")
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    context = ssl.create_default_context() if parts.scheme == "https" else None
    try:
        reader, writer = await asyncio.open_connection(host, port, ssl=context, limit=1 << 20)
    except OSError as e:
        raise _NotSent(e) from None
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host_header = f"[{host}]" if ":" in host else host
        if parts.port:
            host_header += f":{parts.port}"
        lines = [
            f"POST {path} HTTP/1.1",
            f"Host: {host_header}",
            "Content-Type: application/json",
            "Accept: application/json",
            f"Content-Length: {len(body)}",
            "Connection: close",
        ]
        if token:
            lines.append(f"Authorization: Bearer {token}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        while True:
            status_line = await reader.readline()
            if not status_line:
                raise _ProtocolError("connection closed before a response")
            fields = status_line.decode("latin-1").split(None, 2)
            if len(fields) < 2 or not fields[0].startswith("HTTP/"):
                raise _ProtocolError(f"bad status line {status_line[:80]!r}")
            status = int(fields[1])
            headers = {}
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if 100 <= status < 200:
                continue  # 100 Continue and friends: the answer follows
            return status, await _read_body(reader, headers)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass


def _decode_error(status: int, raw: bytes) -> TroupeError:
    try:
        body = json.loads(raw)["error"]
        return TroupeError(status, body["code"], body["message"])
    except (ValueError, KeyError, TypeError):
        return TroupeError(status, "http_error", raw[:200].decode("utf-8", "replace"))


async def _post(url: str, body: bytes, token: str | None, timeout: float, retries: int) -> dict:
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"troupe url {url!r}: want http:// or https://")
    for attempt in range(retries + 1):
        try:
            status, raw = await asyncio.wait_for(_http_post(url, body, token), timeout)
        except _NotSent as e:
            if attempt == retries:
                raise TroupeError(0, "unreachable", f"POST {url}: {e.args[0]!r}") from None
        except asyncio.TimeoutError:
            # Not retried: the service may still be playing it (see
            # _RETRY_STATUSES).
            raise TroupeError(0, "timeout", f"POST {url}: no answer within {timeout:g}s; not retried, since the "
                              "service may have played the episode (raise troupe_timeout)") from None
        except (OSError, _ProtocolError, asyncio.IncompleteReadError, ValueError) as e:
            # ValueError: a malformed status line or length from whatever
            # answered on that port. The request was sent: not retried.
            raise TroupeError(0, "unreachable", f"POST {url}: {e!r}; not retried, since the request was sent") from None
        else:
            if 200 <= status < 300:
                try:
                    return json.loads(raw)
                except ValueError as e:
                    raise TroupeError(status, "bad_answer", f"POST {url}: answer is not JSON: {e}") from None
            err = _decode_error(status, raw)
            if status not in _RETRY_STATUSES or attempt == retries:
                raise err
        # Exponential backoff with jitter, so that many workers do not come
        # back at the same instant.
        await asyncio.sleep(min(0.25 * 2**attempt, 8.0) * (0.5 + random.random() / 2))
    raise AssertionError("unreachable")


# --- custom generate -------------------------------------------------------


def _placeholder(args, sample, request: dict, answer: dict):
    """The one sample returned for an episode that produced none (the LLM
    server failed before the first turn, or no turn of an emitted role was
    played): aborted, remove_sample, and shaped so that slime's
    _convert_samples_to_train_data accepts it and trains nothing on it --
    one prompt token and one response token (id 0), loss_mask [0],
    rollout_log_probs [0.0], reward 0 (under the reward key for dict
    rewards), metadata raw_reward 0."""
    rollouts = answer.get("rollouts") or []
    errors = [r.get("error") for r in rollouts if r.get("error")]
    status = ",".join(sorted({str(r.get("status")) for r in rollouts if r.get("status")})) or "none"
    error = "; ".join(errors) or (
        f"the episode produced no sample (status {status})" if rollouts else "the service answered no rollout"
    )
    keys = {k for k in (_reward_key(args, False), _reward_key(args, True)) if k}
    reward = {k: 0.0 for k in sorted(keys)} if keys else 0.0
    rollout_id = getattr(sample, "rollout_id", None)
    if rollout_id is None:
        rollout_id = sample.index
    metadata = {
        "error": error,
        "troupe_placeholder": True,
        "troupe_status": status,
        "raw_reward": 0.0,
    }
    if rollouts:
        for key in ("end", "seed"):
            if rollouts[0].get(key) is not None:
                metadata[key] = rollouts[0][key]
    metadata["scenario"] = request.get("scenario")
    for key, value in (getattr(sample, "metadata", None) or {}).items():
        metadata.setdefault(key, value)
    d = {
        "group_index": sample.group_index,
        "index": sample.index,
        "rollout_id": rollout_id,
        "prompt": getattr(sample, "prompt", ""),
        "tokens": [0, 0],
        "response": "",
        "response_length": 1,
        "label": getattr(sample, "label", None),
        "reward": reward,
        "loss_mask": [0],
        "rollout_log_probs": [0.0],
        "remove_sample": True,
        "status": "aborted",
        "metadata": {k: v for k, v in metadata.items() if v is not None},
        "session_id": getattr(sample, "session_id", None),
    }
    return type(sample).from_dict(d)


async def custom_generate(args, sample, sampling_params, evaluation: bool = False):
    """slime's custom generate function: plays one troupe episode for the
    prompt of ``sample`` and returns its agents' turns as a list of Samples,
    all sharing the episode's rollout_id, with troupe's rewards set.

    The list is never empty: an episode that produced no sample comes back
    as one placeholder (status aborted, remove_sample true, the error in
    metadata["error"]; see _placeholder), because slime's rollout loop
    reads group[0][0] of every group.

    Each returned Sample is built with ``type(sample).from_dict`` (slime's
    Sample class), and keeps slime's group_index, index, label and
    session_id; troupe's own per-turn number is kept in
    metadata["troupe_index"], and the row's metadata keys are carried over
    where troupe did not set them. Aborted and failed turns get
    remove_sample true unless troupe_keep_failed is set. With dict rewards,
    metadata["raw_reward"] is the trained value reward[--reward-key].
    """
    request = build_request(args, sample, sampling_params, evaluation=evaluation)
    keep_failed = request["keep_failed"]
    url = str(_setting(args, "url", DEFAULT_URL)).rstrip("/") + "/v1/rollouts"
    body = json.dumps(request).encode()
    async with _limiter(args):
        answer = await _post(
            url,
            body,
            _setting(args, "token"),
            float(_setting(args, "timeout", 900)),
            int(_setting(args, "retries", 3)),
        )
    cls = type(sample)
    key = _reward_key(args, evaluation)
    out = []
    for rollout in answer.get("rollouts") or []:
        for d in rollout.get("samples") or []:
            s = cls.from_dict(d)
            if s.metadata is None:
                s.metadata = {}
            s.metadata["troupe_index"] = d.get("index")
            if sample.group_index is not None:
                s.group_index = sample.group_index
            # Siblings keep the slime sample's index, as slime's own fan-out
            # does; they are told apart by rollout_id and metadata.
            s.index = sample.index
            if getattr(sample, "label", None) is not None:
                s.label = sample.label
            if getattr(sample, "session_id", None):
                s.session_id = sample.session_id
            if not keep_failed and d.get("status") in _FAILED_STATUSES:
                s.remove_sample = True
            if isinstance(s.reward, dict):
                if key and key in s.reward:
                    s.metadata["raw_reward"] = s.reward[key]
            elif s.reward is not None and "raw_reward" not in s.metadata:
                s.metadata["raw_reward"] = s.reward
            for k, value in (getattr(sample, "metadata", None) or {}).items():
                s.metadata.setdefault(k, value)
            out.append(s)
    if not out:
        placeholder = _placeholder(args, sample, request, answer)
        logger.warning(
            "troupe_slime: sample %s (group %s) produced no turn: %s; returning one aborted, removed placeholder",
            sample.index, sample.group_index, placeholder.metadata["error"],
        )
        out = [placeholder]
    return out


# --- reward post-process ---------------------------------------------------


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
        if getattr(sample, "remove_sample", False):
            return 0.0  # trains nothing; its reward is not read
        raise ValueError(f"sample at position {position} (index {sample.index}) has no reward")
    key = getattr(args, "reward_key", None)
    if isinstance(sample.reward, dict):
        if not key:
            raise ValueError(f"sample at position {position} has a dict reward {sorted(sample.reward)}: set --reward-key")
        if key not in sample.reward:
            raise ValueError(f"sample at position {position}: reward has no key {key!r} (it has {sorted(sample.reward)})")
        return float(sample.reward[key])
    return float(sample.reward)


def normalize_rewards(rewards, group_keys, rollout_keys, *, std: bool, eps: float = 1e-6, include=None):
    """Group-normalise rewards: within each group key, subtract the group
    mean (and divide by the group's unbiased std + eps when ``std``, as
    torch.std does).

    Every rollout counts once in its group, however many sibling samples
    it has: a sample's weight is 1/(its rollout's samples in the group).
    With one sample per rollout this is exactly slime's GRPO normalisation
    (mean, unbiased std, + 1e-6); with fan-out, a 9-turn episode does not
    weigh 9 times a 3-turn one. A group of one rollout is only centred
    (slime's default would give NaN: the unbiased std of one value).

    ``include`` (one bool per reward, default all) leaves samples out of
    the statistics; those get 0.0.
    """
    if not (len(rewards) == len(group_keys) == len(rollout_keys)):
        raise ValueError("rewards, group_keys and rollout_keys must have the same length")
    if include is None:
        include = [True] * len(rewards)
    positions = defaultdict(list)
    for pos, key in enumerate(group_keys):
        if include[pos]:
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


class PostProcessed(tuple):
    """(raw_rewards, rewards), as slime unpacks it, with what was applied:
    ``estimator`` (args.advantage_estimator), ``normalisation`` ("raw",
    "centred" or "centred+std"), ``grouping`` and ``removed`` (the samples
    left out of the statistics)."""

    def __new__(cls, raw, rewards, *, estimator, normalisation, grouping, removed):
        self = super().__new__(cls, (raw, rewards))
        self.estimator = estimator
        self.normalisation = normalisation
        self.grouping = grouping
        self.removed = removed
        return self

    @property
    def raw_rewards(self):
        return self[0]

    @property
    def rewards(self):
        return self[1]


def _post_process(args, samples, by_role: bool):
    flat = _flatten(samples)
    raw = [_reward_value(args, s, i) for i, s in enumerate(flat)]
    estimator = getattr(args, "advantage_estimator", "grpo") or "grpo"
    if estimator not in _CENTRED_ESTIMATORS + _RAW_ESTIMATORS:
        logger.warning("troupe_slime: unknown --advantage-estimator %r: rewards are left raw, as slime's default does", estimator)
    normalise = estimator in _CENTRED_ESTIMATORS and getattr(args, "rewards_normalization", True)
    use_std = normalise and estimator in _STD_ESTIMATORS and getattr(args, "grpo_std_normalization", True)
    grouping = "group_index, role" if by_role else "group_index"
    removed = sum(1 for s in flat if getattr(s, "remove_sample", False))
    if not normalise:
        why = "--disable-rewards-normalization" if estimator in _CENTRED_ESTIMATORS else "not normalised by slime"
        logger.info("troupe_slime: --advantage-estimator %s: raw rewards (%s), %d samples", estimator, why, len(flat))
        return PostProcessed(raw, list(raw), estimator=estimator, normalisation="raw", grouping=None, removed=0)
    group_keys, rollout_keys, include = [], [], []
    for i, s in enumerate(flat):
        if s.group_index is None:
            raise ValueError(f"sample at position {i} (index {s.index}) has no group_index: cannot normalise by group")
        role = (s.metadata or {}).get("role") if by_role else None
        group_keys.append((s.group_index, role))
        rid = getattr(s, "rollout_id", None)
        # A sample without a rollout_id is a rollout of its own.
        rollout_keys.append(("rollout", rid) if rid is not None else ("position", i))
        include.append(not getattr(s, "remove_sample", False))
    rewards = normalize_rewards(raw, group_keys, rollout_keys, std=use_std, include=include)
    normalisation = "centred+std" if use_std else "centred"
    logger.info(
        "troupe_slime: --advantage-estimator %s: %s per %s, each rollout weighted once%s; "
        "%d samples, %d groups, %d removed samples left out of the statistics (advantage 0)",
        estimator,
        "reward minus group mean, divided by unbiased group std + 1e-6" if use_std else "reward minus group mean",
        grouping,
        "" if use_std else (" (--disable-grpo-std-normalization)" if estimator in _STD_ESTIMATORS else ""),
        len(flat), len(set(group_keys)), removed,
    )
    return PostProcessed(raw, rewards, estimator=estimator, normalisation=normalisation, grouping=grouping, removed=removed)


def post_process_rewards(args, samples):
    """slime's --custom-reward-post-process-path function: slime's default
    normalisation (slime/ray/rollout.py _post_process_rewards), but by
    group_index, with each rollout weighted once (slime's default reshapes
    the batch by position and mixes groups once fan-out changes the sample
    count, slime #1414). Per --advantage-estimator: grpo, gspo, cispo:
    centred and divided by (unbiased std + 1e-6), or only centred with
    --disable-grpo-std-normalization; reinforce_plus_plus_baseline:
    centred; reinforce_plus_plus, ppo (and anything else), or
    --disable-rewards-normalization: raw. When rewards are normalised,
    samples with remove_sample are left out of the group statistics and get
    0 (slime zeroes their loss mask anyway); raw rewards are returned as
    they are, removed samples included. Returns (raw_rewards,
    rewards) as a PostProcessed tuple that says what it applied, and logs
    it once per call."""
    return _post_process(args, samples, by_role=False)


def post_process_rewards_by_role(args, samples):
    """post_process_rewards with one group per (group_index, role): each
    role is compared with the same role in the other episodes of its prompt
    (metadata["role"]), as in role-conditioned self-play."""
    return _post_process(args, samples, by_role=True)
