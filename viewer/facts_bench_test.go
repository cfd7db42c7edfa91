package viewer

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkScanEpisode indexes the episode lines of trajectories' golden
// files: the scanner troupe view runs over every line of an episodes file.
func BenchmarkScanEpisode(b *testing.B) {
	for _, name := range []string{"signal", "tictactoe", "tree-tictactoe", "werewolf"} {
		b.Run(name, func(b *testing.B) {
			data, err := os.ReadFile(filepath.Join("..", "trajectories", "testdata", "episode-"+name+".jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			var lines [][]byte
			for line := range bytes.Lines(data) {
				lines = append(lines, bytes.TrimSpace(line))
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			var f episodeFacts
			in := interner{}
			for b.Loop() {
				for _, line := range lines {
					s := newScanner(line)
					s.scanEpisode(&f, in)
					s.End()
					if err := s.error(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
