"""Tests of troupe_slime against a real troupe rollout service.

The service is the binary named by $TROUPE_BIN (`troupe` itself), started as
``$TROUPE_BIN serve --addr 127.0.0.1:0 --token TOKEN``; without
$TROUPE_BIN troupe is built from cmd/troupe with `go build`. slime itself is not
needed: slime_sample_standin.Sample is a minimal stand-in for slime's
Sample class.

    python3 -m unittest discover -s examples/slime -v
"""

import asyncio
import http.server
import json
import math
import os
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import types
import unittest
import urllib.request

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__

import troupe_slime  # noqa: E402
from slime_sample_standin import Sample  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOKEN = "test-token-7f3a"

_server = {}


def setUpModule():
    binary = os.environ.get("TROUPE_BIN")
    tmp = tempfile.mkdtemp(prefix="troupe-slime-test-")
    _server["tmp"] = tmp
    if not binary:
        binary = os.path.join(tmp, "troupe")
        subprocess.run(
            ["go", "build", "-o", binary, "./cmd/troupe"],
            cwd=REPO, check=True,
        )
    proc = subprocess.Popen(
        [binary, "serve", "--addr", "127.0.0.1:0", "--token", TOKEN],
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
    _server.update(proc=proc, url=url)


def tearDownModule():
    proc = _server.get("proc")
    if proc is not None:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        # The test server exits 0 after draining; the troupe CLI exits 143
        # (128 + SIGTERM), as a process stopped by SIGTERM does.
        assert code in (0, 143), f"the service exited with {code} after SIGTERM"


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

    def test_always_a_list_even_of_zero_or_one(self):
        # Only o's turns are emitted, and the game stops after x's first.
        row = {"troupe": {"limits": {"max_turns": 1}, "emit": ["o"]}}
        self.assertEqual(generate(make_args(), Sample(group_index=0, index=1, metadata=row)), [])
        row = {"troupe": {"limits": {"max_turns": 1}, "emit": ["x"]}}
        out = generate(make_args(), Sample(group_index=0, index=2, metadata=row))
        self.assertIsInstance(out, list)
        self.assertEqual(len(out), 1)
        self.assertEqual(out[0].status, Sample.Status.TRUNCATED)

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
        raw, _ = troupe_slime.post_process_rewards(args, out)
        self.assertEqual(raw, [s.reward["team"] for s in out])

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
            "temperature": 0.7, "top_p": 0.9, "top_k": -1, "max_new_tokens": 512,
            "stop": ["</s>"], "stop_token_ids": (2,), "sampling_seed": 11,
            "skip_special_tokens": False, "no_stop_trim": True, "custom_params": None,
        }
        sample = Sample(group_index=2, index=9, rollout_id=30, prompt=[{"role": "user", "content": "hi"}],
                        label="7", session_id="s")
        req = troupe_slime.build_request(make_args(troupe_params='{"illegal": "penalty"}'), sample, sampling)
        self.assertEqual(req["sampling"], {
            "temperature": 0.7, "top_p": 0.9, "top_k": -1, "max_tokens": 512,
            "stop": ["</s>"], "stop_token_ids": [2], "seed": 11,
            "extra": {"skip_special_tokens": False, "no_stop_trim": True},
        })
        self.assertEqual((req["group_index"], req["index"], req["rollout_id"]), (2, 9, 30))
        self.assertEqual((req["prompt"], req["label"], req["session_id"]), (sample.prompt, "7", "s"))
        self.assertEqual((req["scenario"], req["n"], req["params"]), ("tictactoe", 1, {"illegal": "penalty"}))
        self.assertNotIn("reward_format", req)
        req = troupe_slime.build_request(make_args(reward_key="team"), sample, {})
        self.assertEqual(req["reward_format"], "dict", "--reward-key reads dict rewards")

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
        for args in (make_args(advantage_estimator="ppo"), make_args(rewards_normalization=False)):
            raw, normed = troupe_slime.post_process_rewards(args, samples)
            self.assertEqual((raw, normed), (rewards, rewards))
        _, normed = troupe_slime.post_process_rewards(make_args(advantage_estimator="reinforce_plus_plus_baseline"), samples)
        self.assertEqual(normed, [1.0, 1.0, -1.0, -1.0, -1.0], "centred only")

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


class FlakyProxy:
    """A local HTTP proxy that answers 503 shutting_down to its first
    `failures` requests, then forwards to the troupe service."""

    def __init__(self, upstream, failures):
        self.upstream, self.failures, self.calls = upstream, failures, 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                proxy.calls += 1
                if proxy.calls <= proxy.failures:
                    data = json.dumps({"error": {"code": "shutting_down", "message": "draining"}}).encode()
                    status = 503
                else:
                    req = urllib.request.Request(proxy.upstream + self.path, data=body, method="POST",
                                                 headers={k: v for k, v in self.headers.items()
                                                          if k.lower() in ("content-type", "authorization")})
                    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                    with opener.open(req, timeout=60) as resp:
                        data, status = resp.read(), resp.status
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":
    unittest.main()
