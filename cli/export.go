package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/internal/vfs"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/parquet"
)

// exportCommand is `troupe export --parquet DIR FILE...`: output files as
// Parquet tables for analysis.
func (a *App) exportCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "export --parquet DIR FILE...",
		Short: "Write sample and episode files as Parquet tables, for DuckDB, pandas or Polars",
		Long: `Write each FILE as Apache Parquet tables into DIR (created if need be). A
samples file (flat or nested JSONL) becomes NAME.samples.parquet, one row per
sample; an episode file (troupe run --episodes-out) becomes
NAME.episodes.parquet, NAME.turns.parquet, NAME.messages.parquet and
NAME.transitions.parquet: one row per episode, per turn (emitted or not, with
its credit under every allocator), per bus message and per state-machine
transition. NAME is the file's name without .jsonl (and without .episodes).
The tables join on rollout_id; their columns are in docs/parquet.md.

The export streams (one row group in memory at a time) and writes the same
bytes for the same input. A file that cannot be read whole (a line that does
not parse, a cut last line) is an error naming the line, and leaves none of
its tables behind.`,
		Example: `  troupe run signal -n 1000 -a team,leave-one-out --reward-format dict \
      -o out/signal.jsonl --episodes-out out/signal.episodes.jsonl
  troupe export --parquet out/pq out/signal.jsonl out/signal.episodes.jsonl
  duckdb -c "SELECT agent, avg(rewards['team']) FROM 'out/pq/signal.samples.parquet' GROUP BY agent"`,
		Args: needsArgs("export needs at least one file (samples or episode records)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return usagef("export needs --parquet DIR, the directory to write the tables into")
			}
			// Two files whose tables would have one name are refused
			// before anything is written.
			seen := map[string]string{}
			for _, path := range args {
				episodes, err := fileHoldsEpisodes(a.fsys(), path)
				if err != nil {
					return a.failure("export: "+path+": ", err)
				}
				key := exportName(path) + "." + map[bool]string{false: "samples", true: "episodes"}[episodes]
				if other, ok := seen[key]; ok {
					return usagef("%s and %s would both be exported as %s.parquet", other, path, key)
				}
				seen[key] = path
			}
			if err := vfs.MkdirAllDurable(a.fsys(), dir, 0o755); err != nil {
				return a.failure("export: ", err)
			}
			for _, path := range args {
				msg, err := exportParquet(cmd.Context(), a.fsys(), path, dir)
				if err != nil {
					return a.failure("export: ", err)
				}
				fmt.Fprintln(a.Stdout, msg)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "parquet", "", "directory to write the Parquet tables into")
	return cmd
}

// exportName is the NAME of FILE's tables: its base name without .jsonl
// and without .episodes.
func exportName(path string) string {
	name := strings.TrimSuffix(filepath.Base(path), ".jsonl")
	return strings.TrimSuffix(name, ".episodes")
}

// exportParquet writes the tables of the file at path into dir on fsys
// and returns the line that reports them. The tables are written to
// temporary files, synced, renamed into place once all are whole, and dir
// synced: an error before the renames leaves none, and whatever fails, no
// table is left under its name that is not whole.
func exportParquet(ctx context.Context, fsys vfs.FS, path, dir string) (string, error) {
	in, err := vfs.Open(fsys, path)
	if err != nil {
		return "", err
	}
	defer in.Close()
	br := bufio.NewReaderSize(in, 64<<10)
	episodes, err := isEpisodeFile(br)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	name := exportName(path)
	tables := []string{"samples"}
	if episodes {
		tables = []string{"episodes", "turns", "messages", "transitions"}
	}
	out := make([]vfs.File, len(tables))
	defer func() {
		for _, f := range out {
			if f != nil {
				f.Close()
				fsys.Remove(f.Name())
			}
		}
	}()
	bufs := make([]*bufio.Writer, len(tables))
	for i, t := range tables {
		if out[i], err = fsys.CreateTemp(dir, "."+name+"."+t+".parquet.tmp-*"); err != nil {
			return "", err
		}
		bufs[i] = bufio.NewWriterSize(out[i], 1<<20)
	}
	var counts string
	if episodes {
		counts, err = exportEpisodes(ctx, br, parquet.EpisodeTables{Episodes: bufs[0], Turns: bufs[1], Messages: bufs[2], Transitions: bufs[3]})
	} else {
		counts, err = exportSamples(ctx, br, bufs[0])
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	var written []string
	for i, t := range tables {
		if err := bufs[i].Flush(); err != nil {
			return "", err
		}
		// CreateTemp makes the file private (0600); the tables are
		// as readable as the files troupe run writes.
		if err := out[i].Chmod(0o644); err != nil {
			return "", err
		}
		// Synced before the rename: a power loss never leaves a table
		// under its name that is not whole.
		if err := out[i].Sync(); err != nil {
			return "", err
		}
		if err := out[i].Close(); err != nil {
			return "", err
		}
		final := filepath.Join(dir, name+"."+t+".parquet")
		if err := fsys.Rename(out[i].Name(), final); err != nil {
			return "", err
		}
		out[i] = nil
		written = append(written, final)
	}
	// And the names: once export says the tables are written, they are.
	if err := fsys.SyncDir(dir); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: %s written to %s", path, counts, strings.Join(written, ", ")), nil
}

// fileHoldsEpisodes reports whether the file at path holds episode
// records rather than samples.
func fileHoldsEpisodes(fsys vfs.FS, path string) (bool, error) {
	f, err := vfs.Open(fsys, path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return isEpisodeFile(bufio.NewReader(f))
}

// isEpisodeFile reports whether br holds episode records (its first line
// opens with the format key) rather than samples, without consuming it.
func isEpisodeFile(br *bufio.Reader) (bool, error) {
	for n := 64; ; n *= 2 {
		head, err := br.Peek(n)
		head = bytes.TrimLeft(head, " \t\r\n")
		if len(head) >= len(`{"format"`) || err != nil {
			if len(head) == 0 && err != nil {
				if errors.Is(err, io.EOF) {
					return false, errors.New("the file is empty")
				}
				return false, err
			}
			return bytes.HasPrefix(head, []byte(`{"format"`)), nil
		}
		if n >= br.Size() {
			return false, nil
		}
	}
}

func exportSamples(ctx context.Context, r io.Reader, w io.Writer) (string, error) {
	sw, err := parquet.NewSampleWriter(w)
	if err != nil {
		return "", err
	}
	rd := trajectories.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		samples, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
		for i := range samples {
			if err := sw.Write(&samples[i]); err != nil {
				return "", err
			}
		}
	}
	if err := sw.Close(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d samples", sw.Rows()), nil
}

func exportEpisodes(ctx context.Context, r io.Reader, dst parquet.EpisodeTables) (string, error) {
	ew, err := parquet.NewEpisodeWriter(dst)
	if err != nil {
		return "", err
	}
	rd := trajectories.NewEpisodeReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		rec, credit, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
		if err := ew.Write(rec, credit); err != nil {
			return "", err
		}
	}
	if err := ew.Close(); err != nil {
		return "", err
	}
	n := ew.Rows()
	return fmt.Sprintf("%d episodes, %d turns, %d messages, %d transitions", n.Episodes, n.Turns, n.Messages, n.Transitions), nil
}
