package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/atomicfile"
)

// RemoveTemps removes Write's temporary files, and nothing else.
func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{".a.csv.tmp-123", "b.csv", ".hidden", "c.tmp", ".d.json.tmp-9"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600))
	}
	require.NoError(t, atomicfile.Write(nil, filepath.Join(dir, "e.csv"), []byte("y"), 0o600, true))
	require.NoError(t, atomicfile.RemoveTemps(nil, dir))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	require.Equal(t, []string{".hidden", "b.csv", "c.tmp", "e.csv"}, left)
	require.NoError(t, atomicfile.RemoveTemps(nil, filepath.Join(dir, "absent")), "no directory, no temporary files")
}
