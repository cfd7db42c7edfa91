package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/distributed/natsrun"
)

// workerCommand is `troupe worker`: it pulls the episode requests of
// distributed runs from NATS JetStream, plays them, and stores their
// samples, until SIGTERM, when it hands back what it holds and exits 0.
func (a *App) workerCommand() *cobra.Command {
	nf := natsrun.DefaultFlags()
	var concurrency int
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Play the episodes of distributed runs, pulled from NATS JetStream (--nats URL)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nf.ApplyEnv(a.lookupEnv())
			if concurrency == 0 {
				concurrency = runtime.GOMAXPROCS(0)
			}
			logger := slog.New(slog.NewTextHandler(a.Stderr, nil))
			err := nf.RunWorker(cmd.Context(), a.Scenarios, nil, concurrency, logger)
			switch {
			case errors.Is(err, natsrun.ErrNoURL), errors.Is(err, natsrun.ErrBadConfig):
				return &UsageError{Err: err}
			case err != nil:
				fmt.Fprintf(a.Stderr, "troupe: worker: %v\n", err)
				return &exitError{code: ExitFailure, err: err}
			}
			return nil
		},
	}
	nf.BindWorker(cmd.Flags())
	cmd.Flags().IntVarP(&concurrency, "concurrency", "c", 0, "episodes played at once; 0: one per CPU (LLM episodes: many more)")
	return cmd
}
