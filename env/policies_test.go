package env_test

import (
	"context"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
)

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
