package agents_test

import (
	"context"
	"fmt"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
)

// A role is looplab/fsm's declaration: its events, its callbacks by
// looplab's names, and the states its agents act in. Each agent runs its own
// Machine, and the environment fires the events the rules call for.
func ExampleRole() {
	speaker := &agents.Role{
		Name:    "speaker",
		Initial: "looking",
		Events:  fsm.Events{{Name: "speak", Src: []string{"looking"}, Dst: "done"}},
		Callbacks: agents.Callbacks{
			"before_speak": func(t agents.Transition) error {
				fmt.Println("before", t.Event, "from", t.Src, "to", t.Dst)
				return nil
			},
			"enter_done": func(t agents.Transition) error {
				fmt.Println(t.Agent, "is done")
				return nil
			},
		},
		Terminal: []agents.State{"done"},
		Acting:   []agents.State{"looking"},
	}
	if err := speaker.Validate(); err != nil {
		panic(err)
	}
	m := speaker.NewMachine("alice")
	fmt.Println(m.State(), m.Acting(), m.Done())
	fmt.Println(m.Fire("speak"), m.State(), m.Acting(), m.Done())
	fmt.Println(m.Fire("speak"))
	// Output:
	// looking true false
	// before speak from looking to done
	// alice is done
	// <nil> done false true
	// agent "alice" (role "speaker"): event "speak" is impossible in state "done"
}

// A misspelled callback key is an error, where looplab/fsm ignores it.
func ExampleRole_Validate() {
	r := &agents.Role{
		Name:      "door",
		Initial:   "closed",
		Events:    fsm.Events{agents.Edge("closed", "open", "open")},
		Callbacks: agents.Callbacks{"before_opne": func(agents.Transition) error { return nil }},
	}
	fmt.Println(r.Validate())
	// Output:
	// bad role definition: role "door": callback "before_opne": the role has no event "opne" (events: [open])
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
