"""Tests of troupe_slime against a real troupe rollout service.

The service is the binary named by $TROUPE_BIN (`troupe` itself), started as
``$TROUPE_BIN serve --addr 127.0.0.1:0 --token TOKEN``; without
$TROUPE_BIN troupe is built from cmd/troupe with `go build`. slime itself is not
needed: slime_sample_standin.Sample is a minimal stand-in for slime's
Sample class, and a driver mimics slime's rollout loop (SlimeLoopTest).
Some tests start a second service: one whose LLM server is a closed port,
one whose LLM server is FakeSGLang.

    python3 -m unittest discover -s examples/slime -v
"""

import argparse
import asyncio
import copy
import http.server
import inspect
import json
import logging
import math
import os
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest
import urllib.request
import uuid

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__

import troupe_slime  # noqa: E402
from slime_sample_standin import Sample  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOKEN = "test-token-7f3a-0123456789"

_server = {}


def start_service(binary, *extra):
    """Start `binary serve --addr 127.0.0.1:0 --token TOKEN *extra` and
    return (process, url) once it says where it listens."""
    proc = subprocess.Popen(
        [binary, "serve", "--addr", "127.0.0.1:0", "--token", TOKEN, *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    lines = queue.Queue()

    def pump():
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    url = None
    seen = []
    while url is None:
        try:
            line = lines.get(timeout=120)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        m = re.search(r"(http://\S+)", line)
        if m:
            url = m.group(1)
    if url is None:
        proc.kill()
        raise RuntimeError(f"the troupe service did not say where it listens; it wrote: {''.join(seen)!r}")
    return proc, url


def stop_service(proc):
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    # The test server exits 0 after draining; the troupe CLI exits 143
    # (128 + SIGTERM), as a process stopped by SIGTERM does.
    assert code in (0, 143), f"the service exited with {code} after SIGTERM"


def setUpModule():
    # The adapter warns once per placeholder; keep the test output readable
    # (assertLogs still sees its records).
    logging.getLogger("troupe_slime").addHandler(logging.NullHandler())
    logging.getLogger("troupe_slime").propagate = False
    binary = os.environ.get("TROUPE_BIN")
    tmp = tempfile.mkdtemp(prefix="troupe-slime-test-")
    _server["tmp"] = tmp
    if not binary:
        binary = os.path.join(tmp, "troupe")
        subprocess.run(
            ["go", "build", "-o", binary, "./cmd/troupe"],
            cwd=REPO, check=True,
        )
    _server["bin"] = binary
    proc, url = start_service(binary)
    _server.update(proc=proc, url=url)


def tearDownModule():
    proc = _server.get("proc")
    if proc is not None:
        stop_service(proc)


def closed_port():
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_args(**kw):
    base = dict(
        troupe_url=_server.get("url"),
        troupe_token=TOKEN,
        troupe_retries=0,
        troupe_scenario="tictactoe",
        reward_key=None,
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
    )
    base.update(kw)
    return types.SimpleNamespace(**base)


def generate(args, sample, sampling_params=None):
    return asyncio.run(troupe_slime.custom_generate(args, sample, sampling_params or {}))


class CustomGenerateTest(unittest.TestCase):
    def test_an_episode_fans_out_into_sibling_samples(self):
        sample = Sample(group_index=3, index=17, prompt="play", label="L", session_id="sess-1",
                        metadata={"source_name": "games"})
        args = make_args(troupe_policy="center-first", troupe_allocators='["individual"]')
        out = generate(args, sample, {"temperature": 1.0, "max_new_tokens": 64})

        self.assertIsInstance(out, list)
        self.assertGreaterEqual(len(out), 5, "a tic-tac-toe game takes at least five turns")
        self.assertEqual([s.metadata["troupe_index"] for s in out],
                         list(range(17, 17 + len(out))), "troupe numbers the turns from slime's index")
        for s in out:
            self.assertIsInstance(s, Sample)
            self.assertEqual(s.rollout_id, 17, "rollout_id falls back to slime's index")
            self.assertEqual((s.group_index, s.index, s.label), (3, 17, "L"))
            self.assertEqual(s.session_id, "sess-1")
            self.assertEqual(s.status, Sample.Status.COMPLETED)
            self.assertEqual(s.reward, s.metadata["agent_score"], "individual: each agent's own score")
            self.assertEqual(s.metadata["source_name"], "games", "the row's metadata is kept")
            self.assertEqual(s.metadata["scenario"], "tictactoe")
            self.assertIn(s.metadata["role"], ("x", "o"))
            # slime's own round trip, through JSON as slime's debug dumps do.
            back = Sample.from_dict(json.loads(json.dumps(s.to_dict())))
            self.assertEqual(back, s)

    def test_rollout_id_is_slimes_when_set(self):
        out = generate(make_args(), Sample(group_index=0, index=4, rollout_id=99))
        self.assertTrue(out)
        self.assertEqual({s.rollout_id for s in out}, {99})

    def test_always_a_non_empty_list(self):
        # Only o's turns are emitted, and the game stops after x's first:
        # the episode has no sample, and slime gets one placeholder.
        row = {"troupe": {"limits": {"max_turns": 1}, "emit": ["o"]}, "source_name": "games"}
        sample = Sample(group_index=4, index=1, rollout_id=71, label={"k": 1}, session_id="s-1", metadata=row)
        out = generate(make_args(), sample)
        self.assertEqual(len(out), 1)
        p = out[0]
        self.assert_placeholder(p, sample)
        self.assertIn("no sample", p.metadata["error"])
        self.assertEqual(p.metadata["source_name"], "games")

        row = {"troupe": {"limits": {"max_turns": 1}, "emit": ["x"]}}
        out = generate(make_args(), Sample(group_index=0, index=2, metadata=row))
        self.assertIsInstance(out, list)
        self.assertEqual(len(out), 1)
        self.assertEqual(out[0].status, Sample.Status.TRUNCATED)
        self.assertFalse(out[0].remove_sample, "truncated is not failed")

    def assert_placeholder(self, p, sample):
        """p is the placeholder for sample: aborted, removed, trains
        nothing, and shaped for slime's _convert_samples_to_train_data."""
        self.assertIsInstance(p, Sample)
        self.assertEqual(p.status, Sample.Status.ABORTED)
        self.assertTrue(p.remove_sample)
        rid = sample.rollout_id if sample.rollout_id is not None else sample.index
        self.assertEqual((p.group_index, p.index, p.rollout_id, p.label, p.session_id),
                         (sample.group_index, sample.index, rid, sample.label, sample.session_id))
        self.assertGreaterEqual(p.response_length, 1)
        self.assertGreaterEqual(len(p.tokens) - p.response_length, 1, "at least one prompt token")
        self.assertEqual(p.loss_mask, [0] * p.response_length)
        self.assertEqual(p.rollout_log_probs, [0.0] * p.response_length)
        self.assertTrue(p.metadata["error"])
        self.assertTrue(p.metadata["troupe_placeholder"])
        self.assertEqual(p.metadata["raw_reward"], 0.0)
        self.assertIsNotNone(p.reward)
        back = Sample.from_dict(json.loads(json.dumps(p.to_dict())))
        self.assertEqual(back, p)

    def test_run_files_hold_the_same_placeholder(self):
        # troupe run writes an episode without samples into its JSONL file
        # as the adapter's placeholder: slime loads every line, and each
        # placeholder trains nothing.
        out = os.path.join(_server["tmp"], "placeholders.jsonl")
        for layout, reward in (("flat", "scalar"), ("nested", "dict")):
            subprocess.run([_server["bin"], "run", "tictactoe", "-n", "4", "-g", "2", "--max-turns", "1", "--emit", "o",
                            "-a", "team,individual", "--reward-format", reward, "--layout", layout, "-q", "-o", out], check=True)
            with open(out) as f:
                lines = [json.loads(line) for line in f]
            rows = [d for line in lines for d in (line if isinstance(line, list) else [line])]
            self.assertEqual([d["rollout_id"] for d in rows], [0, 1, 2, 3], "one line per episode, none missing")
            for i, d in enumerate(rows):
                p = Sample.from_dict(d)
                self.assertEqual(p.index, i)
                self.assertEqual(p.group_index, i // 2)
                self.assertEqual(p.status, Sample.Status.ABORTED)
                self.assertTrue(p.remove_sample)
                self.assertEqual((p.tokens, p.response_length, p.loss_mask, p.rollout_log_probs), ([0, 0], 1, [0], [0.0]))
                self.assertTrue(p.metadata["troupe_placeholder"])
                self.assertEqual(p.metadata["troupe_status"], "truncated")
                self.assertIn("no sample", p.metadata["error"])
                self.assertEqual(p.metadata["raw_reward"] if reward == "scalar" else p.reward["team"], 0.0)
                back = Sample.from_dict(json.loads(json.dumps(p.to_dict())))
                self.assertEqual(back, p)

    def test_labels_of_any_json_type_pass_through(self):
        for label in ("7", 7, 2.5, {"answer": [1, 2], "tag": "x"}, [1, "a"], True):
            with self.subTest(label=label):
                out = generate(make_args(troupe_policy="center-first"), Sample(group_index=0, index=5, label=label))
                self.assertTrue(out)
                for s in out:
                    self.assertEqual(s.label, label)
                    self.assertIs(type(s.label), type(label))
                req = troupe_slime.build_request(make_args(), Sample(group_index=0, index=5, label=label), {})
                self.assertEqual(json.loads(json.dumps(req))["label"], label)

    def test_response_is_the_services(self):
        # The adapter keeps the service's response text (the model's
        # completion for LLM turns; the move for scripted ones).
        args = make_args(troupe_scenario="signal", troupe_policy="scripted")
        sample = Sample(group_index=0, index=3)
        request = troupe_slime.build_request(args, sample, {})
        direct = asyncio.run(troupe_slime._post(_server["url"] + "/v1/rollouts", json.dumps(request).encode(),
                                                TOKEN, 60, 0))
        want = [d["response"] for r in direct["rollouts"] for d in r["samples"]]
        out = generate(args, sample)
        self.assertEqual([s.response for s in out], want)
        self.assertTrue(all(want))

    def test_top_p_below_one_is_refused(self):
        sample = Sample(group_index=0, index=0)
        for args, params in (
            (make_args(rollout_top_p=0.9), {"top_p": 0.9, "custom_params": {"return_top_p_token_ids": True}}),
            (make_args(), {"top_p": 0.95}),
            (make_args(), {"top_p": 1.0, "custom_params": {"return_top_p_token_ids": True}}),
        ):
            with self.assertRaisesRegex(ValueError, "--rollout-top-p"):
                generate(args, sample, params)
        # Evaluation trains nothing: its top_p is passed on.
        req = troupe_slime.build_request(make_args(), sample, {"top_p": 0.8}, evaluation=True)
        self.assertEqual(req["sampling"]["top_p"], 0.8)

    def test_a_row_chooses_its_scenario_and_parameters(self):
        # With one attribute every candidate has a value of its own, so the
        # scripted speaker's word always singles out the target.
        row = {"troupe": {"scenario": "signal", "params": {"candidates": 3, "attributes": 1}, "policy": "scripted"}}
        out = generate(make_args(), Sample(group_index=1, index=8, metadata=row))
        self.assertEqual(len(out), 2, "a speaker's turn and a listener's")
        for s in out:
            self.assertEqual(s.metadata["scenario"], "signal")
            self.assertEqual(s.reward, 1.0, "the scripted pair always succeeds; team reward 1")

    def test_dict_rewards_for_reward_key(self):
        args = make_args(reward_key="team", troupe_allocators='["team", "individual"]')
        out = generate(args, Sample(group_index=0, index=3))
        for s in out:
            self.assertEqual(set(s.reward), {"team", "individual"})
            self.assertEqual(s.get_reward_value(args), s.reward["team"])
            self.assertEqual(s.metadata["raw_reward"], s.reward["team"], "the trained value")
            self.assertIn("team_reward", s.metadata)
        raw, _ = troupe_slime.post_process_rewards(args, out)
        self.assertEqual(raw, [s.reward["team"] for s in out])
        # The other key: raw_reward follows --reward-key.
        args = make_args(reward_key="individual", troupe_allocators='["team", "individual"]')
        for s in generate(args, Sample(group_index=0, index=3)):
            self.assertEqual(s.metadata["raw_reward"], s.reward["individual"])

    def test_scalar_raw_reward_is_the_reward(self):
        for s in generate(make_args(troupe_allocators='["individual"]'), Sample(group_index=0, index=3)):
            self.assertEqual(s.metadata["raw_reward"], s.reward)
            self.assertNotIsInstance(s.reward, dict)

    def test_copies_of_a_prompt_share_the_game_and_not_the_ids(self):
        # slime generates n_samples_per_prompt copies of a prompt with one
        # group_index and distinct indexes; they run concurrently.
        args = make_args(troupe_scenario="signal")
        samples = [Sample(group_index=5, index=40 + i) for i in range(16)]

        async def run_all():
            return await asyncio.gather(*(troupe_slime.custom_generate(args, s, {}) for s in samples))

        outs = asyncio.run(run_all())
        ids = [out[0].rollout_id for out in outs]
        self.assertEqual(ids, [40 + i for i in range(16)])
        for out in outs:
            self.assertEqual(len({s.rollout_id for s in out}), 1)
        self.assertEqual(len({s.metadata["seed"] for out in outs for s in out}), 1,
                         "one group_index, one scenario seed")
        raw, normed = troupe_slime.post_process_rewards(args, [s for out in outs for s in out])
        self.assertEqual(len(raw), len(normed))

    def test_service_errors_raise_with_the_services_message(self):
        with self.assertRaises(troupe_slime.TroupeError) as cm:
            generate(make_args(troupe_scenario="chess"), Sample(group_index=0, index=0))
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "unknown_scenario"))
        self.assertIn("tictactoe", cm.exception.message)

        row = {"troupe": {"scenario": "signal", "params": {"candidates": 99}}}
        with self.assertRaises(troupe_slime.TroupeError) as cm:
            generate(make_args(), Sample(group_index=0, index=0, metadata=row))
        self.assertEqual(cm.exception.code, "bad_params")
        self.assertIn("candidates", cm.exception.message)

        with self.assertRaises(troupe_slime.TroupeError) as cm:
            generate(make_args(troupe_token="wrong"), Sample(group_index=0, index=0))
        self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthorized"))

    def test_retries_a_draining_service(self):
        with FlakyProxy(_server["url"], failures=2) as proxy:
            out = generate(make_args(troupe_url=proxy.url, troupe_retries=3), Sample(group_index=0, index=6))
            self.assertTrue(out)
            self.assertEqual(proxy.calls, 3)
        with FlakyProxy(_server["url"], failures=5) as proxy:
            with self.assertRaises(troupe_slime.TroupeError) as cm:
                generate(make_args(troupe_url=proxy.url, troupe_retries=1), Sample(group_index=0, index=7))
            self.assertEqual((cm.exception.status, cm.exception.code), (503, "shutting_down"))
            self.assertEqual(proxy.calls, 2)

    def test_unreachable_service(self):
        with FlakyProxy(_server["url"], failures=0) as proxy:
            url = proxy.url  # a port that is closed once the proxy is gone
        with self.assertRaises(troupe_slime.TroupeError) as cm:
            generate(make_args(troupe_url=url), Sample(group_index=0, index=0))
        self.assertEqual(cm.exception.code, "unreachable")


class BuildRequestTest(unittest.TestCase):
    def test_maps_slimes_sampling_parameters(self):
        sampling = {
            "temperature": 0.7, "top_p": 1.0, "top_k": -1, "max_new_tokens": 512,
            "stop": ["</s>"], "stop_token_ids": (2,), "sampling_seed": 11,
            "skip_special_tokens": False, "no_stop_trim": True, "spaces_between_special_tokens": False,
            "repetition_penalty": 1.05, "min_new_tokens": 3, "custom_params": None,
        }
        sample = Sample(group_index=2, index=9, rollout_id=30, prompt=[{"role": "user", "content": "hi"}],
                        label="7", session_id="s")
        req = troupe_slime.build_request(make_args(troupe_params='{"illegal": "penalty"}'), sample, sampling)
        self.assertEqual(req["sampling"], {
            "temperature": 0.7, "top_p": 1.0, "top_k": -1, "max_tokens": 512,
            "stop": ["</s>"], "stop_token_ids": [2], "sampling_seed": 11,
            "skip_special_tokens": False, "no_stop_trim": True, "spaces_between_special_tokens": False,
            "repetition_penalty": 1.05, "min_tokens": 3,
        })
        self.assertEqual((req["group_index"], req["index"], req["rollout_id"]), (2, 9, 30))
        self.assertEqual((req["prompt"], req["label"], req["session_id"]), (sample.prompt, "7", "s"))
        self.assertEqual((req["scenario"], req["n"], req["params"]), ("tictactoe", 1, {"illegal": "penalty"}))
        self.assertIs(req["keep_failed"], False)
        self.assertNotIn("reward_format", req)
        req = troupe_slime.build_request(make_args(reward_key="team"), sample, {})
        self.assertEqual(req["reward_format"], "dict", "--reward-key reads dict rewards")

    def test_unset_and_odd_sampling_values(self):
        sample = Sample(group_index=0, index=0)
        for max_new in (None, -1):
            req = troupe_slime.build_request(make_args(), sample, {"max_new_tokens": max_new, "stop": None})
            self.assertNotIn("max_tokens", req.get("sampling", {}), "None and -1 are unset")
        req = troupe_slime.build_request(make_args(), sample, {
            "stop": "###", "stop_token_ids": 7, "custom_params": {"my_processor": {"k": 1}}, "new_flag": 3})
        self.assertEqual(req["sampling"], {
            "stop": ["###"], "stop_token_ids": [7],
            "extra": {"custom_params": {"my_processor": {"k": 1}}, "new_flag": 3},
        })

    def test_unset_sampling(self):
        sample = Sample(group_index=0, index=0)
        params = {"temperature": 1.0, "no_stop_trim": True, "spaces_between_special_tokens": False}
        req = troupe_slime.build_request(
            make_args(troupe_unset_sampling="spaces_between_special_tokens, no_stop_trim"), sample, params)
        self.assertEqual(req["sampling"], {"temperature": 1.0})
        with self.assertRaisesRegex(ValueError, "--rollout-top-p"):
            troupe_slime.build_request(make_args(troupe_unset_sampling=["top_p"]), sample, {"top_p": 0.5})

    def test_keep_failed_is_sent(self):
        sample = Sample(group_index=0, index=0)
        for value, want in ((None, False), (True, True), ("true", True), ("0", False), (False, False)):
            req = troupe_slime.build_request(make_args(troupe_keep_failed=value), sample, {})
            self.assertIs(req["keep_failed"], want)
        with self.assertRaisesRegex(ValueError, "keep_failed"):
            troupe_slime.build_request(make_args(troupe_keep_failed="maybe"), sample, {})

    def test_merge_turns_is_sent_when_on(self):
        sample = Sample(group_index=0, index=0)
        for value, want in ((None, None), (True, True), ("yes", True), ("off", None), (False, None)):
            req = troupe_slime.build_request(make_args(troupe_merge_turns=value), sample, {})
            self.assertIs(req.get("merge_turns"), want)
        with self.assertRaisesRegex(ValueError, "merge_turns"):
            troupe_slime.build_request(make_args(troupe_merge_turns="maybe"), sample, {})

    def test_merge_reward_is_sent_with_merge_turns(self):
        sample = Sample(group_index=0, index=0)
        req = troupe_slime.build_request(make_args(troupe_merge_turns=True), sample, {})
        self.assertNotIn("merge_reward", req, "the service's default, mean")
        for how in ("mean", "sum", "last"):
            req = troupe_slime.build_request(make_args(troupe_merge_turns=True, troupe_merge_reward=how), sample, {})
            self.assertEqual(req["merge_reward"], how)
        with self.assertRaisesRegex(ValueError, "merge_reward"):
            troupe_slime.build_request(make_args(troupe_merge_turns=True, troupe_merge_reward="median"), sample, {})
        with self.assertRaisesRegex(ValueError, "needs merge_turns"):
            troupe_slime.build_request(make_args(troupe_merge_reward="mean"), sample, {})

    def test_roles_are_sent(self):
        sample = Sample(group_index=0, index=0)
        self.assertNotIn("roles", troupe_slime.build_request(make_args(), sample, {}))
        roles = {"x": {"model": "lora-x", "sampling": {"temperature": 0.5, "max_new_tokens": 64}, "max_context": 2048},
                 "o": {"endpoint": "ref", "frozen": True}}
        req = troupe_slime.build_request(make_args(troupe_roles=json.dumps(roles)), sample, {})
        self.assertEqual(req["roles"], {"x": {"model": "lora-x", "sampling": {"temperature": 0.5, "max_tokens": 64}, "max_context": 2048},
                                        "o": {"endpoint": "ref", "frozen": True}}, "slime's sampling names mapped")
        row = Sample(group_index=0, index=0, metadata={"troupe": {"roles": {"o": {"frozen": True}}}})
        req = troupe_slime.build_request(make_args(troupe_roles=json.dumps(roles)), row, {})
        self.assertEqual(req["roles"], {"o": {"frozen": True}}, "the row's win")
        with self.assertRaisesRegex(ValueError, "unknown keys"):
            troupe_slime.build_request(make_args(troupe_roles='{"x": {"modle": "m"}}'), sample, {})

    def test_slimes_context_length_is_the_budget(self):
        sample = Sample(group_index=0, index=0)
        self.assertNotIn("max_context", troupe_slime.build_request(make_args(), sample, {}))
        args = make_args(rollout_max_context_len=4096, eval_max_context_len=8192)
        self.assertEqual(troupe_slime.build_request(args, sample, {})["max_context"], 4096)
        self.assertEqual(troupe_slime.build_request(args, sample, {}, evaluation=True)["max_context"], 8192)
        args = make_args(rollout_max_context_len=4096, troupe_max_context="1024")
        self.assertEqual(troupe_slime.build_request(args, sample, {})["max_context"], 1024)
        row = Sample(group_index=0, index=0, metadata={"troupe": {"max_context": 512}})
        self.assertEqual(troupe_slime.build_request(args, row, {})["max_context"], 512)

    def test_tree_is_sent_when_set(self):
        sample = Sample(group_index=0, index=0)
        self.assertNotIn("tree", troupe_slime.build_request(make_args(), sample, {}))
        req = troupe_slime.build_request(make_args(troupe_tree='{"k": 4, "alpha": 0.5}'), sample, {})
        self.assertEqual(req["tree"], {"k": 4, "alpha": 0.5})
        row = Sample(group_index=0, index=0, metadata={"troupe": {"tree": {"k": 2, "joint": True}}})
        req = troupe_slime.build_request(make_args(troupe_tree='{"k": 4}'), row, {})
        self.assertEqual(req["tree"], {"k": 2, "joint": True})

    def test_environment_settings(self):
        os.environ["TROUPE_ALLOCATORS"] = "rae:alpha=0.9,beta=1"
        os.environ["TROUPE_EMIT"] = "x, o"
        try:
            args = make_args()
            req = troupe_slime.build_request(args, Sample(group_index=0, index=0), {})
        finally:
            del os.environ["TROUPE_ALLOCATORS"], os.environ["TROUPE_EMIT"]
        self.assertEqual(req["allocators"], ["rae:alpha=0.9,beta=1"], "one spec: its commas are its own")
        self.assertEqual(req["emit"], ["x", "o"])

    def test_rejects_what_it_cannot_send(self):
        with self.assertRaisesRegex(ValueError, "unknown keys"):
            troupe_slime.build_request(make_args(), Sample(index=0, metadata={"troupe": {"senario": "x"}}), {})
        with self.assertRaisesRegex(ValueError, "no troupe scenario"):
            troupe_slime.build_request(make_args(troupe_scenario=None), Sample(index=0), {})


def slime_default_normalization(rewards, n_samples_per_prompt, batch_size, std):
    """slime's own GRPO normalisation (slime/ray/rollout.py), in plain
    Python: reshape by position into groups of n_samples_per_prompt when the
    count matches, else treat the whole batch as one group."""
    size = n_samples_per_prompt if len(rewards) == n_samples_per_prompt * batch_size else len(rewards)
    out = []
    for start in range(0, len(rewards), size):
        group = rewards[start:start + size]
        mean = sum(group) / len(group)
        centred = [r - mean for r in group]
        if std:
            sd = math.sqrt(sum(c * c for c in centred) / (len(group) - 1))
            centred = [c / (sd + 1e-6) for c in centred]
        out.extend(centred)
    return out


def fan_out(group_index, rollout_id, reward, turns, roles=("a", "b")):
    return [Sample(group_index=group_index, index=rollout_id, rollout_id=rollout_id, reward=reward,
                   status=Sample.Status.COMPLETED, metadata={"role": roles[t % len(roles)]})
            for t in range(turns)]


class RewardPostProcessTest(unittest.TestCase):
    def test_same_as_slime_without_fan_out(self):
        rng = random.Random(3)
        n, batch = 4, 5
        samples = [Sample(group_index=g, index=g * n + k, rollout_id=g * n + k, reward=rng.random())
                   for g in range(batch) for k in range(n)]
        rewards = [s.reward for s in samples]
        for std in (True, False):
            raw, normed = troupe_slime.post_process_rewards(make_args(grpo_std_normalization=std), samples)
            self.assertEqual(raw, rewards)
            want = slime_default_normalization(rewards, n, batch, std)
            for got, exp in zip(normed, want):
                self.assertAlmostEqual(got, exp, places=12)

    def test_fan_out_normalises_within_each_group(self):
        # Two prompts, two rollouts each, with 3, 7, 2 and 5 turns: the
        # sample count no longer matches n * batch.
        samples = (fan_out(0, 10, 1.0, 3) + fan_out(0, 11, 0.0, 7)
                   + fan_out(1, 12, 5.0, 2) + fan_out(1, 13, 3.0, 5))
        raw, normed = troupe_slime.post_process_rewards(make_args(), samples)
        by_rollout = {}
        for s, v in zip(samples, normed):
            by_rollout.setdefault(s.rollout_id, set()).add(round(v, 9))
        # Siblings with one reward get one advantage, and each rollout
        # counts once whatever its length: a group of two rollouts with
        # rewards m+d and m-d gives them +-d / (std + 1e-6), std = sqrt(2 d^2).
        for group, (hi, lo) in (((10, 11), (1.0, 0.0)), ((12, 13), (5.0, 3.0))):
            d = (hi - lo) / 2
            want = d / (math.sqrt(2 * d * d) + 1e-6)
            self.assertEqual(by_rollout[group[0]], {round(want, 9)})
            self.assertEqual(by_rollout[group[1]], {round(-want, 9)})
        # slime's default mixes the two prompts into one group.
        slime = slime_default_normalization(raw, 2, 2, std=True)
        self.assertNotAlmostEqual(slime[0], normed[0], places=3)

    def test_by_role(self):
        samples = []
        for rid, (ra, rb) in enumerate([(1.0, 0.0), (0.0, 2.0), (2.0, 1.0)]):
            for role, r in (("a", ra), ("b", rb)):
                samples.append(Sample(group_index=0, index=rid, rollout_id=rid, reward=r, metadata={"role": role}))
        _, normed = troupe_slime.post_process_rewards_by_role(make_args(grpo_std_normalization=False), samples)
        for role in ("a", "b"):
            values = [v for s, v in zip(samples, normed) if s.metadata["role"] == role]
            self.assertAlmostEqual(sum(values), 0.0, places=12)
        self.assertEqual(normed[0], 0.0, "role a: 1 - mean(1, 0, 2)")
        self.assertEqual(normed[1], -1.0, "role b: 0 - mean(0, 2, 1)")

    def test_follows_slimes_switches(self):
        samples = fan_out(0, 1, 2.0, 2) + fan_out(0, 2, 0.0, 3)
        rewards = [s.reward for s in samples]
        for args in (make_args(advantage_estimator="ppo"), make_args(advantage_estimator="reinforce_plus_plus"),
                     make_args(rewards_normalization=False), make_args(advantage_estimator="cispo",
                                                                       rewards_normalization=False)):
            out = troupe_slime.post_process_rewards(args, samples)
            raw, normed = out
            self.assertEqual((raw, normed), (rewards, rewards))
            self.assertEqual(out.normalisation, "raw")
        out = troupe_slime.post_process_rewards(make_args(advantage_estimator="reinforce_plus_plus_baseline"), samples)
        self.assertEqual(out.rewards, [1.0, 1.0, -1.0, -1.0, -1.0], "centred only")
        self.assertEqual((out.estimator, out.normalisation), ("reinforce_plus_plus_baseline", "centred"))
        d = 1.0 / (math.sqrt(2.0) + 1e-6)
        for estimator in ("grpo", "gspo", "cispo"):
            out = troupe_slime.post_process_rewards(make_args(advantage_estimator=estimator), samples)
            self.assertEqual(out.normalisation, "centred+std")
            for got, want in zip(out.rewards, [d, d, -d, -d, -d]):
                self.assertAlmostEqual(got, want, places=12)
            out = troupe_slime.post_process_rewards(
                make_args(advantage_estimator=estimator, grpo_std_normalization=False), samples)
            self.assertEqual((out.normalisation, out.rewards), ("centred", [1.0, 1.0, -1.0, -1.0, -1.0]))

    def test_says_what_it_applied(self):
        samples = fan_out(0, 1, 2.0, 2) + fan_out(0, 2, 0.0, 3)
        with self.assertLogs("troupe_slime", level="INFO") as logs:
            troupe_slime.post_process_rewards(make_args(advantage_estimator="gspo"), samples)
        self.assertEqual(len(logs.output), 1, "one line per call")
        self.assertIn("gspo", logs.output[0])
        self.assertIn("unbiased group std", logs.output[0])
        with self.assertLogs("troupe_slime", level="INFO") as logs:
            troupe_slime.post_process_rewards(make_args(rewards_normalization=False), samples)
        self.assertIn("raw rewards (--disable-rewards-normalization)", logs.output[0])

    def test_same_as_slime_for_every_estimator(self):
        rng = random.Random(5)
        n, batch = 8, 3
        samples = [Sample(group_index=g, index=g * n + k, rollout_id=g * n + k, reward=float(rng.randint(0, 3)))
                   for g in range(batch) for k in range(n)]
        rewards = [s.reward for s in samples]
        for estimator in ("grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo"):
            for norm in (True, False):
                for std in (True, False):
                    args = make_args(advantage_estimator=estimator, rewards_normalization=norm,
                                     grpo_std_normalization=std)
                    _, got = troupe_slime.post_process_rewards(args, samples)
                    if norm and estimator in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"):
                        want = slime_default_normalization(rewards, n, batch,
                                                           std and estimator != "reinforce_plus_plus_baseline")
                    else:
                        want = rewards
                    for a, b in zip(got, want):
                        self.assertAlmostEqual(a, b, places=9, msg=(estimator, norm, std))

    def test_removed_samples_are_left_out_of_the_statistics(self):
        kept = fan_out(0, 1, 1.0, 2) + fan_out(0, 2, 0.0, 1)
        removed = Sample(group_index=0, index=3, rollout_id=3, reward=0.0, remove_sample=True,
                         status=Sample.Status.ABORTED)
        out = troupe_slime.post_process_rewards(make_args(grpo_std_normalization=False), kept + [removed])
        self.assertEqual(out.rewards, [0.5, 0.5, -0.5, 0.0])
        self.assertEqual(out.removed, 1)
        # A removed sample may lack a reward: it trains nothing.
        removed.reward = None
        self.assertEqual(troupe_slime.post_process_rewards(make_args(), kept + [removed]).raw_rewards[-1], 0.0)

    def test_nested_lists_are_flattened(self):
        samples = [fan_out(0, 1, 1.0, 2), fan_out(0, 2, 0.0, 1)]
        raw, normed = troupe_slime.post_process_rewards(make_args(grpo_std_normalization=False), samples)
        self.assertEqual(raw, [1.0, 1.0, 0.0])
        self.assertEqual(normed, [0.5, 0.5, -0.5])

    def test_refuses_what_it_cannot_normalise(self):
        with self.assertRaisesRegex(ValueError, "group_index"):
            troupe_slime.post_process_rewards(make_args(), [Sample(index=0, reward=1.0)])
        with self.assertRaisesRegex(ValueError, "reward-key"):
            troupe_slime.post_process_rewards(make_args(), [Sample(group_index=0, reward={"team": 1.0})])
        with self.assertRaisesRegex(ValueError, "no reward"):
            troupe_slime.post_process_rewards(make_args(), [Sample(group_index=0)])


# --- slime's rollout loop, as slime drives custom_generate -------------------


def slime_default_args(**overrides):
    """An args Namespace with slime's DEFAULT value for every flag its
    rollout path reads (slime 624b824a: slime/utils/arguments.py,
    slime/backends/sglang_utils/arguments.py, and the values
    slime_validate_args derives), plus the troupe settings of the test.
    rollout_batch_size is required by slime (no default): the tests set it."""
    base = dict(
        # rollout sampling (arguments.py add_rollout_arguments)
        rollout_temperature=1.0,
        rollout_top_p=1.0,
        rollout_top_k=-1,
        rollout_max_context_len=None,
        rollout_max_prompt_len=None,
        rollout_max_response_len=None,
        rollout_skip_special_tokens=False,
        rollout_stop=None,
        rollout_stop_token_ids=None,
        rollout_shuffle=False,
        rollout_seed=42,
        over_sampling_batch_size=None,  # slime_validate_args: None -> rollout_batch_size
        dynamic_sampling_filter_path=None,
        partial_rollout=False,
        mask_offpolicy_in_partial_rollout=False,
        custom_generate_function_path="troupe_slime.custom_generate",
        rollout_sample_hook_path=[],
        rollout_global_dataset=True,
        rollout_batch_size=None,
        n_samples_per_prompt=1,
        global_batch_size=None,  # derived by slime_validate_args
        rollout_sample_filter_path=None,
        rollout_all_samples_process_path=None,
        # cluster (add_cluster_arguments)
        rollout_num_gpus=None,
        rollout_num_gpus_per_engine=1,
        # algorithm (add_algo_arguments)
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        # reward model (add_reward_model_arguments)
        rm_type=None,
        reward_key=None,
        eval_reward_key=None,
        group_rm=False,
        custom_reward_post_process_path="troupe_slime.post_process_rewards",
        eval_min_new_tokens=None,
        # sglang (sglang_utils/arguments.py)
        sglang_server_concurrency=512,
        sglang_router_ip=None,
        sglang_router_port=None,
        sglang_dp_size=1,
        sglang_enable_deterministic_inference=False,
        use_rollout_routing_replay=False,
        ci_test=False,
        # troupe (what troupe.yaml would set through --custom-config-path)
        troupe_url=_server.get("url"),
        troupe_token=TOKEN,
        troupe_retries=0,
        troupe_timeout=120,
    )
    base.update(overrides)
    return argparse.Namespace(**base)


def slime_sampling_params(args):
    """The sampling params slime's GenerateState builds from args."""
    params = dict(
        temperature=args.rollout_temperature,
        top_p=args.rollout_top_p,
        top_k=args.rollout_top_k,
        max_new_tokens=args.rollout_max_response_len,
        stop=args.rollout_stop,
        stop_token_ids=args.rollout_stop_token_ids,
        skip_special_tokens=args.rollout_skip_special_tokens,
        no_stop_trim=True,
        spaces_between_special_tokens=False,
    )
    if args.rollout_top_p != 1.0:
        params["custom_params"] = {"return_top_p_token_ids": True}
    return params


def slime_data_source(args, prompts):
    """slime's RolloutDataSource.get_samples: n copies of each prompt, one
    group_index per prompt, one global index per sample."""
    groups, index = [], 0
    for g, (prompt, label, metadata) in enumerate(prompts):
        group = []
        for _ in range(args.n_samples_per_prompt):
            group.append(Sample(group_index=g, index=index, prompt=prompt, label=label,
                                metadata=copy.deepcopy(metadata)))
            index += 1
        groups.append(group)
    return groups


async def slime_generate_and_rm(args, sample, sampling_params, evaluation=False):
    fn = troupe_slime.custom_generate
    if "evaluation" in inspect.signature(fn).parameters:
        out = await fn(args, sample, sampling_params, evaluation=evaluation)
    else:
        out = await fn(args, sample, sampling_params)
    if isinstance(out, list):
        if any(s.status == Sample.Status.ABORTED for s in out):
            return out
        assert all(s.reward is not None for s in out), "slime would call its reward model"
        return out
    assert out.reward is not None
    return out


async def slime_generate_and_rm_group(args, group, sampling_params, semaphore):
    for sample in group:
        if sample.session_id is None:
            sample.session_id = str(uuid.uuid4())
    seeds = [args.rollout_seed + i for i in range(args.n_samples_per_prompt)]

    async def one(idx, sample):
        params = sampling_params.copy()
        if args.sglang_enable_deterministic_inference:
            params["sampling_seed"] = seeds[idx]
        async with semaphore:
            return await slime_generate_and_rm(args, sample, params)

    return await asyncio.gather(*(asyncio.create_task(one(i, s)) for i, s in enumerate(group)))


def first_sample(group):
    return group[0][0] if isinstance(group[0], list) else group[0]


async def slime_generate_rollout(args, groups):
    """generate_rollout_async's use of the answers: one task per group,
    collected as they finish, each group logged through group[0][0],
    len(group) == n_samples_per_prompt, sorted by group[0][0].index."""
    engines = troupe_slime._rollout_num_engines(args)
    semaphore = asyncio.Semaphore(args.sglang_server_concurrency * max(1, engines))
    params = slime_sampling_params(args)
    pending = {asyncio.create_task(slime_generate_and_rm_group(args, g, params.copy(), semaphore)) for g in groups}
    data = []
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            group = task.result()
            sample = first_sample(group)
            _ = f"{[str(sample.prompt) + sample.response]}, label: {str(sample.label)[:100]}, reward: {sample.reward}"
            assert len(group) == args.n_samples_per_prompt
            data.append(group)
    assert len(data) == args.rollout_batch_size
    return sorted(data, key=lambda group: first_sample(group).index)


def slime_flatten(data):
    """_get_rollout_data: the rollout_id contract on fan-out lists, then
    flatten while data[0] is a list."""
    def validate(node, depth=0):
        if isinstance(node, Sample):
            return
        assert isinstance(node, list)
        if node and isinstance(node[0], Sample):
            if depth >= 2 and len(node) > 1:
                rids = [s.rollout_id for s in node]
                assert None not in rids and len(set(rids)) == 1, rids
            return
        for item in node:
            validate(item, depth + 1)

    validate(data)
    while isinstance(data[0], list):
        data = [s for item in data for s in item]
    return data


def slime_convert_check(testcase, args, samples):
    """What _convert_samples_to_train_data asserts and reads, and what the
    trainer needs of each sample."""
    raw, rewards = troupe_slime.post_process_rewards(args, samples)
    testcase.assertEqual(len(raw), len(samples))
    testcase.assertEqual(len(rewards), len(samples))
    testcase.assertTrue(all(math.isfinite(r) for r in rewards))
    masks = []
    for s in samples:
        if s.loss_mask is None:
            s.loss_mask = [1] * s.response_length
        testcase.assertEqual(len(s.loss_mask), s.response_length)
        if s.remove_sample:
            s.loss_mask = [0] * s.response_length
        masks.append(s.loss_mask)
        if not (s.metadata or {}).get("text_only"):
            testcase.assertGreaterEqual(s.response_length, 1)
            testcase.assertGreaterEqual(len(s.tokens) - s.response_length, 1, "a prompt token")
        if s.rollout_log_probs is not None:
            testcase.assertEqual(len(s.rollout_log_probs), s.response_length)
    sums = {}
    for s, m in zip(samples, masks):
        sums[s.rollout_id] = sums.get(s.rollout_id, 0) + sum(m)
    for s in samples:
        if s.remove_sample:
            testcase.assertEqual(sum(s.loss_mask), 0, "a removed sample trains nothing")
    if any("raw_reward" in (s.metadata or {}) for s in samples):
        logged = [s.metadata["raw_reward"] if "raw_reward" in s.metadata else s.reward for s in samples]
        testcase.assertTrue(all(isinstance(v, (int, float)) for v in logged), logged)
    testcase.assertEqual(args.rollout_top_p, 1.0)
    return raw, rewards


class SlimeLoopTest(unittest.TestCase):
    """custom_generate driven the way slime's rollout drives it, with
    slime's default args, against a real troupe serve."""

    def run_loop(self, args, prompts):
        groups = slime_data_source(args, prompts)
        data = asyncio.run(slime_generate_rollout(args, groups))
        for g, group in enumerate(data):
            self.assertEqual(len(group), args.n_samples_per_prompt)
            for out in group:
                self.assertIsInstance(out, list)
                self.assertTrue(out, "no empty list reaches slime")
                self.assertEqual({s.group_index for s in out}, {g})
                self.assertEqual(len({s.rollout_id for s in out}), 1)
        return data, slime_flatten(data)

    def test_scripted_episodes_with_slimes_defaults(self):
        args = slime_default_args(rollout_batch_size=4, n_samples_per_prompt=4, troupe_scenario="tictactoe",
                                  troupe_policy="random", troupe_allocators='["individual"]')
        prompts = [("play", "L", {}), ("play", 3, {}), ("play", {"a": 1}, {}), ("play", None, {})]
        data, flat = self.run_loop(args, prompts)
        self.assertGreater(len(flat), args.rollout_batch_size * args.n_samples_per_prompt, "fan-out")
        for (_, label, _), group in zip(prompts, data):
            for out in group:
                for s in out:
                    self.assertEqual(s.label, label)
                    self.assertEqual(s.status, Sample.Status.COMPLETED)
                    self.assertFalse(s.remove_sample)
        raw, rewards = slime_convert_check(self, args, flat)
        # Per group, each rollout once: the weighted mean of the advantages is 0.
        for g in range(args.rollout_batch_size):
            per_rollout = {}
            for s, r in zip(flat, rewards):
                if s.group_index == g:
                    per_rollout.setdefault(s.rollout_id, []).append(r)
            self.assertAlmostEqual(sum(sum(v) / len(v) for v in per_rollout.values()), 0.0, places=9)

    def test_deterministic_seeds_and_signal(self):
        args = slime_default_args(rollout_batch_size=2, n_samples_per_prompt=3, troupe_scenario="signal",
                                  troupe_policy="scripted", sglang_enable_deterministic_inference=True,
                                  rollout_max_response_len=256, reward_key="team",
                                  troupe_allocators='["team", "individual"]')
        seen = []
        original = troupe_slime.build_request

        def spy(a, sample, params, **kw):
            seen.append((sample.index, params.get("sampling_seed")))
            return original(a, sample, params, **kw)

        troupe_slime.build_request = spy
        try:
            _, flat = self.run_loop(args, [("p0", "l0", {}), ("p1", "l1", {})])
        finally:
            troupe_slime.build_request = original
        self.assertEqual(sorted(seen), [(i, 42 + i % 3) for i in range(6)], "sampling_seed = rollout_seed + j")
        raw, _ = slime_convert_check(self, args, flat)
        self.assertEqual(raw, [s.reward["team"] for s in flat])
        self.assertTrue(all(s.metadata["raw_reward"] == s.reward["team"] for s in flat))

    def test_an_episode_without_samples_keeps_the_loop_going(self):
        # Group 1 emits only o's turns and stops after x's first: empty.
        args = slime_default_args(rollout_batch_size=2, n_samples_per_prompt=2, troupe_scenario="tictactoe",
                                  troupe_policy="random")
        row = {"troupe": {"limits": {"max_turns": 1}, "emit": ["o"]}}
        data, flat = self.run_loop(args, [("a", "x", {}), ("b", "y", row)])
        for out in data[1]:
            self.assertEqual(len(out), 1)
            self.assertTrue(out[0].metadata["troupe_placeholder"])
            self.assertTrue(out[0].remove_sample)
        raw, rewards = slime_convert_check(self, args, flat)
        for s, r in zip(flat, rewards):
            if s.remove_sample:
                self.assertEqual(r, 0.0)


class FailingLLMServerTest(unittest.TestCase):
    """troupe serve with LLM policies pointed at a closed port: every
    episode is aborted; slime's loop still gets a full, untrainable batch."""

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.url = start_service(
            _server["bin"], "--llm-base-url", f"http://127.0.0.1:{closed_port()}/v1", "--llm-retries", "0")

    @classmethod
    def tearDownClass(cls):
        stop_service(cls.proc)

    def test_every_sample_is_aborted_and_removed(self):
        args = slime_default_args(rollout_batch_size=3, n_samples_per_prompt=4, troupe_url=self.url,
                                  troupe_scenario="signal", troupe_policy="llm")
        groups = slime_data_source(args, [("p", "a", {}), ("p", 2, {}), ("p", {"k": [1]}, {})])
        data = asyncio.run(slime_generate_rollout(args, groups))
        flat = slime_flatten(data)
        self.assertEqual(len(flat), 12, "one placeholder per episode")
        for group in data:
            for out in group:
                self.assertEqual(len(out), 1)
        for s in flat:
            self.assertEqual(s.status, Sample.Status.ABORTED)
            self.assertTrue(s.remove_sample)
            self.assertIn("llm", s.metadata["error"])
            self.assertTrue(s.session_id, "slime's session_id is kept")
        raw, rewards = slime_convert_check(self, args, flat)
        self.assertEqual(rewards, [0.0] * 12)

    def test_turns_before_the_failure_are_removed_unless_kept(self):
        # x plays (scripted), o's LLM fails: x's turn comes back aborted.
        sample = Sample(group_index=0, index=0)
        args = make_args(troupe_url=self.url, troupe_policies='{"x": "center-first", "o": "llm"}')
        out = generate(args, sample)
        self.assertTrue(out)
        self.assertFalse(any(s.metadata.get("troupe_placeholder") for s in out))
        for s in out:
            self.assertEqual(s.status, Sample.Status.ABORTED)
            self.assertTrue(s.remove_sample)
        out = generate(make_args(troupe_url=self.url, troupe_keep_failed=True,
                                 troupe_policies='{"x": "center-first", "o": "llm"}'), sample)
        self.assertTrue(out)
        for s in out:
            self.assertEqual(s.status, Sample.Status.ABORTED)
            self.assertFalse(s.remove_sample, "troupe_keep_failed keeps them")

    def test_the_service_removes_failed_turns_itself(self):
        # The service's side of keep_failed (rollout.Request.KeepFailed).
        request = {"scenario": "tictactoe", "n": 1, "policies": {"x": "center-first", "o": "llm"}}
        for keep in (False, True):
            answer = asyncio.run(troupe_slime._post(self.url + "/v1/rollouts",
                                                    json.dumps(dict(request, keep_failed=keep)).encode(),
                                                    TOKEN, 60, 0))
            samples = [d for r in answer["rollouts"] for d in r["samples"]]
            self.assertTrue(samples)
            for d in samples:
                self.assertEqual(d["status"], "aborted")
                self.assertEqual(d["remove_sample"], not keep)


def llama_paths():
    """Where tools/llama/build.sh caches llama-server and its tiny model
    (the same defaults as tools/llama/llamatest: $TROUPE_LLAMA_DIR, else
    $TROUPE_CACHE/llama, else ~/.cache/troupe/llama)."""
    d = os.environ.get("TROUPE_LLAMA_DIR")
    if not d:
        cache = os.environ.get("TROUPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "troupe")
        d = os.path.join(cache, "llama")
    server = os.environ.get("TROUPE_LLAMA_SERVER") or os.path.join(d, "llama-server")
    model = os.environ.get("TROUPE_LLAMA_MODEL") or os.path.join(d, "tiny-qwen2.gguf")
    return server, model


def post_json(url, body, timeout=60):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with opener.open(req, timeout=timeout) as resp:
        return json.load(resp)


class RealLlamaServerTest(unittest.TestCase):
    """slime's rollout loop, with slime's default sampling, through the
    adapter and troupe serve to LLM agents on a REAL llama.cpp server (the
    tiny random-weight Qwen2 model of tools/llama: real tokenizer, chat
    template, token ids, log-probs and grammar). Skipped when the server is
    not built, unless TROUPE_REQUIRE_LLAMA=1 (CI), where it must run."""

    @classmethod
    def setUpClass(cls):
        server, model = llama_paths()
        if not (os.access(server, os.X_OK) and os.path.isfile(model)):
            if os.environ.get("TROUPE_REQUIRE_LLAMA") == "1":
                raise RuntimeError(f"TROUPE_REQUIRE_LLAMA=1 but {server} or {model} is missing (make llama)")
            raise unittest.SkipTest(f"llama-server is not built ({server}); run make llama")
        port = closed_port()
        cls.llama_url = f"http://127.0.0.1:{port}"
        # One thread, as llamatest runs it: the tiny model's operations are
        # too small to share, and a second thread only spins waiting.
        cls.llama = subprocess.Popen(
            [server, "-m", model, "-a", "troupe-tiny-qwen2", "--host", "127.0.0.1", "--port", str(port),
             "-t", "1", "-np", "4", "-c", "8192", "--no-webui"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 180
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            try:
                with opener.open(cls.llama_url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if cls.llama.poll() is not None or time.monotonic() > deadline:
                cls.llama.kill()
                raise RuntimeError(f"llama-server did not become ready on {cls.llama_url}")
            time.sleep(0.2)
        cls.proc, cls.url = start_service(
            _server["bin"], "--llm-base-url", cls.llama_url + "/v1", "--llm-kind", "llamacpp",
            "--llm-model", "troupe-tiny-qwen2", "--llm-timeout", "120s", "--llm-max-in-flight", "4")

    @classmethod
    def tearDownClass(cls):
        stop_service(cls.proc)
        cls.llama.terminate()
        cls.llama.wait(timeout=30)

    def test_slime_loop_against_real_llama_server(self):
        # slime's defaults throughout (top_k -1, top_p 1.0, temperature 1.0,
        # no_stop_trim True, spaces_between_special_tokens False, ...), with
        # the response length bounded as a real run sets it.
        # One prompt, two samples of it: a group of siblings, two games.
        # Each LLM turn is grammar-constrained sampling, about 35 ms of the
        # tiny model's CPU a token; a second prompt's games would prove the
        # same again (labels of any JSON type: CustomGenerateTest).
        args = slime_default_args(rollout_batch_size=1, n_samples_per_prompt=2, troupe_url=self.url,
                                  troupe_scenario="tictactoe", troupe_policy="llm", troupe_invalid="forfeit",
                                  rollout_max_response_len=24, troupe_allocators='["individual"]',
                                  # A real model on a busy 2-core machine may take minutes
                                  # for an episode: the adapter's own default bound.
                                  troupe_timeout=900)
        groups = slime_data_source(args, [("play", 7, {})])
        data = asyncio.run(slime_generate_rollout(args, groups))
        self.assertEqual(len(data), 1)
        for group in data:
            self.assertEqual(len(group), args.n_samples_per_prompt)
            for out in group:
                self.assertTrue(out, "no empty list reaches slime")
                self.assertEqual(len({s.rollout_id for s in out}), 1)
        flat = slime_flatten(data)
        trained = [s for s in flat if not s.remove_sample]
        self.assertTrue(trained, "LLM turns came back: %s" % [s.metadata.get("error") for s in flat])
        for s in trained:
            self.assertFalse(s.metadata.get("text_only"), s.metadata)
            self.assertGreaterEqual(len(s.tokens) - s.response_length, 1)
            self.assertEqual(len(s.rollout_log_probs), s.response_length)
            self.assertTrue(all(lp <= 0 for lp in s.rollout_log_probs))
            # response is what the response ids decode to, less the end token.
            ids = s.tokens[-s.response_length:]
            self.assertEqual(s.metadata.get("llm_response_source"), "detokenize", s.metadata)
            whole = post_json(self.llama_url + "/detokenize", {"tokens": ids})["content"]
            less = post_json(self.llama_url + "/detokenize", {"tokens": ids[:-1]})["content"]
            self.assertIn(s.response, (whole, less), "response is the server's /detokenize of the ids")
            if s.response == less and less != whole:
                self.assertIn(s.metadata.get("llm_finish_reason"), ("stop", "tool_calls"), s.metadata)
            self.assertIn("action", s.metadata, "the parsed move is kept beside the raw completion")
        slime_convert_check(self, args, flat)


class FakeSGLang:
    """An OpenAI-compatible chat server answering as SGLang does when asked
    for token ids (choices[0].token_ids, prompt_token_ids, logprobs): the
    first value the answer schema allows, one token per character. Every
    `fail_every`-th call is answered 500."""

    def __init__(self, fail_every=0):
        self.calls, self.bodies, self.fail_every = 0, [], fail_every
        fake = self
        lock = threading.Lock()

        def handler(body):
            with lock:
                fake.calls += 1
                n = fake.calls
                fake.bodies.append(body)
            if fake.fail_every and n % fake.fail_every == 0:
                return 500, b'{"error": {"message": "boom"}}', {"Content-Type": "application/json",
                                                               "Content-Length": "30"}
            schema = body["response_format"]["json_schema"]["schema"]
            answer = {k: (v["enum"][0] if "enum" in v else "x") for k, v in schema["properties"].items()}
            content = json.dumps(answer)
            prompt = " ".join(m["content"] for m in body["messages"])
            reply = {
                "id": f"c{n}", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                "choices": [{
                    "index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                    "token_ids": [ord(c) for c in content],
                    "prompt_token_ids": [1] + [ord(c) % 1000 for c in prompt[:64]],
                    "logprobs": {"content": [{"token": c, "logprob": -0.25, "bytes": None, "top_logprobs": []}
                                             for c in content]},
                }],
                "usage": {"prompt_tokens": 65, "completion_tokens": len(content), "total_tokens": 65 + len(content)},
            }
            return json_reply(reply)

        self.service = StubService(handler)
        self.url = self.service.url + "/v1"

    def __enter__(self):
        self.service.__enter__()
        return self

    def __exit__(self, *exc):
        self.service.__exit__(*exc)


class LLMAgentsTest(unittest.TestCase):
    """troupe serve --llm-kind sglang against FakeSGLang: LLM turns with
    token ids and log-probs, as slime trains them."""

    @classmethod
    def setUpClass(cls):
        cls.llm = FakeSGLang(fail_every=5).__enter__()
        # FakeSGLang serves the chat endpoint only: without it, SGLang's
        # default token in, token out needs /generate and /v1/tokenize.
        cls.proc, cls.url = start_service(_server["bin"], "--llm-base-url", cls.llm.url, "--llm-kind", "sglang",
                                          "--llm-token-in=false", "--llm-retries", "0", "--llm-invalid-retries", "0")

    @classmethod
    def tearDownClass(cls):
        stop_service(cls.proc)
        cls.llm.__exit__(None, None, None)

    def test_slime_default_sampling_passes_unchanged(self):
        # slime always sends spaces_between_special_tokens False, which
        # SGLang's chat endpoint lacks: troupe accepts it without sending it
        # (it only changes spacing around special tokens in the text).
        args = make_args(troupe_url=self.url, troupe_scenario="signal", troupe_policy="llm")
        out = generate(args, Sample(group_index=0, index=0), slime_sampling_params(slime_default_args()))
        self.assertTrue(out)
        self.assertNotIn("spaces_between_special_tokens", self.llm.bodies[-1])

    def test_roles_and_context_length_reach_the_model(self):
        # slime's --rollout-max-context-len is every role's budget; a role's
        # own model and budget go with it (troupe_roles).
        roles = {"speaker": {"model": "lora-speaker", "max_context": 4096, "sampling": {"temperature": 0.5}}}
        args = make_args(troupe_url=self.url, troupe_scenario="signal", troupe_policy="llm", troupe_roles=json.dumps(roles),
                         rollout_max_context_len=8192, troupe_keep_failed=True)
        req = troupe_slime.build_request(args, Sample(group_index=0, index=0), {"max_new_tokens": 64})
        self.assertEqual((req["max_context"], req["roles"]), (8192, roles))
        for attempt in range(5):  # every 5th model call fails: play until one episode is whole
            before = len(self.llm.bodies)
            out = generate(args, Sample(group_index=attempt, index=attempt), {"max_new_tokens": 64})
            if all(s.status == Sample.Status.COMPLETED for s in out):
                break
        bodies = self.llm.bodies[before:]
        models = {b["model"] for b in bodies}
        self.assertIn("lora-speaker", models)
        self.assertEqual(len(models), 2, "the speaker's model, and the service's for the listener")
        for b in bodies:
            self.assertLessEqual(b["max_tokens"], 64)
            if b["model"] == "lora-speaker":
                self.assertEqual(b["temperature"], 0.5)

    def test_slime_loop_with_llm_turns(self):
        args = slime_default_args(rollout_batch_size=3, n_samples_per_prompt=4, troupe_url=self.url,
                                  troupe_scenario="signal", troupe_policy="llm",
                                  sglang_enable_deterministic_inference=True, rollout_max_response_len=64)
        groups = slime_data_source(args, [("p", "a", {}), ("p", 2, {}), ("p", {"k": 1}, {})])
        data = asyncio.run(slime_generate_rollout(args, groups))
        flat = slime_flatten(data)
        trained = [s for s in flat if not s.remove_sample]
        removed = [s for s in flat if s.remove_sample]
        self.assertTrue(trained, "some episodes succeed")
        self.assertTrue(removed, "every 5th model call fails")
        for s in trained:
            self.assertFalse(s.metadata.get("text_only"), s.metadata)
            self.assertGreaterEqual(s.response_length, 1)
            self.assertEqual(s.tokens[-s.response_length:], [ord(c) for c in s.response],
                             "the completion's ids end the tokens; response is the model's text")
            self.assertEqual(s.loss_mask, [1] * s.response_length)
            self.assertEqual(s.rollout_log_probs, [-0.25] * s.response_length)
            self.assertEqual(json.loads(s.response)["action"], s.metadata["action"],
                             "response is the raw completion, action the parsed move")
        for s in removed:
            self.assertEqual(s.status, Sample.Status.ABORTED)
        # rollout_log_probs is a list on every sample, placeholders included,
        # as slime collects it when samples[0] has one.
        self.assertTrue(all(s.rollout_log_probs is not None for s in flat))
        slime_convert_check(self, args, flat)
        sent = self.llm.bodies[-1]
        self.assertEqual((sent["temperature"], sent["max_tokens"], sent["skip_special_tokens"], sent["no_stop_trim"]),
                         (1, 64, False, True))
        self.assertNotIn("spaces_between_special_tokens", sent)
        self.assertNotIn("top_k", sent, "slime's top_k -1 is unset")
        self.assertIn("seed", sent)


class StubService:
    """A local HTTP service whose answer to each POST is handler(body)
    -> (status, bytes, headers)."""

    def __init__(self, handler, queue_size=64):
        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = queue_size
            daemon_threads = True

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, data, headers = handler(body)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def rollout_answer(request, status="completed", remove=False, turns=1):
    samples = [{
        "group_index": request.get("group_index"), "index": request.get("index", 0) + t,
        "rollout_id": request.get("rollout_id"), "prompt": "p", "tokens": [1, 2, 3], "response": "r",
        "response_length": 2, "label": request.get("label"), "reward": 1.0, "loss_mask": [1, 1],
        "rollout_log_probs": [-0.1, -0.2], "remove_sample": remove, "status": status,
        "metadata": {"raw_reward": 1.0},
    } for t in range(turns)]
    return {"rollouts": [{"rollout_id": request.get("rollout_id"), "status": status, "error": "",
                          "samples": samples}]}


def json_reply(obj, chunked=False):
    data = json.dumps(obj).encode()
    if not chunked:
        return 200, data, {"Content-Type": "application/json", "Content-Length": str(len(data))}
    body = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 7]), data[i:i + 7]) for i in range(0, len(data), 7)) + b"0\r\n\r\n"
    return 200, body, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}


