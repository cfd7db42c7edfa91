package league_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/scenarios"
)

// A rule that parses prints back to a spec that parses to the same rule.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"uniform", "self", "latest", "pfsp", "pfsp:weighting=variance,p=3", "fixed:a=1,b=2", "mix:self=0.35,pfsp=0.5,uniform=0.15", "mix:pfsp:p=2=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		r, err := league.ParseRule(spec)
		if err != nil {
			return
		}
		back, err := league.ParseRule(r.String())
		require.NoError(t, err, "%q printed as %q", spec, r.String())
		require.Equal(t, r.String(), back.String())
	})
}

// Whatever league.json and matches.jsonl hold, Open answers with a league
// or an error, never a panic.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	l, err := league.Create(dir, league.Config{Name: "f", Scenario: "tictactoe"}, scenarios.Builtin())
	require.NoError(f, err)
	require.NoError(f, l.Add(league.Player{Name: "r", Policy: runspecPolicy("random")}))
	require.NoError(f, l.Close())
	def, err := os.ReadFile(filepath.Join(dir, league.FileLeague))
	require.NoError(f, err)
	f.Add(def, []byte(""))
	f.Add(def, []byte(`{"match":0,"rule":"uniform","focal":"r","focal_role":"x","roles":{"x":"r","o":"r"},"scores":{"x":1,"o":-1},"status":"completed"}`+"\n"))
	// One directory and one registry for the whole run, the league's two
	// files written anew for each input: a directory per input (t.TempDir)
	// and the built-in registry made again cost most of an input's time,
	// in system calls. What Open leaves besides (its lock file) is the
	// same for every input, and a lock it failed to release would show as
	// ErrInUse at the next input.
	d, reg := f.TempDir(), scenarios.Builtin()
	f.Fuzz(func(t *testing.T, leagueJSON, log []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(d, league.FileLeague), leagueJSON, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(d, league.FileLog), log, 0o644))
		l, err := league.Open(d, reg)
		require.NotErrorIs(t, err, league.ErrInUse, "the previous input's Open left the lock held")
		if err == nil {
			_ = l.Ratings()
			_ = l.Payoff()
			require.NoError(t, l.Close())
		}
	})
}
