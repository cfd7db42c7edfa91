package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/durable"
)

func (a *App) runCommand() *cobra.Command {
	f := &runFlags{llm: llm.DefaultConfig(), nats: natsrun.DefaultFlags()}
	// Flags override the environment: read it before binding the flags,
	// whose defaults it becomes.
	f.llmEnvErr = f.llm.ApplyEnv(a.lookupEnv())
	f.lookupEnv = a.lookupEnv()
	cmd := &cobra.Command{
		Use:   "run SCENARIO",
		Short: "Play episodes of a scenario and write their turns as samples",
		Long:  runLong,
		Example: `  troupe run elfarol --episodes 1000 --out out/elfarol.jsonl
  troupe run elfarol -n 64 -g 8 --param agents=30 --param capacity=4 \
      --allocator team,equal-split --reward-format dict --out -
  troupe run elfarol --policy patron=first-night --emit patron -n 10`,
		Args: a.oneScenario("run", &f.specFile),
		RunE: func(cmd *cobra.Command, args []string) error { return a.runE(cmd, args, f) },
	}
	f.bind(cmd.Flags())
	return cmd
}

// runLong is troupe run's help.
const runLong = `Play episodes of SCENARIO and write every agent turn as one slime Sample
(JSON Lines). The samples of one episode share a rollout_id and are written
together: the output holds whole episodes only.

The output is a pure function of the scenario, its parameters, the seed, the
policies and the limits: the same command writes the same bytes whatever
--concurrency is (a --timeout that fires is the one exception: wall time is
not reproducible).

Samples go to --out, created (parent directories too) or overwritten, and
written in place, whole groups at a time: whatever stops the run, the file
is a prefix of the uninterrupted run's output. On Ctrl-C or SIGTERM the run
stops starting groups, writes those before the first one cut short, and
exits with 130 (SIGINT) or 143 (SIGTERM). A second Ctrl-C quits at once.
Beside --out, OUT.progress.json records the run and how far it got; the
same command with --resume continues an interrupted or killed run (even by
kill -9), and the file ends byte-identical to an uninterrupted run's; it
verifies the files' bytes up to the checkpoint against the progress file's
digests first, and refuses (exit 2) a file deleted, cut or changed since,
naming it. troupe check FILE (or the run's directory) validates the files.

Episodes that end aborted or failed are written with that status and the run
goes on (the summary names the first failure), but the run exits 1 when more
of them than --max-failures (default 0) ended so, naming how many and the
first; --fail-fast stops the run at the first one with exit code 1. Exit
code 2 means a bad command line.`

// runE reads the run that args and f describe, then prints its spec
// (--print-spec) or plays it.
func (a *App) runE(cmd *cobra.Command, args []string, f *runFlags) error {
	if f.concurrency == 0 {
		f.concurrency = runtime.GOMAXPROCS(0)
	}
	f.tokenInGiven = tokenInGiven(cmd.Flags(), f.lookupEnv)
	if f.maxFailures < -1 {
		return usagef("--max-failures %d: give a count of episodes, or -1 for any number", f.maxFailures)
	}
	if cmd.Flags().Changed("merge-reward") && !f.mergeTurns && f.specFile == "" {
		return usagef("--merge-reward %s without --merge-turns: only merged samples have a merged reward", f.mergeReward)
	}
	var spec *runspec.Spec
	var err error
	if f.specFile != "" {
		spec, err = a.readSpec(cmd, f.specFile, args)
	} else {
		spec, err = specOf(a.Scenarios, a.Allocators, args[0], f)
	}
	if err != nil {
		return err
	}
	if spec.Tree != nil && f.mergeTurns {
		return usagef("--tree with --merge-turns: a tree-sampled run writes a sample per candidate, the groups AT-GRPO and MAGRPO compare; merging an agent's turns would mix them")
	}
	if !cmd.Flags().Changed("out") {
		f.out = defaultOut(spec.Scenario)
	}
	p, err := planOf(a.Scenarios, a.Allocators, spec, f, f.specFile)
	if err != nil {
		return err
	}
	if spec.Tree != nil && f.nats.Conn.URL != "" {
		for _, al := range p.allocators {
			if trajectories.TreeCreditOf(al) == trajectories.TreeByFork {
				return errors.Join(usagef("--tree with --nats and --allocator %s: it credits each candidate from its own continuation, which the workers do not send (use team, at-grpo or magrpo, or run locally)", al.Name()), p.close())
			}
		}
	}
	if f.printSpec {
		if err := p.close(); err != nil {
			return err
		}
		_, err := a.Stdout.Write(p.spec.Spec.Indent())
		return err
	}
	return a.run(cmd.Context(), p, f)
}

