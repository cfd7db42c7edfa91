package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/httpedge"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/rollout/verifiers"
)

// serveCommand is `troupe serve`: the HTTP rollout service slime's
// custom-generate adapter calls (examples/slime). It drains and exits 0 on
// SIGTERM or Ctrl-C.
func (a *App) serveCommand() *cobra.Command {
	cfg := server.Config{}
	var tokenFile string
	llmCfg := llm.DefaultConfig()
	llmEnvErr := llmCfg.ApplyEnv(a.lookupEnv())
	nf := natsrun.DefaultFlags()
	var lf leagueServeFlags
	var endpoints []string
	var verifiersAddr string
	cmd := &cobra.Command{
		Use:   "serve",
		Args:  cobra.NoArgs,
		Short: "Serve rollouts over HTTP (POST /v1/rollouts), for slime's custom-generate adapter",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Token, err = readToken(cfg.Token, tokenFile); err != nil {
				return err
			}
			cfg.Scenarios, cfg.Allocators = a.Scenarios, a.Allocators
			if llmEnvErr != nil {
				return &UsageError{Err: llmEnvErr}
			}
			llmCfg.Seed = cfg.Seed
			pool, eps, err := a.checkedLLMPool(cmd.Flags(), llmCfg, endpoints, cfg.Seed)
			if err != nil {
				return err
			}
			defer pool.close()
			cfg.Policies, cfg.PolicySettings = llmPolicyMaker(pool), servedLLMSettings(eps)
			closeLeague, err := a.serveLeague(&cfg, lf, nf.Conn.URL != "")
			if err != nil {
				return err
			}
			defer closeLeague()
			cfg.Logger = slog.New(slog.NewTextHandler(a.Stderr, nil))
			if nf.Conn.URL != "" {
				nf.ApplyEnv(a.lookupEnv())
				// With --nats embedded, the service's own worker plays the
				// episodes; troupe workers may join it (--nats-listen).
				d, err := nf.OpenRun(cmd.Context(), a.Scenarios, a.workerPolicies(pool), cfg.MaxConcurrentEpisodes, cfg.Logger)
				if err != nil {
					return &UsageError{Err: err}
				}
				defer d.Close()
				remote, err := newNATSRemote(d.Client, llmCfg.BaseURL)
				if err != nil {
					return err
				}
				cfg.Remote = remote
				cfg.ExtraMetrics = func(ctx context.Context, w io.Writer) {
					if st, err := d.Client.Stats(ctx); err == nil {
						natsrun.WriteMetrics(w, st.Metrics())
					}
				}
			}
			cfg.Ready = func(addr net.Addr) { fmt.Fprintf(a.Stderr, "troupe: serving on http://%s\n", addr) }
			return a.failure("", a.serveRollouts(cmd.Context(), cfg, verifiersAddr, eps), server.ErrBadConfig, verifiers.ErrBadConfig)
		},
	}
	fl := cmd.Flags()
	bindServeFlags(fl, &cfg.Addr, server.DefaultAddr, &cfg.Token, &tokenFile, &cfg.InsecureOpen)
	fl.Uint64Var(&cfg.Seed, "seed", 0, "service seed: scenario and policy seeds of requests that bring none derive from it")
	fl.Int64Var(&cfg.RolloutIDBase, "rollout-id-base", 0, "first rollout_id handed to requests that bring none")
	fl.IntVar(&cfg.MaxConcurrentEpisodes, "max-episodes", server.DefaultMaxConcurrentEpisodes, "episodes played at once, all requests together")
	fl.IntVar(&cfg.MaxEpisodesPerRequest, "max-episodes-per-request", server.DefaultMaxEpisodesPerRequest, "largest n a request may ask for")
	fl.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", server.DefaultMaxBodyBytes, "request body limit in bytes")
	fl.IntVar(&cfg.MaxSamplesPerAnswer, "max-samples-per-answer", server.DefaultMaxSamplesPerAnswer,
		"most samples one answer may hold, all episodes together; more is 422 too_many_samples (refused before playing when the scenario tells its turns)")
	fl.Int64Var(&cfg.MaxAnswerBytes, "max-answer-bytes", server.DefaultMaxAnswerBytes,
		"largest encoded answer in bytes; larger is 422 answer_too_large, never a truncated answer")
	fl.StringVar(&cfg.AllocatorStateDir, "allocator-state", "",
		"directory keeping stateful allocators' state (RAE baselines) across restarts: one file per allocator spec, loaded at start, saved after every request that changed it")
	fl.DurationVar(&cfg.EpisodeTimeout, "episode-timeout", server.DefaultEpisodeTimeout, "wall time per episode; longer ones end truncated")
	fl.DurationVar(&cfg.RequestTimeout, "request-timeout", server.DefaultRequestTimeout, "wall time per request; then its episodes end aborted and are answered")
	fl.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "time to finish in-flight requests after SIGTERM")
	fl.BoolVar(&cfg.ParallelPolicies, "parallel-policies", false, "ask simultaneous actors' policies at once (LLM agents)")
	lf.bind(fl)
	llmCfg.BindFlags(fl)
	fl.StringArrayVar(&endpoints, "llm-endpoint", nil, "`NAME=URL[,kind=K,api_key_env=VAR,tokenize=BOOL,token_in=BOOL,max_in_flight=N]` defines an LLM endpoint a request's roles may name (\"roles\": {\"ROLE\": {\"endpoint\": \"NAME\"}}); the other --llm-* flags are its defaults, never the key (repeatable)")
	fl.StringVar(&verifiersAddr, "verifiers-addr", "", "also serve verifiers' env-server protocol (ZMQ, msgpack; prime-rl's orchestrator, verifiers' EnvClient) on this `tcp://HOST:PORT`, each run one episode played by this service (docs/verifiers.md)")
	nf.BindServe(fl)
	return cmd
}

