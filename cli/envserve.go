package cli

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/internal/httpedge"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/trajectories"
)

// envServeCommand is `troupe env-serve`: the environment server outside
// learners step (OpenEnv's conventions, PettingZoo through python/troupe_env,
// Go through envserver/envclient). It writes every finished episode's samples
// (--out) and records (--episodes-out) as troupe run does, and exits 0 on
// SIGTERM or Ctrl-C once the episodes in play are written, aborted.
func (a *App) envServeCommand() *cobra.Command {
	cfg := envserver.Config{}
	var tokenFile, out, episodesOut string
	// The model server of the llm house policy and of harness seats:
	// troupe run's --llm-* flags, the environment their defaults.
	llmCfg := llm.DefaultConfig()
	llmEnvErr := llmCfg.ApplyEnv(a.lookupEnv())
	var endpoints, harnessLLM []string
	var def envDefaultFlags
	cmd := &cobra.Command{
		Use:   "env-serve",
		Args:  cobra.NoArgs,
		Short: "Serve scenarios as environments that outside learners step (OpenEnv's HTTP and WebSocket conventions, multi-agent)",
		Long: "Serves the registered scenarios as environments: a session creates an episode (POST /reset) or joins one, " +
			"holds one seat or every seat, and steps it (POST /step, or the WebSocket at /ws); troupe policies play the seats " +
			"no session holds (llm among them with --llm-base-url). A reset's \"harness\" seats are played by outside agent harnesses " +
			"(the OpenAI Agents SDK...) through the seat's OpenAI-compatible endpoint, forwarded to --llm-base-url and captured as samples, " +
			"and its tools over MCP. Finished episodes are credited and written like troupe run's. See docs/envserver.md.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Token, err = readToken(cfg.Token, tokenFile); err != nil {
				return err
			}
			cfg.Scenarios, cfg.Allocators = a.Scenarios, a.Allocators
			if cfg.Default, err = def.reset(); err != nil {
				return err
			}
			if out != "" && out == episodesOut {
				return usagef("--episodes-out %q: that is --out too; give the records a file of their own", episodesOut)
			}
			var sinks []trajectories.Sink
			var closers []io.Closer
			defer func() {
				for _, c := range closers {
					_ = c.Close()
				}
			}()
			for _, f := range []struct {
				flag, path string
				sink       func(io.Writer) trajectories.Sink
			}{
				{"--out", out, func(w io.Writer) trajectories.Sink { return trajectories.NewJSONLWriter(w, trajectories.Flat) }},
				{"--episodes-out", episodesOut, func(w io.Writer) trajectories.Sink { return trajectories.NewEpisodeWriter(w) }},
			} {
				if f.path == "" {
					continue
				}
				// Appended to: a server restarted on the same files adds
				// its episodes after those written before.
				file, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
				if err != nil {
					return usagef("%s: %w", f.flag, err)
				}
				closers = append(closers, file)
				sinks = append(sinks, f.sink(file))
			}
			if len(sinks) > 0 {
				cfg.Sink = trajectories.Tee(sinks...)
			}
			if llmEnvErr != nil {
				return &UsageError{Err: llmEnvErr}
			}
			// A model server is the one given, never the flag's default:
			// a harness seat or llm policy without one is refused at
			// reset, by name, rather than failing at its first call.
			fromEnv, _ := a.lookupEnv()(llm.EnvBaseURL)
			if cmd.Flags().Changed("llm-base-url") || fromEnv != "" {
				pool, _, err := a.checkedLLMPool(cmd.Flags(), llmCfg, endpoints, cfg.Seed)
				if err != nil {
					return err
				}
				defer pool.close()
				cfg.Policies = llmPolicyMaker(pool)
				roles, err := a.harnessRoles(pool, harnessLLM)
				if err != nil {
					return err
				}
				cfg.HarnessModel = func(role string) (*llm.Client, error) { return pool.client(roles[role].Endpoint) }
				cfg.HarnessLLM = func(role string) *llm.Config {
					if c, ok := roles[role]; ok {
						return &c
					}
					return nil
				}
			} else if len(endpoints) > 0 || len(harnessLLM) > 0 {
				return usagef("--llm-endpoint, --harness-llm: give the default model server too (--llm-base-url)")
			}
			cfg.Logger = slog.New(slog.NewTextHandler(a.Stderr, nil))
			cfg.Ready = func(addr net.Addr) { fmt.Fprintf(a.Stderr, "troupe: environment server on http://%s\n", addr) }
			return a.failure("", envserver.Serve(cmd.Context(), cfg), envserver.ErrBadConfig)
		},
	}
	fl := cmd.Flags()
	bindServeFlags(fl, &cfg.Addr, envserver.DefaultAddr, &cfg.Token, &tokenFile, &cfg.InsecureOpen)
	fl.StringVarP(&out, "out", "o", "", "append every finished episode's samples to this JSONL file")
	fl.StringVar(&episodesOut, "episodes-out", "", "append every finished episode's record (and credit) to this file")
	fl.Uint64Var(&cfg.Seed, "seed", 0, "server seed: the run seeds of episodes whose reset brings none derive from it")
	fl.Int64Var(&cfg.RolloutIDBase, "rollout-id-base", 0, "first rollout_id handed to episodes whose reset brings none")
	fl.IntVar(&cfg.MaxSessions, "max-sessions", envserver.DefaultMaxSessions, "live sessions at once")
	fl.IntVar(&cfg.MaxEpisodes, "max-episodes", envserver.DefaultMaxEpisodes, "live episodes at once")
	fl.IntVar(&cfg.MaxVectorEnvs, "max-vector-envs", envserver.DefaultMaxVectorEnvs, "envs of all vector environments at once (POST /vectors)")
	fl.DurationVar(&cfg.SessionTimeout, "session-timeout", envserver.DefaultSessionTimeout,
		"a silent HTTP session's seats fall back after this long; an episode waiting this long for seats nobody took ends aborted")
	fl.DurationVar(&cfg.MaxWait, "max-wait", envserver.DefaultMaxWait, "longest one reset or step waits for the session's turn")
	fl.DurationVar(&cfg.Retain, "retain", envserver.DefaultRetain, "how long a finished episode stays readable at /state and /record")
	fl.IntVar(&cfg.MaxRetained, "max-retained", envserver.DefaultMaxRetained, "finished episodes kept readable at most (the oldest go first)")
	fl.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", envserver.DefaultMaxBodyBytes, "request (and WebSocket message) size limit in bytes")
	fl.DurationVar(&cfg.BodyTimeout, "body-timeout", httpedge.DefaultBodyTimeout, "longest a request's body may take to arrive; a slower one is answered 408 and its connection closed")
	fl.IntVar(&cfg.MaxSeats, "max-seats", envserver.DefaultMaxSeats, "most seats one episode (or one env of a vector) may have; a reset whose parameters make more is refused")
	fl.DurationVar(&cfg.HarnessSeat.ActTimeout, "harness-act-timeout", 0, "a harness seat whose harness makes no move this long falls back (to the house policy, or forfeit) (0: --session-timeout)")
	def.bind(fl)
	llmCfg.BindFlags(fl)
	fl.StringArrayVar(&harnessLLM, "harness-llm", nil, "`ROLE=key=value,...` the endpoint, model and sampling of a role's harness seats, keys as --role-llm's but frozen (repeatable; a role not given plays on the default endpoint's flags)")
	fl.StringArrayVar(&endpoints, "llm-endpoint", nil, "`NAME=URL[,kind=K,api_key_env=VAR,tokenize=BOOL,token_in=BOOL,max_in_flight=N]` defines an LLM endpoint; the other --llm-* flags are its defaults, never the key (repeatable)")
	return cmd
}

