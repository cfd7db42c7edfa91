"""The slime adapter against `troupe serve --league DIR`: every slime sample is
a league match, the request's policy in the learner's role and the league's
opponents in the others. Run with the rest of the adapter's tests:

    python3 -m unittest discover -s examples/slime -v
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True

import test_troupe_slime as base  # noqa: E402
from slime_sample_standin import Sample  # noqa: E402

_league = {}


def troupe(*args):
    return subprocess.run([_league["bin"], *args], check=True, capture_output=True, text=True)


def setUpModule():
    tmp = tempfile.mkdtemp(prefix="troupe-slime-league-")
    binary = os.environ.get("TROUPE_BIN")
    if not binary:
        binary = os.path.join(tmp, "troupe")
        subprocess.run(["go", "build", "-o", binary, "./cmd/troupe"], cwd=base.REPO, check=True)
    _league["bin"] = binary
    league = os.path.join(tmp, "league")
    _league["dir"] = league
    troupe("league", "create", league, "--scenario", "tictactoe", "--seed", "3", "--rule", "pfsp")
    troupe("league", "add", league, "trainee", "external")
    troupe("league", "add", league, "random", "random")
    troupe("league", "add", league, "minimax", "minimax")
    proc, url = base.start_service(binary, "--league", league)
    _league.update(proc=proc, url=url)


def tearDownModule():
    proc = _league.get("proc")
    if proc is not None:
        base.stop_service(proc)


def args(**kw):
    a = base.make_args(troupe_url=_league["url"], troupe_policy="center-first", troupe_allocators='["individual"]')
    for k, v in kw.items():
        setattr(a, k, v)
    return a


class LeagueTest(unittest.TestCase):
    def test_learner_turns_against_league_opponents(self):
        played = 0
        opponents = set()
        for i in range(12):
            out = base.generate(args(), Sample(group_index=i, index=100 + i, prompt="play"))
            self.assertTrue(out)
            played += 1
            match = {s.metadata["league_match"] for s in out}
            self.assertEqual(len(match), 1, "one match per slime sample")
            for s in out:
                self.assertEqual(s.status, Sample.Status.COMPLETED)
                self.assertEqual(s.metadata["league_learner"], "trainee")
                self.assertEqual(s.metadata["role"], s.metadata["league_learner_role"], "only the learner's turns")
                self.assertIn(s.metadata["league_opponent"], ("random", "minimax"))
                self.assertEqual(s.reward, s.metadata["agent_score"])
                opponents.add(s.metadata["league_opponent"])
                back = Sample.from_dict(json.loads(json.dumps(s.to_dict())))
                self.assertEqual(back, s)
        self.assertEqual(opponents, {"random", "minimax"})
        # The results are in the league: logged in order, rated.
        with open(os.path.join(_league["dir"], "matches.jsonl")) as f:
            results = [json.loads(line) for line in f]
        self.assertEqual([r["match"] for r in results], list(range(len(results))))
        self.assertGreaterEqual(len(results), played)
        self.assertTrue(all(r["roles"][r["focal_role"]] == "trainee" for r in results))
        show = troupe("league", "show", _league["dir"]).stdout
        self.assertIn("trainee", show)
        self.assertIn(f"{len(results)} matches", show)

    def test_per_role_policies_are_refused(self):
        a = args(troupe_policies='{"x": "random"}')
        with self.assertRaises(Exception) as ctx:
            base.generate(a, Sample(group_index=0, index=0, prompt="play"))
        self.assertIn("league", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
