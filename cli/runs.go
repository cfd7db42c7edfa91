package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/distributed/natsrun"
)

// runsCommand is `troupe runs`: the distributed runs a NATS deployment
// holds, and their ends: list, show, cancel, purge.
func (a *App) runsCommand() *cobra.Command {
	nf := natsrun.DefaultFlags()
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List, show, cancel and purge the distributed runs a NATS deployment holds (--nats URL)",
		Long: `The runs a NATS deployment holds: every run troupe run --nats (or troupe
serve --nats) registered and has not purged. A completed run purges itself;
an interrupted or killed one stays, for a re-attach, until its age limit
(--nats-results-max-age of its submitter's deployment) or troupe runs purge.

  troupe runs list                 every run: episodes done, work messages queued and in flight, its submitter
  troupe runs show RUN             one run in full, with the workers that cannot play it and why
  troupe runs cancel RUN...        stop runs: their queued requests go, their submitters stop
  troupe runs purge RUN...         remove everything of runs (--abandoned: of every run no submitter holds)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	nf.BindRuns(cmd.PersistentFlags())
	with := func(f runsAction) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			nf.ApplyEnv(a.lookupEnv())
			logger := slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			d, err := nf.OpenAdmin(cmd.Context(), logger)
			if err != nil {
				return a.natsError("runs", err)
			}
			defer d.Close()
			return a.natsError("runs", f(cmd.Context(), d.Client, args))
		}
	}
	list := &cobra.Command{
		Use: "list", Short: "List the deployment's runs", Args: cobra.NoArgs,
		RunE: with(func(ctx context.Context, c *natsrun.Client, _ []string) error {
			runs, err := c.Runs(ctx)
			if err != nil {
				return err
			}
			writeRuns(a.Stdout, runs)
			return nil
		}),
	}
	show := &cobra.Command{
		Use: "show RUN", Short: "Show one run in full", Args: cobra.ExactArgs(1),
		RunE: with(func(ctx context.Context, c *natsrun.Client, args []string) error {
			info, err := c.Run(ctx, args[0])
			if err != nil {
				return err
			}
			writeRun(a.Stdout, &info)
			return nil
		}),
	}
	cancel, purge := a.runsCancelCommand(with), a.runsPurgeCommand(with)
	cmd.AddCommand(list, show, cancel, purge)
	return cmd
}

// runsAction is the work of a troupe runs subcommand, on the client of
// the deployment that --nats names.
type runsAction func(ctx context.Context, c *natsrun.Client, args []string) error

// runsCancelCommand is `troupe runs cancel`; with opens the deployment.
func (a *App) runsCancelCommand(with func(runsAction) func(*cobra.Command, []string) error) *cobra.Command {
	var reason string
	cancel := &cobra.Command{
		Use: "cancel RUN...", Short: "Cancel runs: remove their queued requests and stop their submitters", Args: cobra.MinimumNArgs(1),
		RunE: with(func(ctx context.Context, c *natsrun.Client, args []string) error {
			for _, id := range args {
				info, err := c.Run(ctx, id)
				if err != nil {
					return err
				}
				if err := c.Cancel(ctx, id, reason); err != nil {
					return err
				}
				fmt.Fprintf(a.Stdout, "troupe: run %s cancelled: %d queued work messages removed; %d episodes done stay until troupe runs purge %s\n", id, info.Queued, info.Done, id)
			}
			return nil
		}),
	}
	cancel.Flags().StringVar(&reason, "reason", "cancelled with troupe runs cancel", "what the run's submitter is told")
	return cancel
}

// runsPurgeCommand is `troupe runs purge`; with opens the deployment.
func (a *App) runsPurgeCommand(with func(runsAction) func(*cobra.Command, []string) error) *cobra.Command {
	var abandoned bool
	purge := &cobra.Command{
		Use: "purge RUN...", Short: "Remove everything the deployment holds of runs", Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 && !abandoned {
				return usagef("purge needs run ids, or --abandoned")
			}
			if len(args) > 0 && abandoned {
				return usagef("purge takes run ids or --abandoned, not both")
			}
			return nil
		},
		RunE: with(func(ctx context.Context, c *natsrun.Client, args []string) error {
			if abandoned {
				runs, err := c.Runs(ctx)
				if err != nil {
					return err
				}
				for _, r := range runs {
					if !r.HolderLive {
						args = append(args, r.ID)
					}
				}
			}
			for _, id := range args {
				if err := c.Purge(ctx, id); err != nil {
					return err
				}
				fmt.Fprintf(a.Stdout, "troupe: run %s purged\n", id)
			}
			if len(args) == 0 {
				fmt.Fprintln(a.Stdout, "troupe: no abandoned run")
			}
			return nil
		}),
	}
	purge.Flags().BoolVar(&abandoned, "abandoned", false, "purge every run no live submitter holds (interrupted, killed)")
	return purge
}

// natsError is what a NATS command returns for err: a usage error for a
// bad command line or configuration, else the error, printed, with exit
// status 1; nil for nil.
func (a *App) natsError(command string, err error) error {
	if ue, ok := errors.AsType[*UsageError](err); ok {
		return ue
	}
	return a.failure(command+": ", err, natsrun.ErrNoURL, natsrun.ErrBadConfig)
}

// state is a run's state in a word.
func state(r *natsrun.RunInfo) string {
	switch {
	case r.Cancelled != "":
		return "cancelled"
	case r.Incompatible != "":
		return "incompatible"
	case r.HolderLive:
		return "running"
	case r.Done >= r.Episodes && r.Episodes > 0:
		return "complete"
	}
	return "abandoned"
}

func writeRuns(w io.Writer, runs []natsrun.RunInfo) {
	if len(runs) == 0 {
		fmt.Fprintln(w, "no runs")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATE\tSCENARIO\tDONE\tQUEUED\tIN FLIGHT\tCREATED")
	for i := range runs {
		r := &runs[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d\t%s\n", r.ID, state(r), r.Scenario, r.Done, r.Episodes, r.Queued, r.InFlight, r.Created.UTC().Format(time.RFC3339))
	}
	_ = tw.Flush()
}

func writeRun(w io.Writer, r *natsrun.RunInfo) {
	fmt.Fprintf(w, "run:         %s (revision %d)\n", r.ID, r.Revision)
	fmt.Fprintf(w, "state:       %s\n", state(r))
	if r.Incompatible != "" {
		fmt.Fprintf(w, "record:      %s\n", r.Incompatible)
	}
	fmt.Fprintf(w, "scenario:    %s\n", r.Scenario)
	fmt.Fprintf(w, "created:     %s\n", r.Created.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "episodes:    %d done of %d; work messages: %d queued, %d in flight; %d result messages stored\n", r.Done, r.Episodes, r.Queued, r.InFlight, r.Results)
	fmt.Fprintf(w, "delivery:    ack wait %v, max deliver %d, max ack pending %d\n", r.Delivery.AckWait, r.Delivery.MaxDeliver, r.Delivery.MaxAckPending)
	if r.Holder != "" {
		live := "silent: killed or cut off"
		if r.HolderLive {
			live = "live"
		}
		fmt.Fprintf(w, "submitter:   %s, %s (lease renewed %s)\n", r.Holder, live, r.LeaseRenewed.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintf(w, "submitter:   none\n")
	}
	if r.Cancelled != "" {
		fmt.Fprintf(w, "cancelled:   %s\n", r.Cancelled)
	}
	for _, ref := range r.Refusals {
		fmt.Fprintf(w, "refused by:  %s: %s\n", ref.Worker, strings.ReplaceAll(ref.Reason, "\n", " "))
	}
}