// bind binds troupe run's flags to f, in the order its help lists them.
func (f *runFlags) bind(fl *pflag.FlagSet) {
	fl.SortFlags = false
	fl.IntVarP(&f.episodes, "episodes", "n", 100, "number of episodes to play")
	fl.IntVarP(&f.concurrency, "concurrency", "c", 0, "groups of episodes played at once; 0 means one per CPU (does not change the output)")
	fl.Uint64VarP(&f.seed, "seed", "s", 1, "run seed: every episode's scenario and policy seeds derive from it")
	fl.StringVarP(&f.out, "out", "o", "", "output file, or - for standard output (default troupe-SCENARIO.jsonl)")
	fl.StringVar(&f.episodesOut, "episodes-out", "", "also write every episode's record (turns, messages with recipients, score, credit) to this file, one line per episode (format troupe.episode/v2); - is standard output")
	fl.StringArrayVarP(&f.params, "param", "p", nil, "scenario parameter `key=value` (repeatable; see troupe scenarios SCENARIO)")
	fl.StringArrayVarP(&f.policies, "policy", "P", nil, "policy `NAME` for every role, or ROLE=NAME for one (repeatable; default: the scenario's default, or random)")
	fl.StringArrayVarP(&f.allocators, "allocator", "a", []string{"team"}, "reward allocator `spec`: name or name:key=value,... (repeatable or comma-separated; see troupe allocators)")
	fl.StringVar(&f.rewardFormat, "reward-format", "scalar", "scalar (the first allocator's value) or dict (every allocator's value by name, for slime's --reward-key)")
	fl.IntVarP(&f.groupSize, "group-size", "g", 1, "episodes per group: they share a scenario seed and a group_index (GRPO groups)")
	fl.IntVar(&f.tree, "tree", 0, "tree sampling (AT-GRPO, MAGRPO): ask each emitted seat's policy `K` times per turn from the same history, score each candidate by playing the episode on from it, keep the best; all K become samples (0: off; see docs/credit.md)")
	fl.Float64Var(&f.treeAlpha, "tree-alpha", 1, "with --tree: a candidate's reward is alpha·team + its seat's own score (AT-GRPO's mix)")
	fl.BoolVar(&f.treeJoint, "tree-joint", false, "with --tree: candidate c of a step is the joint action of every sampled seat's c-th answer (MAGRPO), not one seat's at a time (AT-GRPO)")
	fl.StringArrayVar(&f.treeRoles, "tree-roles", nil, "with --tree: the `ROLES` tree-sampled (comma-separated, repeatable; default: every emitted role)")
	fl.StringVar(&f.layout, "layout", "flat", "flat (one sample per line) or nested (one episode's samples per line, as a JSON array)")
	fl.BoolVar(&f.mergeTurns, "merge-turns", false, "one sample per agent per episode, its whole conversation (loss mask on the model's tokens; its reward: --merge-reward), where each turn is otherwise a sample")
	fl.StringVar(&f.mergeReward, "merge-reward", string(trajectories.DefaultMergeReward), "with --merge-turns, a merged sample's reward of its turns' rewards: mean (under team or individual credit, the episode's reward whatever its length), sum (the return of per-turn credit) or last (the last turn's); recorded in the spec and in each merged sample's metadata merged_reward")
	fl.StringArrayVar(&f.emit, "emit", []string{"all"}, "whose turns become samples: all, or `ROLES` (comma-separated, repeatable)")
	fl.IntVar(&f.maxSteps, "max-steps", 0, "truncate an episode after this many logical steps (0: the scenario's bound, 100000 unless it sets one; an episode that reaches it ends with end step_limit)")
	fl.IntVar(&f.maxTurns, "max-turns", 0, "truncate an episode after this many agent turns, all agents together (0: no limit)")
	fl.IntVar(&f.maxMessages, "max-messages", 0, "truncate an episode once its agents sent more messages than this (0: no limit)")
	fl.DurationVar(&f.timeout, "timeout", 0, "truncate an episode after this much wall time, e.g. 30s (0: no limit)")
	fl.BoolVar(&f.failFast, "fail-fast", false, "stop at the first aborted or failed episode and exit 1")
	fl.IntVar(&f.maxFailures, "max-failures", 0, "exit 1 when more than `N` episodes ended aborted or failed (they are written all the same, with their status); -1: any number")
	fl.Int64Var(&f.rolloutIDBase, "rollout-id-base", 0, "rollout_id of the first episode; episode i gets base+i")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print no progress and no summary, only errors")
	fl.StringVar(&f.onInvalid, "on-invalid", "pass", "what an invalid answer does: pass (the scenario's rules judge it), forfeit (-1 to the offender, +1 to the others, episode over) or penalty (SPIRAL: -1.5 and +0.5)")
	fl.StringVar(&f.specFile, "spec", "", "run the run spec in this `FILE` (JSON, format troupe.runspec/v1; - is standard input) instead of the flags that describe a run")
	fl.BoolVar(&f.resume, "resume", false, "continue the run whose output --out already holds (after a Ctrl-C, a kill or a crash): checked against its progress file OUT"+durable.Suffix+", cut back to its last checkpoint, played on from there; the file ends byte-identical to an uninterrupted run's")
	fl.DurationVar(&f.checkpointEvery, "checkpoint-every", durable.DefaultEvery, "how often, at most, the progress file beside --out is written (what a kill can cost --resume)")
	fl.BoolVar(&f.printSpec, "print-spec", false, "print the canonical run spec of the run the flags (or --spec) describe, and exit without running it")
	f.llm.BindFlags(fl)
	fl.StringArrayVar(&f.llmEndpoints, "llm-endpoint", nil, "`NAME=URL[,kind=K,api_key_env=VAR,tokenize=BOOL,token_in=BOOL,max_in_flight=N]` defines an LLM endpoint roles name (--role-llm ROLE=endpoint=NAME); the other --llm-* flags are its defaults, never the key. A bare NAME names the default endpoint: with --nats, the workers' endpoint the llm policy plays on (troupe worker --llm-endpoint NAME; default: the run's own --llm-base-url, which workers must share) (repeatable)")
	fl.StringArrayVar(&f.roleLLM, "role-llm", nil, "`ROLE=key=value,...`: the role plays llm with its own endpoint=NAME, model=M, sampling (temperature=0.7, top_p, top_k, max_tokens, stop, stop_token_ids, repetition_penalty, min_tokens, sampling_seed, extra.KEY=JSON), context budget (max_context=N), no_memory, format, invalid_retries and feedback over the --llm-* flags, and frozen (played and recorded in --episodes-out, no samples) (repeatable)")
	f.nats.BindRun(fl)
}

