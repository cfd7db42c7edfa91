package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/runspec"
)

// TestPrintSpecRoundTrip: the flags → --print-spec → --spec path writes
// the bytes the flags write, for every built-in scenario.
func TestPrintSpecRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, sc := range []string{"tictactoe", "elfarol", "signal", "committee", "debate", "negotiation"} {
		t.Run(sc, func(t *testing.T) {
			flags := []string{"run", sc, "-n", "12", "-s", "3", "-g", "4", "-a", "team,individual", "--reward-format", "dict",
				"--max-steps", "3", "--rollout-id-base", "5", "--on-invalid", "penalty"}
			p := troupe(t, append(flags, "--print-spec")...)
			require.Equal(t, ExitOK, p.code, p.stderr)
			spec, err := runspec.DecodeBytes([]byte(p.stdout))
			require.NoError(t, err, p.stdout)
			assert.Equal(t, sc, spec.Scenario)
			assert.Equal(t, runspec.Invalid{Mode: "end", Penalty: -1.5, Bonus: 0.5}, spec.OnInvalid)
			assert.NotEmpty(t, spec.Params, "defaults are explicit")

			file := filepath.Join(dir, sc+".spec.json")
			require.NoError(t, os.WriteFile(file, []byte(p.stdout), 0o644))
			fromFlags, fromSpec := filepath.Join(dir, sc+".flags.jsonl"), filepath.Join(dir, sc+".spec.jsonl")
			r := troupe(t, append(flags, "-q", "-o", fromFlags)...)
			require.Equal(t, ExitOK, r.code, r.stderr)
			r = troupe(t, "run", "--spec", file, "-q", "-c", "3", "-o", fromSpec)
			require.Equal(t, ExitOK, r.code, r.stderr)
			assert.Equal(t, string(readFile(t, fromFlags)), string(readFile(t, fromSpec)))
			assert.NotEmpty(t, readFile(t, fromSpec))

			// Printing the spec of the spec gives it back.
			again := troupe(t, "run", sc, "--spec", file, "--print-spec")
			require.Equal(t, ExitOK, again.code, again.stderr)
			assert.Equal(t, p.stdout, again.stdout)
		})
	}
}

func TestPrintSpecSameRunSameSpec(t *testing.T) {
	// Defaults given or not, in another order: the same spec.
	a := troupe(t, "run", "elfarol", "--print-spec")
	b := troupe(t, "run", "elfarol", "-n", "100", "-s", "1", "-a", "team", "-g", "1", "--emit", "all", "-P", "patron=random", "--print-spec")
	require.Equal(t, ExitOK, a.code, a.stderr)
	require.Equal(t, ExitOK, b.code, b.stderr)
	assert.Equal(t, a.stdout, b.stdout)
	c := troupe(t, "run", "elfarol", "-s", "2", "--print-spec")
	assert.NotEqual(t, a.stdout, c.stdout)
}

func TestSpecFlagErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	p := troupe(t, "run", "elfarol", "-n", "2", "--print-spec")
	require.Equal(t, ExitOK, p.code, p.stderr)
	require.NoError(t, os.WriteFile(good, []byte(p.stdout), 0o644))
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"format":"troupe.runspec/v1","scenario":"elfarol","episodes":1,"episodez":2}`), 0o644))
	seeded := filepath.Join(dir, "seeded.json")
	require.NoError(t, os.WriteFile(seeded, []byte(`{"format":"troupe.runspec/v1","scenario":"elfarol","episodes":1,"seeds":{"scenario":3}}`), 0o644))
	badRole := filepath.Join(dir, "role.json")
	require.NoError(t, os.WriteFile(badRole, []byte(`{"format":"troupe.runspec/v1","scenario":"elfarol","episodes":1,"emit":["barman"]}`), 0o644))
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"flag with spec":  {[]string{"run", "--spec", good, "-n", "3"}, "--episodes: the run is described by --spec"},
		"unknown field":   {[]string{"run", "--spec", bad}, `unknown field "episodez"`},
		"bad field":       {[]string{"run", "--spec", badRole}, `emit[0]`},
		"fixed seeds":     {[]string{"run", "--spec", seeded}, "seeds: troupe run derives"},
		"other scenario":  {[]string{"run", "tictactoe", "--spec", good}, "is of scenario elfarol"},
		"missing file":    {[]string{"run", "--spec", filepath.Join(dir, "nope.json")}, "--spec"},
		"no scenario arg": {[]string{"run"}, "scenario name"},
	} {
		t.Run(name, func(t *testing.T) {
			r := troupe(t, append(tc.args, "-o", filepath.Join(dir, "out.jsonl"))...)
			assert.Equal(t, ExitUsage, r.code, r.stderr)
			assert.Contains(t, r.stderr, tc.want)
		})
	}
}

func TestPrintSpecLLMSettings(t *testing.T) {
	r := invokeWithEnv(t, noEnv, "run", "tictactoe", "-P", "x=llm", "--llm-base-url", "http://127.0.0.1:1/v1", "--llm-model", "m1",
		"--llm-temperature", "0.5", "--print-spec")
	require.Equal(t, ExitOK, r.code, r.stderr)
	var spec struct {
		Policies map[string]struct {
			Name     string          `json:"name"`
			Settings json.RawMessage `json:"settings"`
		} `json:"policies"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &spec))
	assert.Equal(t, "llm", spec.Policies["x"].Name)
	assert.JSONEq(t, `{"model":"m1","temperature":0.5}`, string(spec.Policies["x"].Settings))
	assert.NotContains(t, r.stdout, "127.0.0.1", "the server's address is not the run's")
	assert.Equal(t, "random", spec.Policies["o"].Name)

	// Every sampling flag that shapes the episodes is in the spec.
	r = invokeWithEnv(t, noEnv, "run", "tictactoe", "-P", "llm", "--llm-base-url", "http://127.0.0.1:1/v1", "--llm-model", "m1",
		"--llm-temperature", "0", "--llm-stop-token-id", "7", "--llm-repetition-penalty", "1.1", "--llm-min-tokens", "2", "--print-spec")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &spec))
	assert.JSONEq(t, `{"model":"m1","temperature":0,"stop_token_ids":[7],"repetition_penalty":1.1,"min_tokens":2}`, string(spec.Policies["o"].Settings))
}

// TestSpecOnEmbeddedNATS: a run from a spec file, played by NATS workers
// that resolve the run's spec themselves, writes the local run's bytes;
// its run id is the spec's hash, the same whenever the spec is run.
func TestSpecOnEmbeddedNATS(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	p := troupe(t, "run", "negotiation", "-n", "12", "-g", "3", "-P", "bob=random", "--emit", "alice", "--max-turns", "6", "--print-spec")
	require.Equal(t, ExitOK, p.code, p.stderr)
	file := filepath.Join(dir, "spec.json")
	require.NoError(t, os.WriteFile(file, []byte(p.stdout), 0o644))
	spec, err := runspec.DecodeBytes([]byte(p.stdout))
	require.NoError(t, err)

	local := troupe(t, "run", "--spec", file, "-o", filepath.Join(dir, "local.jsonl"))
	require.Equal(t, ExitOK, local.code, local.stderr)
	natsArgs := []string{"run", "--spec", file, "--nats", "embedded", "--nats-dir", filepath.Join(dir, "js"), "-o", filepath.Join(dir, "nats.jsonl")}
	remote := troupe(t, natsArgs...)
	require.Equal(t, ExitOK, remote.code, remote.stderr)
	assert.Contains(t, remote.stderr, "troupe: run negotiation-"+spec.Hash()[:20])
	assert.Equal(t, string(readFile(t, filepath.Join(dir, "local.jsonl"))), string(readFile(t, filepath.Join(dir, "nats.jsonl"))))
	again := troupe(t, natsArgs...)
	require.Equal(t, ExitOK, again.code, again.stderr)
	assert.Contains(t, again.stderr, "negotiation-"+spec.Hash()[:20], "the same spec is the same run")
}
