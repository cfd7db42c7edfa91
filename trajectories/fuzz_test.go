package trajectories_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// FuzzReader reads arbitrary input both ways. It must never panic; ReadAll
// and ReadRollouts must agree; and whatever is read must encode to valid
// JSON and survive a write and read back through JSONLWriter.
func FuzzReader(f *testing.F) {
	flat := writeAll(f, trajectories.Flat, fxEpisodes(2, 1, 3))
	nested := writeAll(f, trajectories.Nested, fxEpisodes(2, 1, 3))
	f.Add(flat)
	f.Add(nested)
	f.Add(append(append([]byte("\n \r\n"), nested...), flat...))
	f.Add(flat[:len(flat)-7])
	for _, seed := range []string{
		"",
		"\n\n",
		"[]\n",
		"[] \n[]\n",
		"[1]\n",
		"null\n",
		`{"rollout_id":1,"status":"completed"}` + "\n" + `[{"rollout_id":1,"status":"completed"}]` + "\n",
		`{"rollout_id":1,"status":"completed"}` + "\n" + `{"rollout_id":2,"status":"completed"}`,
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		all, errAll := trajectories.ReadAll(bytes.NewReader(data))
		rollouts, errRollouts := trajectories.ReadRollouts(bytes.NewReader(data))
		if errAll != nil || errRollouts != nil {
			require.Error(t, errAll, "ReadRollouts failed with %v", errRollouts)
			require.Error(t, errRollouts, "ReadAll failed with %v", errAll)
			require.Equal(t, errAll.Error(), errRollouts.Error())
			return
		}

		var flattened []protocol.Sample
		var eps []*trajectories.Episode
		var nonEmpty [][]protocol.Sample
		for _, r := range rollouts {
			flattened = append(flattened, r...)
			if len(r) > 0 {
				eps = append(eps, &trajectories.Episode{Record: episode.Record{}, Samples: r})
				nonEmpty = append(nonEmpty, r)
			}
		}
		require.Equal(t, all, flattened, "ReadAll and ReadRollouts disagree")
		for i := range all {
			require.True(t, json.Valid(all[i].AppendJSON(nil)), "sample %d", i)
		}

		out := writeAll(t, trajectories.Nested, eps)
		back, err := trajectories.ReadRollouts(bytes.NewReader(out))
		require.NoError(t, err, "cannot read back %s", out)
		require.Equal(t, nonEmpty, back)
	})
}

// FuzzCheck checks arbitrary input: never a panic, counts that add up, and
// no problem in what JSONLWriter writes.
func FuzzCheck(f *testing.F) {
	flat := writeAll(f, trajectories.Flat, fxEpisodes(4, 2, 3, 1))
	nested := writeAll(f, trajectories.Nested, fxEpisodes(4, 2, 3, 1))
	f.Add(flat)
	f.Add(nested)
	f.Add(flat[:len(flat)-5])
	f.Add([]byte(`{"format":"troupe.episode/v2"}` + "\n"))
	f.Add([]byte("[]\n[1]\n"))
	for _, good := range [][]byte{flat, nested} {
		rep := trajectories.Check(bytes.NewReader(good), trajectories.CheckOptions{})
		require.True(f, rep.OK(), "%v", rep.Problems)
		require.Equal(f, int64(4), rep.Episodes)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rep := trajectories.Check(bytes.NewReader(data), trajectories.CheckOptions{MaxProblems: 3})
		require.LessOrEqual(t, len(rep.Problems), 3)
		require.LessOrEqual(t, rep.Placeholders, rep.Samples)
		require.LessOrEqual(t, rep.Groups, rep.Episodes)
		if rep.Truncated {
			require.False(t, rep.OK())
		}
	})
}
