package cli

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/envserver/envclient"
)

// envDefaultFlags are troupe env-serve's default episode: the reset a
// request that names no scenario plays (OpenEnv's reset() names none).
type envDefaultFlags struct {
	scenario string
	params   []string
	policies []string
	open     []string
	seats    []string
}

func (d *envDefaultFlags) bind(fl *pflag.FlagSet) {
	fl.StringVar(&d.scenario, "scenario", "", "the default episode's scenario: a reset that names none (OpenEnv's reset()) plays it, and so does a step that names no session before any reset")
	fl.StringArrayVarP(&d.params, "param", "p", nil, "the default episode's scenario parameter `key=value` (repeatable; with --scenario)")
	fl.StringArrayVarP(&d.policies, "policy", "P", nil, "`ROLE=NAME`: the house policy of the default episode's seats of ROLE that no session holds (repeatable; with --scenario)")
	fl.StringArrayVar(&d.open, "open", nil, "the default episode's seats (agent ids) sessions may take; the house plays the rest (repeatable or comma-separated; with --scenario; default every seat)")
	fl.StringArrayVar(&d.seats, "seats", nil, "the seats (agent ids) a default reset's session takes (repeatable or comma-separated; with --scenario; default every open seat)")
}

// reset is the default reset, nil without --scenario.
func (d *envDefaultFlags) reset() (*envclient.ResetRequest, error) {
	if d.scenario == "" {
		if len(d.params)+len(d.policies)+len(d.open)+len(d.seats) > 0 {
			return nil, usagef("--param, --policy, --open and --seats describe the default episode: give its --scenario too")
		}
		return nil, nil
	}
	req := &envclient.ResetRequest{Scenario: d.scenario, Open: splitList(d.open), Seats: splitList(d.seats)}
	if len(d.params) > 0 {
		params, err := env.ParseAssignments(d.params)
		if err != nil {
			return nil, usagef("--param: %w", err)
		}
		req.Params = params
	}
	for _, p := range d.policies {
		role, name, ok := strings.Cut(p, "=")
		if !ok || role == "" || name == "" {
			return nil, usagef("--policy %q: write ROLE=NAME (o=minimax)", p)
		}
		if req.Policies == nil {
			req.Policies = map[string]string{}
		}
		if _, dup := req.Policies[role]; dup {
			return nil, usagef("--policy: role %q given twice", role)
		}
		req.Policies[role] = name
	}
	return req, nil
}

// splitList reads repeatable, comma-separated values.
func splitList(vs []string) []string {
	var out []string
	for _, v := range vs {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}
