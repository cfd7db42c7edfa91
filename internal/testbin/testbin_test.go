package testbin_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/testbin"
)

// TestBuildOnceAndKeep: Build links the command into the cache directory
// of this checkout; building it again, from several goroutines at once,
// keeps the binary where it is and working. (That go build then skips the
// link, which is the point, shows in CPU time only: a link writes the same
// bytes.)
func TestBuildOnceAndKeep(t *testing.T) {
	if testing.Short() {
		t.Skip("go build: not in -short")
	}
	cache := t.TempDir()
	t.Setenv(testbin.EnvCache, cache)
	bin, err := testbin.Build("hello", "./testdata/hello")
	require.NoError(t, err)
	dir, err := testbin.Dir()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "hello"), bin)
	assert.Equal(t, filepath.Join(cache, "testbin"), filepath.Dir(dir))
	out, err := exec.Command(bin).Output()
	require.NoError(t, err)
	assert.Equal(t, "hello\n", string(out))
	before, err := os.Stat(bin)
	require.NoError(t, err)

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			again, err := testbin.Build("hello", "./testdata/hello")
			assert.NoError(t, err)
			assert.Equal(t, bin, again)
		})
	}
	wg.Wait()
	after, err := os.Stat(bin)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "the binary was replaced")
	out, err = exec.Command(bin).Output()
	require.NoError(t, err)
	assert.Equal(t, "hello\n", string(out))
}

func TestBuildRefuses(t *testing.T) {
	t.Setenv(testbin.EnvCache, t.TempDir())
	for _, name := range []string{"", ".", "..", "a/b"} {
		_, err := testbin.Build(name, "./testdata/hello")
		assert.ErrorContains(t, err, "not a plain file name", "%q", name)
	}
	_, err := testbin.Build("nothing", "./testdata/nothing")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "go build -o")
	assert.Contains(t, err.Error(), "testdata/nothing", "go build's own output says what is missing")
	t.Setenv("PATH", "")
	_, err = testbin.Build("hello", "./testdata/hello")
	assert.ErrorIs(t, err, testbin.ErrNoGo)
}