// readSpec reads --spec FILE. The flags that describe a run must not be
// given with it, and a scenario argument must be the spec's.
func (a *App) readSpec(cmd *cobra.Command, path string, args []string) (*runspec.Spec, error) {
	for _, name := range specFlags {
		if cmd.Flags().Changed(name) {
			return nil, usagef("--%s: the run is described by --spec %s; give one or the other", name, path)
		}
	}
	var data []byte
	var err error
	if path == stdoutPath {
		data, err = io.ReadAll(cmd.InOrStdin())
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, usagef("--spec: %w", err)
	}
	spec, err := runspec.DecodeBytes(data)
	if err != nil {
		return nil, usagef("--spec %s: %w", path, err)
	}
	if len(args) == 1 && args[0] != spec.Scenario {
		return nil, usagef("run %s: the spec %s is of scenario %s", args[0], path, spec.Scenario)
	}
	return spec, nil
}

// run plays p and reports on Stderr. It returns nil, or an *exitError whose
// message it has already printed.
func (a *App) run(ctx context.Context, p *plan, f *runFlags) error {
	quiet := f.quiet
	cfg := p.cfg
	rep := newReporter(a.Stderr, a.Terminal != nil && a.Terminal(a.Stderr), quiet, cfg.Episodes)
	// A distributed run is registered (or re-attached to) before the
	// output is opened: a run id taken by another run, or a run another
	// submitter collects, must not cost an existing file its contents.
	var ns *natsSession
	if f.nats.Conn.URL != "" {
		var err error
		if ns, err = a.startNATS(ctx, p, f, rep); err != nil {
			err = errors.Join(err, p.close())
			return a.failure("", err, natsrun.ErrNoURL, natsrun.ErrBadConfig)
		}
		defer ns.close()
	}
	files, err := openFiles(ctx, a.fsys(), p, f, a.Stdout)
	if err != nil {
		if ue, ok := errors.AsType[*UsageError](err); ok {
			return errors.Join(ue, closeAllocators(p.allocators))
		}
		fmt.Fprintf(a.Stderr, "troupe: %v\n", err)
		code := ExitFailure
		if errors.Is(err, durable.ErrDamaged) || errors.Is(err, durable.ErrUnverifiable) || errors.Is(err, durable.ErrInconsistent) {
			code = ExitUsage // refused, as a resume of another run is
		}
		return &exitError{code: code, err: errors.Join(err, closeAllocators(p.allocators))}
	}
	if prog := files.progress; f.resume && prog != nil {
		if prog.Complete {
			rep.printf("troupe: %s is complete (%d episodes, %d samples, verified): nothing to resume\n", files.out.name, prog.Episodes, prog.Samples)
			return errors.Join(files.close(), closeAllocators(p.allocators))
		}
		rep.printf("troupe: resuming %s at group %d: %d episodes, %d samples kept\n", files.out.name, prog.Groups, prog.Episodes, prog.Samples)
	}
	cfg.Progress = rep.update
	// Reports while the first groups play, too: a run whose first group is
	// slow (an LLM's), or never ends, says so within seconds.
	cfg.ProgressEvery = time.Second
	// Say at once that Ctrl-C was heard: the episodes in flight may take a
	// while to wind down when their policies are slow.
	noticed := make(chan struct{})
	stopNotice := context.AfterFunc(ctx, func() {
		defer close(noticed)
		rep.printf("troupe: %v: finishing the episodes in flight (again to quit at once)\n", context.Cause(ctx))
	})

	out, skipped := runOutput(p, f, files, &cfg)
	sum, runErr := playRun(ctx, ns, cfg, out)
	p.llm.close()
	closeErr := errors.Join(files.close(), closeAllocators(p.allocators))
	if !stopNotice() {
		<-noticed // it started: let it finish before the summary
	}
	rep.finish()
	name := files.out.name
	tooMany := tooManyFailures(sum, f.maxFailures)
	if !quiet {
		writeSummary(rep, p, name, sum)
	} else if sum.FirstFailure != "" && tooMany == nil {
		rep.printf("troupe: episode %d: %s\n%s", sum.FirstFailureAt, sum.FirstFailure, stackLines(sum.FirstFailureStack))
	}
	if err := runOutcome(ctx, rep, files, cfg.Episodes, skipped+sum.Episodes, sum.Interrupted, runErr, closeErr); err != nil || tooMany == nil {
		return err
	}
	rep.printf("troupe: %v\n%s", tooMany, stackLines(sum.FirstFailureStack))
	return &exitError{code: ExitFailure, err: tooMany}
}