// harnessRoles reads the --harness-llm values: for each role named, the
// config its harness seats ask for (seats.Options.LLM), its settings over
// the flags of the endpoint they name, Endpoint naming it. A role no
// scenario served has, an endpoint not defined, a setting twice or a
// value the endpoint's kind refuses is a usage error that names it.
func (a *App) harnessRoles(pool *llmPool, values []string) (map[string]llm.Config, error) {
	out := map[string]llm.Config{}
	for _, v := range values {
		r, err := parseRoleLLM(v)
		if err != nil {
			// parseRoleLLM names the flag it reads for troupe run.
			return nil, usagef("%s", strings.Replace(err.Error(), "--role-llm", "--harness-llm", 1))
		}
		if r.frozen {
			return nil, usagef("--harness-llm %q: frozen: an outside harness's role is trained or not by what its trainer reads; --harness-llm sets its model", v)
		}
		if _, dup := out[r.role]; dup {
			return nil, usagef("--harness-llm %q: role %s was given settings already", v, r.role)
		}
		if !a.servesRole(r.role) {
			return nil, usagef("--harness-llm %q: no scenario served here has a role %q", v, r.role)
		}
		client, err := pool.client(r.settings.Endpoint)
		if err != nil {
			return nil, usagef("--harness-llm %q: %w", v, err)
		}
		cfg := client.Config()
		r.settings.applyTo(&cfg)
		cfg.Endpoint = r.settings.Endpoint
		if err := cfg.Validate(); err != nil {
			return nil, usagef("--harness-llm %q: %w", v, err)
		}
		out[r.role] = cfg
	}
	return out, nil
}

// servesRole reports whether a scenario the app serves has role.
func (a *App) servesRole(role string) bool {
	for _, name := range a.Scenarios.Names() {
		if sc, err := a.Scenarios.Lookup(name); err == nil && sc.Info().Role(role) != nil {
			return true
		}
	}
	return false
}