// llmPolicyMaker makes the "llm" policy of a rollout request's run spec:
// on the endpoint the role's settings name (the default one: the --llm-*
// server), with the role's model and sampling (servedLLMSettings). Every
// request shares the endpoints' clients, and so their bounds on requests
// in flight to the model servers. A field the server kind cannot honour
// is refused by name (llm.Config.Validate), which the service answers as
// 400 bad_policy.
func llmPolicyMaker(pool *llmPool) env.PolicyMaker {
	return func(req env.PolicyRequest) (agents.Policy, error) {
		if req.Name != llmPolicyName {
			return nil, env.ErrUnknownPolicy
		}
		return pool.policy(req)
	}
}

// checkedLLMPool is the LLM pool of a serving command's --llm-* and
// --llm-endpoint flags, every endpoint's client made (check), so that a
// bad definition is refused before it serves.
func (a *App) checkedLLMPool(fl *pflag.FlagSet, base llm.Config, endpoints []string, seed uint64) (*llmPool, *llmEndpoints, error) {
	eps, err := parseEndpoints(base, endpoints, a.lookupEnv(), tokenInGiven(fl, a.lookupEnv()))
	if err != nil {
		return nil, nil, err
	}
	pool := newLLMPool(eps, seed)
	if err := pool.check(); err != nil {
		pool.close()
		return nil, nil, &UsageError{Err: err}
	}
	return pool, eps, nil
}

// tokenInGiven reports whether the command's --llm-token-in, or
// TROUPE_LLM_TOKEN_IN, says whether to generate token in, token out;
// else each endpoint's kind does (llm.DefaultTokenIn).
func tokenInGiven(fl *pflag.FlagSet, lookup func(string) (string, bool)) bool {
	_, env := lookup(llm.EnvTokenIn)
	return env || fl.Changed("llm-token-in")
}

// bindServeFlags binds the flags every serving command has: where it
// listens, its bearer token, and whether it may serve beyond loopback
// without one.
func bindServeFlags(fl *pflag.FlagSet, addr *string, defAddr string, token, tokenFile *string, open *bool) {
	fl.StringVar(addr, "addr", defAddr, "address to listen on (127.0.0.1 keeps it local; any other needs a token, or --insecure-open)")
	fl.StringVar(token, "token", "", fmt.Sprintf("bearer token, %d bytes at least (visible in ps: prefer --token-file or $TROUPE_TOKEN; openssl rand -hex 16 makes one)", httpedge.MinTokenBytes))
	fl.StringVar(tokenFile, "token-file", "", "file holding the bearer token")
	fl.BoolVar(open, "insecure-open", false, "serve an --addr beyond loopback without a token: anyone who can reach it may use the server (a warning says so)")
}

// readToken is the bearer token of a command that serves: --token-file's
// content, else the --token flag's value, else $TROUPE_TOKEN.
func readToken(flag, file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usagef("--token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if flag == "" {
		return os.Getenv("TROUPE_TOKEN"), nil
	}
	return flag, nil
}
