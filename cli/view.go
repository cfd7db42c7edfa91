package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/viewer"
)

// viewCommand is `troupe view FILE...`: the episode viewer, served on
// this machine or written out as a static site.
func (a *App) viewCommand() *cobra.Command {
	cfg := viewer.ServeConfig{}
	var tokenFile, export string
	var exportMax int
	cmd := &cobra.Command{
		Use:   "view FILE...",
		Short: "See episodes in a browser: the bus, the states, the turns and the credit",
		Long: `View sample files (flat or nested JSONL, as troupe run writes them) and
episode files (troupe run --episodes-out) in a browser: an overview of each
run, a list of its episodes to filter and sort, each episode's message
sequence diagram, its agents' state timelines beside their roles'
diagrams, every turn (prompt, response, legal actions, notes, invalid
answers and re-asks, token counts and log-probs) and its credit under every
allocator, and two runs compared.

It indexes each file in one pass, opens episodes as they are asked for,
serves on 127.0.0.1 (a free port unless --addr) with everything embedded in
the binary, and prints the URL; Ctrl-C stops it. An address other machines
can reach needs a token (--token-file or $TROUPE_TOKEN); the printed URL
carries it. --export DIR writes the same pages as a static site instead.

Lines that cannot be read are listed on the pages, not fatal. Role diagrams
come from the scenarios this binary knows (yours too, in a program built
with cli.WithScenarios).`,
		Example: `  troupe run elfarol -n 100 --episodes-out out/elfarol.episodes.jsonl -o out/elfarol.jsonl
  troupe view out/elfarol.episodes.jsonl
  troupe view out/team.jsonl out/difference.jsonl          # compare two runs
  troupe view --export out/site out/elfarol.episodes.jsonl # a static site`,
		Args: needsArgs("view needs at least one file (samples or episode records)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if cfg.Token, err = readToken("", tokenFile); err != nil {
				return err
			}
			if exportMax < 0 {
				return usagef("--export-max %d: want 0 (all) or more", exportMax)
			}
			start := time.Now()
			var files []*viewer.File
			defer func() {
				for _, f := range files {
					f.Close()
				}
			}()
			for _, path := range args {
				f, err := viewer.Open(path)
				if err != nil {
					return a.failure("view: ", err)
				}
				files = append(files, f)
				fmt.Fprintf(a.Stderr, "troupe: %s: %d episodes in %d lines", path, f.Len(), f.Lines)
				if f.ProblemCount > 0 {
					fmt.Fprintf(a.Stderr, ", %d unreadable (listed on the pages)", f.ProblemCount)
				}
				fmt.Fprintln(a.Stderr)
			}
			v, err := viewer.New(files, a.Scenarios)
			if err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			if export != "" {
				st, err := v.Export(export, exportMax)
				if err != nil {
					return a.failure("view: export: ", err)
				}
				fmt.Fprintf(a.Stderr, "troupe: wrote %d pages (%d episodes, %.1f MiB) to %s in %v; open %s/index.html\n",
					st.Pages, st.Episodes, float64(st.Bytes)/(1<<20), export, time.Since(start).Round(time.Millisecond), export)
				return nil
			}
			cfg.Ready = func(url string) {
				fmt.Fprintf(a.Stdout, "%s\n", url)
				fmt.Fprintf(a.Stderr, "troupe: viewing %d file(s) at %s (indexed in %v; Ctrl-C stops)\n", len(files), url, time.Since(start).Round(time.Millisecond))
			}
			return a.failure("view: ", viewer.Serve(cmd.Context(), v, cfg), viewer.ErrExposed)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Addr, "addr", viewer.DefaultAddr, "address to listen on (127.0.0.1 keeps it local; any other needs a token)")
	fl.StringVar(&tokenFile, "token-file", "", "file holding the token every request must carry (or $TROUPE_TOKEN)")
	fl.StringVar(&export, "export", "", "write the pages as a static site into this directory instead of serving them")
	fl.IntVar(&exportMax, "export-max", 0, "with --export: episode pages written per file (0: all)")
	return cmd
}
