package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/atomicfile"
	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/runspec"
)

// leagueCommand is `troupe league`: self-play leagues (package league).
func (a *App) leagueCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "league",
		Short: "Self-play leagues: players, matchmaking, ratings, learner snapshots",
		Long: `A league is a population of players of one scenario, kept in a directory: each
player is a troupe policy with its settings (a scripted policy, a tabular
learner trained in the league, a frozen snapshot of it, a model behind an
OpenAI-compatible endpoint). Matches are drawn by a matchmaking rule, played,
logged (matches.jsonl) and rated (Elo and Glicko-2). Every file is written
atomically; a league killed while it plays resumes from its last commit and
ends byte-identical to one that was never interrupted.

  troupe league create DIR --scenario tictactoe
  troupe league add DIR minimax minimax
  troupe league add DIR learner learner --learner egreedy:alpha=0.1,epsilon=0.1
  troupe league play DIR -n 5000 --rule pfsp
  troupe league snapshot DIR
  troupe league show DIR --plot ratings.svg

troupe serve --league DIR plays the league's opponents against the model slime
trains (a player of policy external).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.leagueCreateCommand(), a.leagueAddCommand(), a.leaguePlayCommand(), a.leagueShowCommand(), a.leagueSnapshotCommand())
	return cmd
}

// leagueError is the command's error for err: bad input (a league, a
// player, a rule) is a usage error; anything else failed the command.
func (a *App) leagueError(err error) error {
	return a.failure("", err, league.ErrBadLeague, league.ErrBadPlayer, league.ErrBadRule, league.ErrExists, league.ErrNoOpponent)
}

// leagueArgs accepts from lo to hi arguments, and refuses others with
// "league " and usage.
func leagueArgs(usage string, lo, hi int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usagef("league %s, got %d arguments", usage, len(args))
		}
		return nil
	}
}

func (a *App) openLeague(dir string) (*league.League, error) {
	l, err := league.Open(dir, a.Scenarios)
	if err != nil {
		return nil, a.leagueError(err)
	}
	return l, nil
}

func (a *App) leagueCreateCommand() *cobra.Command {
	var cfg league.Config
	var params []string
	cmd := &cobra.Command{
		Use:   "create DIR --scenario NAME",
		Short: "Create a league in DIR",
		Args:  leagueArgs("create takes the league's directory", 1, 1),
		RunE: func(_ *cobra.Command, args []string) error {
			given, err := env.ParseAssignments(params)
			if err != nil {
				return usagef("--param: %w", err)
			}
			cfg.Params = given
			if cfg.Name == "" {
				cfg.Name = leagueName(args[0])
			}
			if cfg.Scenario == "" {
				return usagef("--scenario is required (known: %s)", a.knownScenarios())
			}
			l, err := league.Create(args[0], cfg, a.Scenarios)
			if err != nil {
				return a.leagueError(err)
			}
			defer l.Close()
			fmt.Fprintf(a.Stderr, "troupe: league %s (%s) created in %s; add players with troupe league add %s NAME POLICY\n", cfg.Name, cfg.Scenario, args[0], args[0])
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Scenario, "scenario", "", "the scenario the league plays")
	fl.StringArrayVarP(&params, "param", "p", nil, "scenario parameter `key=value` (repeatable)")
	fl.StringVar(&cfg.Name, "name", "", "the league's name (default: the directory's)")
	fl.Uint64Var(&cfg.Seed, "seed", 0, "the league seed: every match's seeds and matchmaking draws derive from it")
	fl.StringVar(&cfg.Rule, "rule", "uniform", "default matchmaking rule: uniform, self, latest, pfsp[:weighting=hard|variance|linear,p=2], fixed:NAME=W,..., mix:RULE=W,...")
	fl.Int64Var(&cfg.SnapshotEvery, "snapshot-every", 0, "add a snapshot of the learner every N matches (0: never; a multiple of --batch)")
	fl.BoolVar(&cfg.SnapshotGreedy, "snapshot-greedy", false, "automatic snapshots play greedily (no exploration)")
	fl.IntVar(&cfg.Batch, "batch", 1, "matches drawn and played together before the learner learns them and the ratings change")
	fl.Float64Var(&cfg.EloK, "elo-k", league.DefaultEloK, "Elo step K")
	fl.Float64Var(&cfg.GlickoTau, "glicko-tau", league.DefaultGlickoTau, "Glicko-2 system constant τ")
	fl.IntVar(&cfg.GlickoPeriod, "glicko-period", league.DefaultGlickoPeriod, "matches per Glicko-2 rating period")
	return cmd
}

// leagueName is a league name made from its directory's.
func leagueName(dir string) string {
	base := filepath.Base(filepath.Clean(dir))
	var b strings.Builder
	for _, r := range base {
		if r < 128 && (r == '.' || r == '_' || r == '-' || r == '@' || r == '+' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		}
	}
	name := strings.TrimLeft(b.String(), "._@+-")
	if name == "" {
		return "league"
	}
	return name[:min(len(name), 64)]
}

func (a *App) leagueAddCommand() *cobra.Command {
	var settings, learnerSpec, file string
	var greedy bool
	cmd := &cobra.Command{
		Use:   "add DIR NAME POLICY",
		Short: "Add a player: a scenario policy, learner, snapshot, llm or external",
		Long: `Add a player called NAME playing POLICY:

  a policy of the scenario, or random        troupe league add DIR minimax minimax
  learner: trained in the league              ... NAME learner --learner egreedy:alpha=0.1,epsilon=0.1
  snapshot: a learner snapshot file in DIR    ... NAME snapshot --file snapshots/old.json [--greedy]
  llm: a model behind an endpoint             ... NAME llm --settings '{"base_url":"http://127.0.0.1:8000/v1","model":"ckpt-200","temperature":0.7}'
  external: the model troupe serve --league trains (slime's)

--settings sets any policy's settings as JSON; llm takes base_url, kind, model,
temperature, top_p, max_tokens, api_key_env (the variable holding the key) and
timeout. A league has one learner (learner or external).`,
		Args: leagueArgs("add takes DIR NAME POLICY", 3, 3),
		RunE: func(_ *cobra.Command, args []string) error {
			p := league.Player{Name: args[1], Policy: runspec.Policy{Name: args[2]}}
			if settings != "" {
				if !json.Valid([]byte(settings)) {
					return usagef("--settings %q is not JSON", settings)
				}
				p.Policy.Settings = json.RawMessage(settings)
			}
			switch {
			case learnerSpec != "":
				if args[2] != league.PolicyLearner || settings != "" {
					return usagef("--learner is for policy learner, without --settings")
				}
				p.Policy.Settings, _ = json.Marshal(league.LearnerSettings{Spec: learnerSpec})
			case file != "" || greedy:
				if args[2] != league.PolicySnapshot || settings != "" {
					return usagef("--file and --greedy are for policy snapshot, without --settings")
				}
				p.Policy.Settings, _ = json.Marshal(league.SnapshotSettings{File: file, Greedy: greedy})
			}
			l, err := a.openLeague(args[0])
			if err != nil {
				return err
			}
			defer l.Close()
			if err := l.Add(p); err != nil {
				return a.leagueError(err)
			}
			fmt.Fprintf(a.Stderr, "troupe: %s joined league %s (%d players)\n", p.Name, l.Config().Name, len(l.Players()))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&settings, "settings", "", "the policy's settings, a JSON object")
	fl.StringVar(&learnerSpec, "learner", "", "learner: the learner spec (see troupe experiment --learner help)")
	fl.StringVar(&file, "file", "", "snapshot: the snapshot file, relative to DIR")
	fl.BoolVar(&greedy, "greedy", false, "snapshot: play greedily")
	return cmd
}

func (a *App) leaguePlayCommand() *cobra.Command {
	var o league.PlayOptions
	var quiet bool
	cmd := &cobra.Command{
		Use:   "play DIR (-n N | --until TOTAL)",
		Short: "Play matches drawn by a matchmaking rule; rate them",
		Long: `Play matches: for each, the focal player (the league's learner, --focal, or
else every player in turn) takes a role drawn at random, and every other role
gets an opponent drawn by the rule. The learner learns from each match it
plays. The league is committed every --checkpoint-every matches and at the
end; after Ctrl-C or a kill, run the same command with --until to finish the
same run: the files end byte-identical to an uninterrupted run's.`,
		Args: leagueArgs("play takes the league's directory", 1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (o.N > 0) == (o.Until > 0) {
				return usagef("give -n N (more matches) or --until TOTAL (play until the league has TOTAL), one of them")
			}
			if o.Concurrency < 1 {
				return usagef("--concurrency %d: must be at least 1", o.Concurrency)
			}
			l, err := a.openLeague(args[0])
			if err != nil {
				return err
			}
			defer l.Close()
			start, began := l.Matches(), time.Now()
			if !quiet {
				last := time.Now()
				o.Progress = func(done int64) {
					if time.Since(last) >= 2*time.Second {
						last = time.Now()
						fmt.Fprintf(a.Stderr, "troupe: league %s: %d matches played\n", l.Config().Name, start+done)
					}
				}
			}
			err = l.Play(cmd.Context(), o)
			played := l.Matches() - start
			switch {
			case errors.Is(err, league.ErrInterrupted):
				fmt.Fprintf(a.Stderr, "troupe: interrupted: %d matches played and committed (%d in all); run troupe league play %s --until N to go on\n", played, l.Matches(), args[0])
				return interruptError(context.Cause(cmd.Context()), err)
			case err != nil:
				return a.leagueError(err)
			}
			if !quiet {
				fmt.Fprintf(a.Stderr, "troupe: league %s: %d matches played in %v (%d in all)\n\n", l.Config().Name, played, time.Since(began).Round(time.Millisecond), l.Matches())
				if err := l.WriteRatings(a.Stdout); err != nil {
					return err
				}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.Int64VarP(&o.N, "matches", "n", 0, "matches to play")
	fl.Int64Var(&o.Until, "until", 0, "play until the league has played this many matches")
	fl.StringVar(&o.Rule, "rule", "", "matchmaking rule (default: the league's)")
	fl.StringVar(&o.Focal, "focal", "", "the player opponents are drawn for (default: the learner, else every player in turn)")
	fl.IntVar(&o.Concurrency, "concurrency", 1, "matches of a batch played at once (never changes the results)")
	fl.Int64Var(&o.CheckpointEvery, "checkpoint-every", 1000, "commit the league every N matches")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress and no ratings table")
	return cmd
}

func (a *App) leagueShowCommand() *cobra.Command {
	var plotFile, nashConv string
	var glicko bool
	var every int64
	var nashConvNodes int
	cmd := &cobra.Command{
		Use:   "show DIR",
		Short: "Show the ratings table and the payoff matrix; plot ratings over time",
		Long: `Show the league as its last commit left it: the ratings table and the payoff
matrix, and with --plot the ratings over time. It only reads, so it may run
while troupe league play or troupe serve --league plays the league. With
--nashconv, each player's exact NashConv in self-play in a small two-sided
game (tic-tac-toe: --nashconv markov): the learner and snapshots by their
greedy policy.`,
		Args: leagueArgs("show takes the league's directory", 1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			search, err := nashConvSearch(nashConv, nashConvNodes)
			if err != nil {
				return err
			}
			l, err := league.OpenReadOnly(args[0], a.Scenarios)
			if err != nil {
				return a.leagueError(err)
			}
			defer l.Close()
			cfg := l.Config()
			fmt.Fprintf(a.Stdout, "league %s: %s, %d players, %d matches\n\n", cfg.Name, cfg.Scenario, len(l.Players()), l.Matches())
			if err := l.WriteRatings(a.Stdout); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "\npayoff: the row player's mean score against the column player (matches)\n")
			if err := l.Payoff().Write(a.Stdout); err != nil {
				return err
			}
			if search != nil {
				fmt.Fprintf(a.Stdout, "\nNashConv of each player's policy in self-play, searched exactly (exploitability = NashConv/2)\n")
				if err := l.WriteNashConv(cmd.Context(), a.Stdout, *search); err != nil {
					return a.leagueError(err)
				}
			}
			if plotFile == "" {
				return nil
			}
			if every <= 0 {
				every = max(l.Matches()/200, 1)
			}
			svg, err := l.PlotRatings(every, glicko, nil)
			if err != nil {
				return a.leagueError(err)
			}
			if err := atomicfile.Write(nil, plotFile, svg, 0o644, false); err != nil {
				return a.leagueError(err)
			}
			fmt.Fprintf(a.Stderr, "troupe: ratings over time written to %s\n", plotFile)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&plotFile, "plot", "", "write the ratings over time to this SVG file")
	fl.BoolVar(&glicko, "glicko", false, "plot Glicko-2 ratings with ±2 RD bands instead of Elo")
	fl.Int64Var(&every, "every", 0, "plot a point every N matches (default: 200 points)")
	fl.StringVar(&nashConv, "nashconv", "", "measure each player exactly in self-play, in a small two-sided game: `SEARCH` full (every history) or markov (every position, for games of perfect information; tic-tac-toe)")
	fl.IntVar(&nashConvNodes, "nashconv-max-nodes", 0, "histories (or positions) a --nashconv search may visit per side; 0: league.DefaultMaxNodes")
	return cmd
}

// nashConvSearch is the search --nashconv and --nashconv-max-nodes ask
// for: nil for none.
func nashConvSearch(mode string, maxNodes int) (*league.Search, error) {
	switch mode {
	case "":
		if maxNodes != 0 {
			return nil, usagef("--nashconv-max-nodes: no --nashconv to bound")
		}
		return nil, nil
	case "full", "markov":
		if maxNodes < 0 {
			return nil, usagef("--nashconv-max-nodes %d: want 0 (the default) or more", maxNodes)
		}
		return &league.Search{Markov: mode == "markov", MaxNodes: maxNodes}, nil
	}
	return nil, usagef("--nashconv %q: want full or markov", mode)
}

func (a *App) leagueSnapshotCommand() *cobra.Command {
	var greedy bool
	cmd := &cobra.Command{
		Use:   "snapshot DIR [NAME]",
		Short: "Freeze the learner's current values into a new player",
		Args:  leagueArgs("snapshot takes DIR and an optional NAME", 1, 2),
		RunE: func(_ *cobra.Command, args []string) error {
			l, err := a.openLeague(args[0])
			if err != nil {
				return err
			}
			defer l.Close()
			name := ""
			if len(args) == 2 {
				name = args[1]
			}
			p, err := l.Snapshot(name, greedy)
			if err != nil {
				return a.leagueError(err)
			}
			var s league.SnapshotSettings
			_ = json.Unmarshal(p.Policy.Settings, &s)
			fmt.Fprintf(a.Stderr, "troupe: %s joined league %s, a snapshot of %s after %d matches (%s)\n", p.Name, l.Config().Name, p.Parent, p.Added, s.File)
			return nil
		},
	}
	cmd.Flags().BoolVar(&greedy, "greedy", false, "the snapshot plays greedily (no exploration)")
	return cmd
}

// leagueServeFlags are troupe serve's league flags.
type leagueServeFlags struct {
	dir, rule string
}

func (f *leagueServeFlags) bind(fl *pflag.FlagSet) {
	fl.StringVar(&f.dir, "league", "", "play every request as a match of the league in this directory: the request's policy in the learner's role (the league's external player), opponents drawn by matchmaking, results rated; only the learner's turns are emitted unless the request's emit says otherwise")
	fl.StringVar(&f.rule, "league-rule", "", "matchmaking rule of --league (default: the league's)")
}

// serveLeague opens --league for the rollout service, and returns what
// closes it.
func (a *App) serveLeague(cfg *server.Config, f leagueServeFlags, remote bool) (func(), error) {
	if f.dir == "" {
		if f.rule != "" {
			return nil, usagef("--league-rule needs --league")
		}
		return func() {}, nil
	}
	if remote {
		return nil, usagef("--league plays the league's opponents in this process: it does not go with --nats")
	}
	l, err := league.Open(f.dir, a.Scenarios)
	if err != nil {
		return nil, &UsageError{Err: fmt.Errorf("--league: %w", err)}
	}
	svc, err := league.NewService(l, f.rule)
	if err != nil {
		l.Close()
		return nil, &UsageError{Err: fmt.Errorf("--league: %w", err)}
	}
	cfg.League = svc
	return func() { l.Close() }, nil
}
