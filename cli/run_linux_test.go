package cli

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A write that fails (here: no space left on /dev/full) fails the run with
// exit code 1 and says so.
func TestRunReportsAFailedWrite(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full:", err)
	}
	r := troupe(t, "run", "elfarol", "-n", "3", "-o", "/dev/full")
	require.Equal(t, ExitFailure, r.code, r.stderr)
	assert.Contains(t, r.stderr, "run stopped: write samples:")
	assert.Contains(t, r.stderr, "/dev/full holds whole groups only")
	assert.NotContains(t, r.stderr, "--resume", "a device is not resumable")
	assert.NoFileExists(t, "/dev/full.progress.json")
}
