package env_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

// TestMakePolicy: the scenario's own policies and random are made for the
// request's role; an unknown name wraps ErrUnknownPolicy; settings they
// cannot honour are refused, not ignored.
func TestMakePolicy(t *testing.T) {
	sc := tictactoe.New()
	info := sc.Info()
	params, err := info.ParseParams(nil)
	if err != nil {
		t.Fatal(err)
	}
	req := env.PolicyRequest{Scenario: sc, Params: params, Role: "x", Name: "random"}
	p, err := info.MakePolicy(req)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := p.Act(context.Background(), &agents.Observation{Legal: []string{"4"}}); err != nil || a.Text != "4" {
		t.Errorf("random played %q (%v), want the one legal action", a.Text, err)
	}
	if _, err := info.MakePolicy(env.PolicyRequest{Scenario: sc, Params: params, Role: "x", Name: "minimax"}); err != nil {
		t.Errorf("minimax: %v", err)
	}
	req.Name = "oracle"
	if _, err := info.MakePolicy(req); !errors.Is(err, env.ErrUnknownPolicy) {
		t.Errorf("an unknown name gave %v, want ErrUnknownPolicy", err)
	}
	for _, name := range []string{"random", "minimax"} {
		req.Name, req.Settings = name, json.RawMessage(`{"temperature":0}`)
		if _, err := info.MakePolicy(req); err == nil || !strings.Contains(err.Error(), "cannot honour") {
			t.Errorf("%s with settings gave %v, want a refusal", name, err)
		}
	}
}

func TestByRole(t *testing.T) {
	m := map[string]agents.Policy{"x": agents.Replay("x"), "o": agents.Replay("o")}
	policy := env.ByRole(m, agents.Replay("fallback"))
	m["x"] = agents.Replay("changed") // a later change does not reach the assignment
	for role, want := range map[string]string{"x": "x", "o": "o", "referee": "fallback"} {
		a, err := policy(env.Seat{ID: role + "-0", Role: role}).Act(context.Background(), &agents.Observation{})
		if err != nil || a.Text != want {
			t.Errorf("role %s played %q (%v), want %q", role, a.Text, err, want)
		}
	}
	if got := env.ByRole(nil, nil)(env.Seat{ID: "a", Role: "a"}); got != nil {
		t.Errorf("no policies and no fallback gave %v", got)
	}
}
