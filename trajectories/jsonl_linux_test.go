//go:build linux

package trajectories_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/trajectories"
)

// flushWithSizeLimit runs jw.Flush with the process's file size limit
// (RLIMIT_FSIZE) set to limit bytes, so that the write to the file stops part
// way with EFBIG, as on a full disk. The Go runtime ignores SIGXFSZ, so the
// write just fails. The limit applies to every file the process writes; it
// is lifted again before anything else runs (no test of this package is
// parallel).
func flushWithSizeLimit(t *testing.T, jw *trajectories.JSONLWriter, limit int64) error {
	t.Helper()
	return withSizeLimit(t, limit, jw.Flush)
}

// withSizeLimit runs f with the process's file size limit set to limit
// bytes (see flushWithSizeLimit).
func withSizeLimit(t *testing.T, limit int64, f func() error) error {
	t.Helper()
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old))
	if uint64(limit) > old.Cur {
		t.Skipf("file size limit %d is already below %d", old.Cur, limit)
	}
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: uint64(limit), Max: old.Max}))
	defer func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
			panic(err) // every later file write of the process could fail
		}
	}()
	return f()
}

// checkFailedFlush buffers three more episodes in jw (of the given layout)
// and flushes them under a file size limit that falls halfway through them.
// The failed Flush must leave want (the bytes of whole episodes) in f, and
// the writer must stay failed.
func checkFailedFlush(t *testing.T, f *os.File, jw *trajectories.JSONLWriter, layout trajectories.Layout, want []byte) {
	t.Helper()
	for _, ep := range fxEpisodes(4, 4, 4) {
		require.NoError(t, jw.WriteEpisode(ep))
	}
	buffered := len(writeAll(t, layout, fxEpisodes(4, 4, 4)))
	err := flushWithSizeLimit(t, jw, int64(len(want)+buffered/2))
	require.ErrorIs(t, err, syscall.EFBIG)

	got, rerr := os.ReadFile(f.Name())
	require.NoError(t, rerr)
	assert.Equal(t, string(want), string(got), "the file must hold only whole episodes")
	_, rerr = trajectories.ReadAll(bytes.NewReader(got))
	assert.NoError(t, rerr)

	// The error is sticky, and nothing more reaches the file.
	assert.ErrorIs(t, jw.WriteEpisode(fxEpisode(8, 8, 1, 80)), syscall.EFBIG)
	assert.ErrorIs(t, jw.Flush(), syscall.EFBIG)
	got, rerr = os.ReadFile(f.Name())
	require.NoError(t, rerr)
	assert.Equal(t, len(want), len(got))
}

func TestJSONLWriterTruncatesFileAfterFailedWrite(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "samples.jsonl"))
			require.NoError(t, err)
			defer f.Close()
			jw := trajectories.NewJSONLWriter(f, l.layout)
			first := fxEpisodes(3, 2)
			for _, ep := range first {
				require.NoError(t, jw.WriteEpisode(ep))
			}
			require.NoError(t, jw.Flush())
			checkFailedFlush(t, f, jw, l.layout, writeAll(t, l.layout, fxEpisodes(3, 2)))
		})
	}
}

// TestJSONLWriterTruncatesAppendedFile appends to a file that already holds
// an earlier run's episodes. A failed write must cut back only the partial
// episode, never the earlier run.
func TestJSONLWriterTruncatesAppendedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "samples.jsonl")
	earlier := writeAll(t, trajectories.Flat, fxEpisodes(2, 2, 2))
	require.NoError(t, os.WriteFile(path, earlier, 0o644))

	for _, open := range []struct {
		name string
		open func() (*os.File, error)
	}{
		{"O_APPEND", func() (*os.File, error) { return os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0) }},
		{"seek to end", func() (*os.File, error) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err == nil {
				_, err = f.Seek(0, io.SeekEnd)
			}
			return f, err
		}},
	} {
		t.Run(open.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(path, earlier, 0o644))
			f, err := open.open()
			require.NoError(t, err)
			defer f.Close()
			jw := trajectories.NewJSONLWriter(f, trajectories.Flat)
			require.NoError(t, jw.WriteEpisode(fxEpisode(7, 7, 2, 70)))
			require.NoError(t, jw.Flush())
			want := append(bytes.Clone(earlier), writeAll(t, trajectories.Flat, []*trajectories.Episode{fxEpisode(7, 7, 2, 70)})...)
			checkFailedFlush(t, f, jw, trajectories.Flat, want)
		})
	}
}

// TestJSONLWriterCutsStreamedGroupAfterFailedWrite: a write that fails part
// way through a group written to the file in pieces (too large to hold
// whole) cuts the whole group off, the pieces written before included, so
// that the file holds the groups before it only.
func TestJSONLWriterCutsStreamedGroupAfterFailedWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "samples.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	jw := trajectories.NewJSONLWriter(f, trajectories.Flat)
	first := fxEpisode(0, 0, 3, 0)
	require.NoError(t, jw.WriteEpisode(first))
	require.NoError(t, jw.EndGroup())
	require.NoError(t, jw.Flush())
	want := encodedLines(trajectories.Flat, first)

	large := fxEpisode(1, 1, largeSamples, 3)
	limit := int64(len(want) + len(encodedLines(trajectories.Flat, large))/2)
	err = withSizeLimit(t, limit, func() error { return jw.WriteEpisode(large) })
	require.ErrorIs(t, err, syscall.EFBIG)
	jw.DropGroup()

	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "the file must hold only whole groups")
	assert.ErrorIs(t, jw.Flush(), syscall.EFBIG, "the error is sticky")
}
