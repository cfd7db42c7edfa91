package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExportWritesParquetTables exports a run's samples and episode files
// and reads the tables' row counts back with Arrow's Parquet reader (the
// tables' contents are compared with the JSONL by DuckDB in
// trajectories/parquet): the same bytes every time, and nothing left
// behind by a file that cannot be read whole.
func TestExportWritesParquetTables(t *testing.T) {
	dir := t.TempDir()
	samples, episodes := filepath.Join(dir, "signal.jsonl"), filepath.Join(dir, "signal.episodes.jsonl")
	r := troupe(t, "run", "signal", "-n", "20", "-a", "team,leave-one-out", "--reward-format", "dict",
		"-o", samples, "--episodes-out", episodes)
	require.Equal(t, ExitOK, r.code, r.stderr)

	out := filepath.Join(dir, "pq")
	r = troupe(t, "export", "--parquet", out, samples, episodes)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, samples+": 40 samples written to "+filepath.Join(out, "signal.samples.parquet"))
	assert.Contains(t, r.stdout, episodes+": 20 episodes, 40 turns, ")
	rows := map[string]int64{}
	for _, table := range []string{"samples", "episodes", "turns", "messages", "transitions"} {
		f, err := file.OpenParquetFile(filepath.Join(out, "signal."+table+".parquet"), false)
		require.NoError(t, err, table)
		rows[table] = f.NumRows()
		f.Close()
	}
	assert.Equal(t, int64(40), rows["samples"])
	assert.Equal(t, int64(20), rows["episodes"])
	assert.Equal(t, int64(40), rows["turns"])
	assert.Positive(t, rows["messages"])
	assert.Positive(t, rows["transitions"])
	assert.Contains(t, r.stdout, fmt.Sprintf("40 turns, %d messages, %d transitions", rows["messages"], rows["transitions"]))

	// The same input writes the same bytes.
	again := filepath.Join(dir, "again")
	r = troupe(t, "export", "--parquet", again, samples, episodes)
	require.Equal(t, ExitOK, r.code, r.stderr)
	for _, table := range []string{"samples", "episodes", "turns", "messages", "transitions"} {
		a, b := readFile(t, filepath.Join(out, "signal."+table+".parquet")), readFile(t, filepath.Join(again, "signal."+table+".parquet"))
		assert.True(t, bytes.Equal(a, b), "%s differs from one export to the next", table)
	}

	// A cut last line is an error naming it, and leaves no table.
	data, err := os.ReadFile(episodes)
	require.NoError(t, err)
	cut := filepath.Join(dir, "cut.episodes.jsonl")
	require.NoError(t, os.WriteFile(cut, data[:len(data)-10], 0o644))
	bad := filepath.Join(dir, "bad")
	r = troupe(t, "export", "--parquet", bad, cut)
	assert.Equal(t, ExitFailure, r.code)
	assert.Contains(t, r.stderr, cut+": ")
	assert.Contains(t, r.stderr, "line 20")
	left, err := os.ReadDir(bad)
	require.NoError(t, err)
	assert.Empty(t, left, "a failed export leaves nothing behind")

	// So is a sample line that does not parse.
	broken := filepath.Join(dir, "broken.jsonl")
	require.NoError(t, os.WriteFile(broken, bytes.Replace(readFile(t, samples), []byte(`"rollout_id":3,`), []byte(`"rollout_id":"x",`), 1), 0o644))
	r = troupe(t, "export", "--parquet", bad, broken)
	assert.Equal(t, ExitFailure, r.code)
	assert.Contains(t, r.stderr, "broken.jsonl: line 7")

	// Usage errors: no directory, no file, two files with one name.
	assert.Equal(t, ExitUsage, troupe(t, "export", samples).code)
	assert.Equal(t, ExitUsage, troupe(t, "export", "--parquet", out).code)
	other := filepath.Join(dir, "other", "signal.jsonl")
	require.NoError(t, os.MkdirAll(filepath.Dir(other), 0o755))
	require.NoError(t, os.WriteFile(other, readFile(t, samples), 0o644))
	r = troupe(t, "export", "--parquet", out, samples, episodes, other)
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "would both be exported as signal.samples.parquet")
}
