package agents_test

import (
	"context"
	"fmt"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
)

// A role is a state machine declaration; each agent of the role runs its own
// Machine, and the environment fires the events the rules call for.
func ExampleRole() {
	speaker := &agents.Role{
		Name:    "speaker",
		Initial: "looking",
		Events: fsm.Events{
			agents.Edge("looking", "speak", "done"),
		},
		Terminal: []agents.State{"done"},
	}
	if err := speaker.Validate(); err != nil {
		panic(err)
	}
	m := speaker.NewMachine("alice")
	fmt.Println(m.State(), m.Done())
	fmt.Println(m.Fire("speak"), m.State(), m.Done())
	fmt.Println(m.Fire("speak"))
	// Output:
	// looking false
	// <nil> done true
	// agent "alice" (role "speaker"): event "speak" is impossible in state "done"
}

// Policies are one-method interfaces; built-ins cover scripted, random and
// replayed play.
func ExampleRandom() {
	obs := &agents.Observation{Agent: "x", Legal: []string{"rock", "paper", "scissors"}, Seed: 2026}
	a, _ := agents.Random().Act(context.Background(), obs)
	b, _ := agents.Random().Act(context.Background(), obs)
	fmt.Println(a.Text == b.Text)
	// Output: true
}
