package agents_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
)

var door = &agents.Role{
	Name:    "door",
	Initial: "closed",
	Transitions: []agents.Transition{
		{Event: "open", From: []agents.State{"closed"}, To: "open"},
		{Event: "close", From: []agents.State{"open"}, To: "closed"},
		{Event: "knock", From: []agents.State{"closed", "open"}, To: "closed"},
		{Event: "break", From: []agents.State{"closed", "open"}, To: "broken"},
	},
	Terminal: []agents.State{"broken"},
}

func TestMachineTransitions(t *testing.T) {
	require.NoError(t, door.Validate())
	m := door.NewMachine("front")
	assert.Equal(t, agents.State("closed"), m.State())
	require.NoError(t, m.Fire("open"))
	assert.Equal(t, agents.State("open"), m.State())
	assert.True(t, m.Can("close"))
	assert.False(t, m.Can("open"))

	err := m.Fire("open")
	var te *agents.TransitionError
	require.ErrorAs(t, err, &te)
	assert.ErrorIs(t, err, agents.ErrImpossibleTransition)
	assert.Equal(t, `agent "front" (role "door"): event "open" is impossible in state "open"`, err.Error())
	assert.Equal(t, agents.State("open"), m.State(), "a refused event leaves the state alone")

	err = m.Fire("fly")
	require.ErrorAs(t, err, &te)
	var unknown fsm.UnknownEventError
	assert.ErrorAs(t, te.Err, &unknown)

	require.NoError(t, m.Fire("knock"))
	require.NoError(t, m.Fire("knock"), "a self-transition is a success")
	assert.Equal(t, agents.State("closed"), m.State())
	assert.False(t, m.Done())
	require.NoError(t, m.Fire("break"))
	assert.True(t, m.Done())

	m.Reset("back")
	assert.Equal(t, agents.State("closed"), m.State())
	err = m.Fire("close")
	assert.ErrorContains(t, err, `agent "back"`)
}

func TestRoleValidate(t *testing.T) {
	for msg, r := range map[string]*agents.Role{
		"a role has no name":   {Initial: "a"},
		"no initial state":     {Name: "r"},
		"no transitions":       {Name: "r", Initial: "a"},
		"has no event name":    {Name: "r", Initial: "a", Transitions: []agents.Transition{{From: []agents.State{"a"}, To: "b"}}},
		"has no source state":  {Name: "r", Initial: "a", Transitions: []agents.Transition{{Event: "e", To: "b"}}},
		"no destination state": {Name: "r", Initial: "a", Transitions: []agents.Transition{{Event: "e", From: []agents.State{"a"}}}},
		`leads from "a" to both "b" and "c"`: {Name: "r", Initial: "a", Transitions: []agents.Transition{
			{Event: "e", From: []agents.State{"a"}, To: "b"}, {Event: "e", From: []agents.State{"a"}, To: "c"}}},
		`terminal state "z" is not reached`: {Name: "r", Initial: "a", Terminal: []agents.State{"z"},
			Transitions: []agents.Transition{{Event: "e", From: []agents.State{"a"}, To: "b"}}},
	} {
		err := r.Validate()
		assert.ErrorIs(t, err, agents.ErrBadRole, msg)
		assert.ErrorContains(t, err, msg)
	}
}

func TestDiagramIsDeterministic(t *testing.T) {
	first, err := door.Diagram(agents.Mermaid)
	require.NoError(t, err)
	for range 20 {
		again, err := door.Diagram(agents.Mermaid)
		require.NoError(t, err)
		require.Equal(t, first, again)
	}
	assert.Contains(t, first, "stateDiagram-v2")
	assert.Contains(t, first, "closed --> open: open")
	dot, err := door.Diagram(agents.Graphviz)
	require.NoError(t, err)
	assert.Contains(t, dot, `digraph fsm {`)
}

