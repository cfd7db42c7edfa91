package trajectories_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// BenchmarkAppendEpisodeJSON writes the episode lines of the golden
// files, and of a few El Farol episodes, with the hand-written encoder:
// the hot path of every run that keeps its episodes.
func BenchmarkAppendEpisodeJSON(b *testing.B) {
	read := func(data []byte) ([]*episode.Record, []*trajectories.Credit) {
		var recs []*episode.Record
		var credits []*trajectories.Credit
		for line := range bytes.Lines(data) {
			rec, c, err := trajectories.DecodeEpisode(bytes.TrimSpace(line))
			if err != nil {
				b.Fatal(err)
			}
			recs, credits = append(recs, rec), append(credits, c)
		}
		return recs, credits
	}
	cases := []string{"signal", "tictactoe", "tree-tictactoe", "werewolf", "elfarol"}
	for _, name := range cases {
		b.Run(name, func(b *testing.B) {
			var data []byte
			if name == "elfarol" {
				_, data = played(b, name, 4)
			} else {
				var err error
				if data, err = os.ReadFile(filepath.Join("testdata", "episode-"+name+".jsonl")); err != nil {
					b.Fatal(err)
				}
			}
			recs, credits := read(data)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			var out []byte
			for b.Loop() {
				out = out[:0]
				for i, rec := range recs {
					var err error
					if out, err = trajectories.AppendEpisodeJSON(out, rec, credits[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