// ErrTooManyFailures is wrapped by the error of a run that wrote more
// aborted and failed episodes than --max-failures allows.
var ErrTooManyFailures = errors.New("too many episodes aborted or failed")

// tooManyFailures is the error of a run whose summary sum counts more
// aborted and failed episodes than allowed (-1: no bound), naming how many
// and the first; nil when it does not. The episodes are counted as this
// process wrote them: a resumed run's, since it resumed.
func tooManyFailures(sum play.Summary, allowed int) error {
	bad := sum.ByStatus[protocol.StatusAborted] + sum.ByStatus[protocol.StatusFailed]
	if allowed < 0 || bad <= allowed {
		return nil
	}
	return fmt.Errorf("%w: %d of the %d episodes written (aborted %d, failed %d), more than --max-failures %d allows; the first: episode %d: %s",
		ErrTooManyFailures, bad, sum.Episodes, sum.ByStatus[protocol.StatusAborted], sum.ByStatus[protocol.StatusFailed], allowed, sum.FirstFailureAt, sum.FirstFailure)
}

// runOutput is where the run's episodes go: the samples' writer, and the
// episodes' beside it, behind the credit stage; for a resumed run, a
// durable output that checkpoints the files, from the group the progress
// file reached, which it sets in cfg. skipped is the episodes that the
// resumed run wrote before.
func runOutput(p *plan, f *runFlags, files *runFiles, cfg *play.Config) (out play.Output, skipped int) {
	var sink trajectories.Sink = trajectories.NewJSONLWriter(files.out.w, p.layout)
	if files.episodes != nil {
		sink = trajectories.Tee(sink, trajectories.NewEpisodeWriter(files.episodes.w))
	}
	stage := &trajectories.Output{Sink: sink, Allocators: p.allocators, Format: p.format, Merge: p.merge,
		MergeReward: trajectories.MergeReward(p.spec.Spec.MergeReward)}
	out = stage
	if prog := files.progress; prog != nil {
		cfg.FirstGroup, stage.IndexBase, skipped = prog.Groups, prog.Samples, int(prog.Episodes)
		out = &durable.Output{
			Stage: stage, Sink: sink.(trajectories.Flusher), Files: files.writers(), Allocators: p.allocators,
			FS: files.fs, Path: files.progressPath, Progress: *prog, Groups: (cfg.Episodes + cfg.GroupSize - 1) / max(cfg.GroupSize, 1),
			Every: f.checkpointEvery,
		}
	}
	return out, skipped
}