func TestRandomIsReproducibleAndUniform(t *testing.T) {
	p := agents.Random()
	legal := []string{"a", "b", "c", "d"}
	counts := map[string]int{}
	for seed := range uint64(4000) {
		obs := &agents.Observation{Agent: "x", Legal: legal, Seed: seed}
		a, err := p.Act(context.Background(), obs)
		require.NoError(t, err)
		b, _ := p.Act(context.Background(), obs)
		require.Equal(t, a, b, "same seed, same choice")
		counts[a.Text]++
	}
	for _, l := range legal {
		// 1000 expected; 6 standard deviations is ±164.
		assert.InDelta(t, 1000, counts[l], 164, l)
	}
	_, err := p.Act(context.Background(), &agents.Observation{Agent: "x", Turn: 2})
	assert.ErrorIs(t, err, agents.ErrNoLegalActions)
	assert.ErrorContains(t, err, `agent "x" turn 2`)
}

func TestReplayAndScripted(t *testing.T) {
	r := agents.Replay("e4", "Nf3")
	for turn, want := range []string{"e4", "Nf3"} {
		a, err := r.Act(context.Background(), &agents.Observation{Turn: turn})
		require.NoError(t, err)
		assert.Equal(t, want, a.Text)
	}
	_, err := r.Act(context.Background(), &agents.Observation{Agent: "w", Turn: 2})
	assert.ErrorIs(t, err, agents.ErrReplayExhausted)

	s := agents.Scripted(func(o *agents.Observation) string { return fmt.Sprintf("%s@%d", o.Agent, o.Step) })
	a, err := s.Act(context.Background(), &agents.Observation{Agent: "q", Step: 3})
	require.NoError(t, err)
	assert.Equal(t, "q@3", a.Text)

	f := agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
		return agents.Action{}, errors.New("x")
	})
	_, err = f.Act(context.Background(), &agents.Observation{})
	assert.EqualError(t, err, "x")
}

func TestObservationStreamsAreIndependent(t *testing.T) {
	o := &agents.Observation{Seed: 99}
	assert.Equal(t, o.Intn(1, 1000), o.Intn(1, 1000))
	same := 0
	for k := range uint64(100) {
		if o.Intn(k, 1<<30) == o.Intn(k+1, 1<<30) {
			same++
		}
	}
	assert.Zero(t, same)
	f := o.Float64(3)
	assert.True(t, f >= 0 && f < 1)
}

// TestFireAgreesWithLooplab fires every event in every state through
// Machine.Fire and through looplab/fsm's own Event, and compares the
// outcomes: Fire's table lookup must be the looplab transition.
func TestFireAgreesWithLooplab(t *testing.T) {
	states := []agents.State{"closed", "open", "broken"}
	events := []agents.Event{"open", "close", "knock", "break", "fly"}
	for _, from := range states {
		for _, ev := range events {
			m := door.NewMachine("m")
			var descs []fsm.EventDesc
			for _, tr := range door.Transitions {
				src := make([]string, len(tr.From))
				for i, s := range tr.From {
					src[i] = string(s)
				}
				descs = append(descs, fsm.EventDesc{Name: string(tr.Event), Src: src, Dst: string(tr.To)})
			}
			ref := fsm.NewFSM(string(from), descs, nil)
			// Walk m to from through a legal path.
			switch from {
			case "open":
				require.NoError(t, m.Fire("open"))
			case "broken":
				require.NoError(t, m.Fire("break"))
			}
			require.Equal(t, from, m.State())

			err := m.Fire(ev)
			refErr := ref.Event(context.Background(), string(ev))
			var noTransition fsm.NoTransitionError
			refOK := refErr == nil || errors.As(refErr, &noTransition)
			assert.Equal(t, refOK, err == nil, "%s --%s-->: fire %v, looplab %v", from, ev, err, refErr)
			assert.Equal(t, agents.State(ref.Current()), m.State(), "%s --%s-->", from, ev)
			assert.Equal(t, ref.Can("knock"), m.Can("knock"), "the looplab machine inside m stays in step")
		}
	}
}
