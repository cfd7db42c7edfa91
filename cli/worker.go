package cli

import (
	"cmp"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/runspec"
)

// workerCommand is `troupe worker`: it pulls the episode requests of
// distributed runs from NATS JetStream, plays them, and stores their
// samples, until SIGTERM, when it hands back what it holds and exits 0.
func (a *App) workerCommand() *cobra.Command {
	nf := natsrun.DefaultFlags()
	var concurrency int
	var endpoints []string
	llmCfg := llm.DefaultConfig()
	llmEnvErr := llmCfg.ApplyEnv(a.lookupEnv())
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Play the episodes of distributed runs, pulled from NATS JetStream (--nats URL)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nf.ApplyEnv(a.lookupEnv())
			if concurrency == 0 {
				concurrency = runtime.GOMAXPROCS(0)
			}
			if llmEnvErr != nil {
				return &UsageError{Err: llmEnvErr}
			}
			pool, _, err := a.checkedLLMPool(cmd.Flags(), llmCfg, endpoints, llmCfg.Seed)
			if err != nil {
				return err
			}
			defer pool.close()
			logger := slog.New(slog.NewTextHandler(a.Stderr, nil))
			return a.natsError("worker", nf.RunWorker(cmd.Context(), a.Scenarios, a.workerPolicies(pool), []string{llmPolicyName}, concurrency, logger))
		},
	}
	nf.BindWorker(cmd.Flags())
	llmCfg.BindFlags(cmd.Flags())
	cmd.Flags().IntVarP(&concurrency, "concurrency", "c", 0, "episodes played at once; 0: one per CPU (LLM episodes: many more)")
	cmd.Flags().StringArrayVar(&endpoints, "llm-endpoint", nil, "`NAME` of an LLM endpoint this worker's --llm-base-url serves: it plays the llm policy of runs that name it (troupe run --llm-endpoint NAME), and of runs whose own server is its --llm-base-url; NAME=URL[,kind=K,api_key_env=VAR,tokenize=BOOL,token_in=BOOL,max_in_flight=N] serves the endpoint NAME, which roles name (--role-llm ROLE=endpoint=NAME), at URL (repeatable)")
	return cmd
}

// workerPolicies makes the policies a distributed run names: the
// scenario's own, "random", and "llm" with the role's own model and
// sampling (its spec's settings) on the role's endpoint. A role on the
// default endpoint plays on the worker's --llm-* server when that server is
// the run's LLM endpoint: one of the names the worker gives it (a bare
// --llm-endpoint NAME), or the run's server's URL when it is the worker's.
// A role on a named endpoint plays on the worker's endpoint of that name
// (--llm-endpoint NAME=URL, or a bare NAME). A run whose endpoints the
// worker does not serve, or whose settings it cannot honour, it leaves to
// other workers, saying why.
func (a *App) workerPolicies(pool *llmPool) func(llmEndpoint string) env.PolicyMaker {
	eps := pool.endpoints
	return func(llmEndpoint string) env.PolicyMaker {
		return func(r env.PolicyRequest) (agents.Policy, error) {
			if r.Name != llmPolicyName {
				return nil, env.ErrUnknownPolicy
			}
			st, err := decodeLLMSettings(r.Settings)
			if err != nil {
				return nil, fmt.Errorf("role %s: llm %w", r.Role, err)
			}
			if st.Endpoint == "" && !servesEndpoint(llmEndpoint, eps.base.BaseURL, eps.aliases) {
				serves := append([]string{eps.base.BaseURL}, eps.aliases...)
				if llmEndpoint == "" {
					return nil, fmt.Errorf("role %s plays llm, but the run names no LLM endpoint", r.Role)
				}
				return nil, fmt.Errorf("role %s plays llm on endpoint %s, which this worker does not serve (it serves %s; declare one with --llm-endpoint NAME)",
					r.Role, llmEndpoint, strings.Join(serves, ", "))
			}
			return pool.policy(r)
		}
	}
}

// servesEndpoint reports whether a worker whose server is baseURL, and
// which declares the names endpoints, serves the run's endpoint.
func servesEndpoint(endpoint, baseURL string, endpoints []string) bool {
	if endpoint == "" {
		return false
	}
	if slices.Contains(endpoints, endpoint) {
		return true
	}
	return strings.TrimRight(endpoint, "/") == strings.TrimRight(baseURL, "/")
}

// llmEndpointOf is a distributed run's Spec.LLMEndpoint, the default
// endpoint's name: named, or the run's own server's URL, when a role plays
// llm on it; empty when none does (roles on named endpoints name theirs in
// their settings).
func llmEndpointOf(policies map[string]runspec.Policy, named, baseURL string) string {
	for _, p := range policies {
		if p.Name != llmPolicyName {
			continue
		}
		if st, err := decodeLLMSettings(p.Settings); err != nil || st.Endpoint == "" {
			return cmp.Or(named, baseURL)
		}
	}
	return ""
}
