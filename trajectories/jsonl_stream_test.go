package trajectories_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/trajectories"
)

// largeSamples is the size of an episode whose encoding is larger than the
// JSONL writers' buffer (1 MiB) several times over.
const largeSamples = 12_000

// encodedLines is ep's samples as the writers must write them, each sample
// encoded on its own (protocol.Sample.AppendJSON): one line each (Flat),
// or the episode's array on one line (Nested).
func encodedLines(layout trajectories.Layout, eps ...*trajectories.Episode) []byte {
	var out []byte
	for _, ep := range eps {
		if layout == trajectories.Nested {
			out = append(out, '[')
		}
		for i := range ep.Samples {
			if layout == trajectories.Nested && i > 0 {
				out = append(out, ',')
			}
			out = ep.Samples[i].AppendJSON(out)
			if layout == trajectories.Flat {
				out = append(out, '\n')
			}
		}
		if layout == trajectories.Nested {
			out = append(out, ']', '\n')
		}
	}
	return out
}

// fileSize is the size of the file at path.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Size()
}

// TestJSONLWriterStreamsLargeGroup: a group larger than the buffer goes to
// a regular file in pieces before it ends (the writer never holds it
// whole), and the file ends up holding exactly the samples' encoding, as
// a small group's prepared encoding is.
func TestJSONLWriterStreamsLargeGroup(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			small := fxEpisode(0, 0, 3, 0)
			large := fxEpisode(1, 1, largeSamples, 3)
			want := encodedLines(l.layout, small, large)
			require.Greater(t, len(want)-len(encodedLines(l.layout, small)), 4<<20, "the large episode must be several buffers' worth")

			path := filepath.Join(t.TempDir(), "samples.jsonl")
			f, err := os.Create(path)
			require.NoError(t, err)
			defer f.Close()
			jw := trajectories.NewJSONLWriter(f, l.layout)
			jw.Prepare(small)
			require.NoError(t, jw.WriteEpisode(small))
			require.NoError(t, jw.EndGroup())
			jw.Prepare(large) // leaves it to WriteEpisode, which encodes as it writes
			require.NoError(t, jw.WriteEpisode(large))
			spilled := fileSize(t, path)
			assert.Greater(t, spilled, int64(len(want))/2, "most of the open group must be in the file before it ends")
			assert.Less(t, spilled, int64(len(want)), "the last piece stays buffered until the group ends")
			require.NoError(t, jw.EndGroup())
			assert.Equal(t, int64(len(want)), fileSize(t, path), "a group written in part goes out whole when it ends")
			require.NoError(t, jw.Flush())
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
		})
	}
}

// TestJSONLWriterDropsStreamedGroup: dropping a group written in part cuts
// its pieces off the file, and the groups after it follow the ones before
// it, as if it had never been written.
func TestJSONLWriterDropsStreamedGroup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "samples.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	jw := trajectories.NewJSONLWriter(f, trajectories.Flat)
	first, next := fxEpisode(0, 0, 3, 0), fxEpisode(2, 2, 2, 3)
	require.NoError(t, jw.WriteEpisode(first))
	require.NoError(t, jw.EndGroup())

	require.NoError(t, jw.WriteEpisode(fxEpisode(1, 1, largeSamples, 3)))
	require.Greater(t, fileSize(t, path), int64(len(encodedLines(trajectories.Flat, first))), "the large group must be written in part")
	jw.DropGroup()
	assert.Equal(t, int64(len(encodedLines(trajectories.Flat, first))), fileSize(t, path), "the dropped group's pieces must be cut off")

	require.NoError(t, jw.WriteEpisode(next))
	require.NoError(t, jw.EndGroup())
	require.NoError(t, jw.Flush())
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(encodedLines(trajectories.Flat, first, next)), string(got))
}

// TestJSONLWriterHoldsLargeGroupForPipe: to a writer that is not a regular
// file, which a dropped group could not be cut off, a large group is
// written whole, after it ends, and a dropped one not at all.
func TestJSONLWriterHoldsLargeGroupForPipe(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	jw := trajectories.NewJSONLWriter(w, trajectories.Flat)
	// A pipe's buffer is far smaller than the group: a write to it would
	// block this goroutine, with no reader, and the test time out.
	require.NoError(t, jw.WriteEpisode(fxEpisode(1, 1, largeSamples, 0)))
	jw.DropGroup()
	small := fxEpisode(2, 2, 2, 0)
	require.NoError(t, jw.WriteEpisode(small))
	require.NoError(t, jw.EndGroup())
	require.NoError(t, jw.Flush())
	require.NoError(t, w.Close())
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, string(encodedLines(trajectories.Flat, small)), string(got))
}