class ClientTest(unittest.TestCase):
    def test_what_may_have_been_played_is_not_retried(self):
        # A timeout or a 502/504 may come after the service played the
        # episode and moved its RAE baselines: one call, then an error.
        calls = []
        release = threading.Event()

        def slow(request):
            calls.append(request)
            release.wait(10)
            return json_reply(rollout_answer(request))

        with StubService(slow) as svc:
            args = make_args(troupe_url=svc.url, troupe_retries=3, troupe_timeout=0.3)
            with self.assertRaises(troupe_slime.TroupeError) as cm:
                generate(args, Sample(group_index=0, index=0))
            release.set()
            self.assertEqual(cm.exception.code, "timeout")
            self.assertIn("not retried", cm.exception.message)
            self.assertEqual(len(calls), 1)
        for status in (502, 504):
            calls.clear()

            def gateway(request, status=status):
                calls.append(request)
                return status, b"bad gateway", {}

            with StubService(gateway) as svc:
                with self.assertRaises(troupe_slime.TroupeError) as cm:
                    generate(make_args(troupe_url=svc.url, troupe_retries=3), Sample(group_index=0, index=0))
                self.assertEqual(cm.exception.status, status)
                self.assertEqual(len(calls), 1, f"{status} is not retried")

    def test_256_calls_in_flight_at_once(self):
        # slime's default --sglang-server-concurrency 512 lets 256 calls
        # run at once; the adapter must not cap them (the default executor
        # would at min(32, cpu + 4)).
        n = 256
        barrier = threading.Barrier(n, timeout=30)
        lock = threading.Lock()
        state = {"now": 0, "most": 0}

        def handler(request):
            with lock:
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
            try:
                barrier.wait()  # held until all 256 are in flight
            finally:
                with lock:
                    state["now"] -= 1
            return json_reply(rollout_answer(request))

        with StubService(handler, queue_size=1024) as svc:
            args = slime_default_args(troupe_url=svc.url, troupe_scenario="tictactoe", troupe_timeout=90)
            self.assertEqual(troupe_slime.concurrency_limit(args), 512)
            samples = [Sample(group_index=i // 8, index=i) for i in range(n)]

            async def run_all():
                return await asyncio.gather(*(troupe_slime.custom_generate(args, s, slime_sampling_params(args))
                                              for s in samples))

            outs = asyncio.run(run_all())
        self.assertFalse(barrier.broken, "all 256 calls were in flight at once")
        self.assertEqual(state["most"], n)
        self.assertEqual([out[0].index for out in outs], list(range(n)))

    def test_troupe_concurrency_bounds_the_calls(self):
        lock = threading.Lock()
        state = {"now": 0, "most": 0}

        def handler(request):
            with lock:
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
            time.sleep(0.05)
            with lock:
                state["now"] -= 1
            return json_reply(rollout_answer(request))

        with StubService(handler) as svc:
            args = slime_default_args(troupe_url=svc.url, troupe_scenario="tictactoe", troupe_concurrency=3)

            async def run_all():
                return await asyncio.gather(*(troupe_slime.custom_generate(args, Sample(group_index=0, index=i), {})
                                              for i in range(12)))

            asyncio.run(run_all())
        self.assertEqual(state["most"], 3)
        args = slime_default_args(sglang_server_concurrency=16, rollout_num_gpus=8, rollout_num_gpus_per_engine=2)
        self.assertEqual(troupe_slime.concurrency_limit(args), 64, "as slime sizes its semaphore")
        self.assertEqual(troupe_slime.concurrency_limit(slime_default_args(rollout_num_engines=3)), 1536)

    def test_chunked_answers_and_adapter_side_keep_failed(self):
        def handler(request):
            # A service that does not apply keep_failed itself.
            return json_reply(rollout_answer(request, status="failed", turns=2), chunked=True)

        with StubService(handler) as svc:
            out = generate(make_args(troupe_url=svc.url), Sample(group_index=0, index=4, rollout_id=9, label=[1]))
            self.assertEqual(len(out), 2)
            for s in out:
                self.assertEqual((s.status, s.remove_sample, s.label), (Sample.Status.FAILED, True, [1]))
            out = generate(make_args(troupe_url=svc.url, troupe_keep_failed="yes"), Sample(group_index=0, index=4))
            self.assertTrue(all(not s.remove_sample for s in out))

    def test_an_answer_without_samples(self):
        def handler(request):
            return json_reply({"rollouts": [{"rollout_id": 5, "status": "aborted", "end": "policy_error",
                                             "error": "llm: connection refused", "samples": []}]})

        with StubService(handler) as svc:
            for reward_key in (None, "team"):
                args = make_args(troupe_url=svc.url, reward_key=reward_key)
                sample = Sample(group_index=1, index=5, label=7, session_id="sid", metadata={"source_name": "s"})
                out = generate(args, sample)
                self.assertEqual(len(out), 1)
                CustomGenerateTest.assert_placeholder(self, out[0], sample)
                self.assertEqual(out[0].metadata["error"], "llm: connection refused")
                self.assertEqual(out[0].get_reward_value(args), 0.0)


class FlakyProxy(StubService):
    """A local HTTP proxy that answers 503 shutting_down to its first
    `failures` requests, then forwards to the troupe service."""

    def __init__(self, upstream, failures):
        self.upstream, self.failures, self.calls = upstream, failures, 0

        def handler(body):
            self.calls += 1
            if self.calls <= self.failures:
                data = json.dumps({"error": {"code": "shutting_down", "message": "draining"}}).encode()
                status = 503
            else:
                req = urllib.request.Request(self.upstream + "/v1/rollouts", data=json.dumps(body).encode(), method="POST",
                                             headers={"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN})
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                with opener.open(req, timeout=60) as resp:
                    data, status = resp.read(), resp.status
            return status, data, {"Content-Type": "application/json", "Content-Length": str(len(data))}

        super().__init__(handler)


if __name__ == "__main__":
    unittest.main()
