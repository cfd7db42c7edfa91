package durable_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/durable"
)

// episodeOf returns an episode of n samples numbered from first, in group
// rollout.
func episodeOf(rollout int64, n int, first int64) *trajectories.Episode {
	ep := &trajectories.Episode{}
	for i := range n {
		ep.Samples = append(ep.Samples, protocol.Sample{
			GroupIndex: rollout,
			Index:      first + int64(i),
			RolloutID:  rollout,
			Prompt:     protocol.TextPrompt(fmt.Sprintf("rollout %d turn %d: which night?", rollout, i)),
			Response:   fmt.Sprint(i % 7),
			Reward:     protocol.Scalar(float64(i%5) / 4),
			Status:     protocol.StatusCompleted,
			Metadata:   protocol.Metadata{Scenario: "elfarol", Agent: fmt.Sprintf("patron-%05d", i), Role: "patron", Step: i},
		})
	}
	return ep
}

// TestWriterKeepsDigestWhenStreamedGroupDropped: a group the JSONL writer
// wrote in part (too large to hold whole) and then dropped is cut off the
// file back to the writer's mark, which restores the digest: the next
// checkpoint's length and digest are those of the whole groups the file
// holds, as Verify reads them back, where a cut below the digest
// otherwise spoils it and fails the checkpoint.
func TestWriterKeepsDigestWhenStreamedGroupDropped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "samples.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w := durable.NewWriter(f, nil)
	jw := trajectories.NewJSONLWriter(w, trajectories.Flat)

	require.NoError(t, jw.WriteEpisode(episodeOf(0, 3, 0)))
	require.NoError(t, jw.EndGroup())
	require.NoError(t, jw.WriteEpisode(episodeOf(1, 40_000, 3)))
	fi, err := f.Stat()
	require.NoError(t, err)
	require.Greater(t, fi.Size(), int64(1<<20), "the large group must be written in part")
	jw.DropGroup()
	require.NoError(t, jw.WriteEpisode(episodeOf(2, 2, 3)))
	require.NoError(t, jw.EndGroup())
	require.NoError(t, jw.Flush())

	end, digest, err := w.Digest()
	require.NoError(t, err, "dropping a streamed group must not spoil the digest")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), end)
	samples, err := trajectories.ReadAll(bytes.NewReader(data))
	require.NoError(t, err)
	assert.Len(t, samples, 5, "the file holds the whole groups only")
	verified, err := durable.Verify(nil, durable.File{Path: path, Bytes: end, Digest: digest})
	require.NoError(t, err)
	assert.Equal(t, digest, verified.String())
}

// TestWriterTruncateBelowMarkSpoils: a cut below what the digest covers,
// other than back to the mark, still spoils it.
func TestWriterTruncateBelowMarkSpoils(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "a.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	w := durable.NewWriter(f, nil)
	_, err = w.Write([]byte("one\n"))
	require.NoError(t, err)
	w.Mark()
	_, err = w.Write([]byte("two\n"))
	require.NoError(t, err)
	require.NoError(t, w.Truncate(2))
	_, err = f.Seek(2, 0)
	require.NoError(t, err)
	_, _, err = w.Digest()
	assert.Error(t, err)
}