// runOutcome reports how a run of episodes episodes ended, written of them
// to the output and interrupted of them cut short, and returns nil or the
// *exitError that says so: interrupted (ctx ended), stopped by runErr,
// or failing to close the files (closeErr).
func runOutcome(ctx context.Context, rep *reporter, files *runFiles, episodes, written, interrupted int, runErr, closeErr error) error {
	name := files.out.name
	notStarted := max(episodes-written-interrupted, 0)
	switch {
	case ctx.Err() != nil:
		cause := context.Cause(ctx)
		rep.printf("troupe: interrupted (%v): %d episodes written to %s, %d interrupted and not written, %d not started%s\n",
			cause, written, name, interrupted, notStarted, files.resumeHint())
		for _, err := range []error{runErr, closeErr} {
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, cause) {
				rep.printf("troupe: %v\n", err) // a write failed as well
			}
		}
		return interruptError(cause, fmt.Errorf("%w: %w", ErrInterrupted, cause))
	case runErr != nil:
		rep.printf("troupe: run stopped: %v\n", runErr)
		if errors.Is(runErr, play.ErrEpisodeFailed) {
			rep.printf("troupe: %d episodes written to %s, %d not written\n", written, name, episodes-written)
		} else {
			// A failed write: the count of episodes handed to the writer
			// overstates what reached the output; the writer kept it to
			// whole groups.
			rep.printf("troupe: %s holds whole groups only%s\n", name, files.resumeHint())
		}
		return &exitError{code: ExitFailure, err: runErr}
	case closeErr != nil:
		rep.printf("troupe: %v\n", closeErr)
		return &exitError{code: ExitFailure, err: closeErr}
	}
	return nil
}

// closeAllocators closes the allocators that hold state across runs (RAE
// saves its baselines), whatever way the run ended.
func closeAllocators(allocs []trajectories.Allocator) error {
	var errs []error
	for _, a := range allocs {
		if c, ok := a.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("allocator %s: %w", a.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// natsSession is a distributed run's deployment and executor.
type natsSession struct {
	d *natsrun.Deployment
	x *natsrun.Executor
}

func (s *natsSession) close() {
	_ = s.x.Close()
	s.d.Close()
}

// startNATS connects to the --nats deployment (an embedded server with
// --nats embedded) and registers the run, or re-attaches to it: its id is
// --run-id, else the run spec's hash, so the same command re-attaches.
func (a *App) startNATS(ctx context.Context, p *plan, f *runFlags, rep *reporter) (*natsSession, error) {
	nf := &f.nats
	nf.ApplyEnv(a.lookupEnv())
	spec := natsrun.SpecOf(p.spec, llmEndpointOf(p.spec.Spec.Policies, defaultEndpointName(f.llmEndpoints), f.llm.BaseURL))
	id := nf.RunID
	if id == "" {
		// The run's identity is its spec's: running the same command again
		// after a crash re-attaches to the same run.
		id = natsrun.SpecRunID(p.spec.Spec.Scenario, p.spec.Hash())
	}
	// Logged by the run's goroutines, beside the progress reports: through
	// the reporter, which writes one at a time.
	logger := slog.New(slog.NewTextHandler(rep, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The embedded server's worker plays the run's own policies, the LLM
	// one on the run's client included.
	policies := func(string) env.PolicyMaker {
		return func(r env.PolicyRequest) (agents.Policy, error) {
			if r.Name == llmPolicyName && p.llm != nil {
				return p.llm.policy(r)
			}
			return nil, env.ErrUnknownPolicy
		}
	}
	d, err := nf.OpenRun(ctx, a.Scenarios, policies, p.cfg.Concurrency, logger)
	if err != nil {
		return nil, err
	}
	x, err := d.Client.Start(ctx, id, p.cfg, spec)
	if err != nil {
		d.Close()
		return nil, err
	}
	if st := x.Stats(); st.Resumed {
		rep.printf("troupe: re-attached to run %s: %d of %d episodes already done\n", id, st.DoneAtStart, p.cfg.Episodes)
	} else {
		rep.printf("troupe: run %s\n", id)
	}
	if d.Server != nil && d.Server.ClientURL() != "" {
		rep.printf("troupe: workers can join with --nats %s\n", d.Server.ClientURL())
	}
	return &natsSession{d: d, x: x}, nil
}

// playRun runs the episodes: in this process, or, with --nats, by the workers
// of the deployment ns is registered with, collected back in the same
// order, so the output is the same bytes.
func playRun(ctx context.Context, ns *natsSession, cfg play.Config, out play.Output) (play.Summary, error) {
	if ns == nil {
		return play.Run(ctx, cfg, out)
	}
	ns.x.StartAt(cfg.FirstGroup, cfg.Progress, cfg.ProgressEvery)
	return ns.x.Run(ctx, out)
}
