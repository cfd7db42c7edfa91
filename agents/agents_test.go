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
	"github.com/troupe-rl/troupe/agents/agentstest"
	"github.com/troupe-rl/troupe/protocol"
)

var door = &agents.Role{
	Name:    "door",
	Initial: "closed",
	Events: fsm.Events{
		agents.Edge("closed", "open", "open"),
		agents.Edge("open", "close", "closed"),
		fsm.EventDesc{Name: "knock", Src: []string{"closed", "open"}, Dst: "closed"},
		fsm.EventDesc{Name: "break", Src: []string{"closed", "open"}, Dst: "broken"},
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
	nop := func(agents.Transition) error { return nil }
	ab := fsm.Events{agents.Edge("a", "e", "b")}
	for msg, r := range map[string]*agents.Role{
		"a role has no name":   {Initial: "a"},
		"no initial state":     {Name: "r"},
		"no events":            {Name: "r", Initial: "a"},
		"has no name":          {Name: "r", Initial: "a", Events: fsm.Events{{Src: []string{"a"}, Dst: "b"}}},
		"has no source state":  {Name: "r", Initial: "a", Events: fsm.Events{{Name: "e", Dst: "b"}}},
		"no destination state": {Name: "r", Initial: "a", Events: fsm.Events{{Name: "e", Src: []string{"a"}}}},
		`leads from "a" to both "b" and "c"`: {Name: "r", Initial: "a", Events: fsm.Events{
			agents.Edge("a", "e", "b"), agents.Edge("a", "e", "c")}},
		`terminal state "z" is not reached`: {Name: "r", Initial: "a", Terminal: []agents.State{"z"}, Events: ab},
		`acting state "z" is not a state`:   {Name: "r", Initial: "a", Acting: []agents.State{"z"}, Events: ab},
		`acting state "b" is terminal`:      {Name: "r", Initial: "a", Acting: []agents.State{"b"}, Terminal: []agents.State{"b"}, Events: ab},
		`must not be called "event"`:        {Name: "r", Initial: "a", Events: fsm.Events{agents.Edge("a", "event", "b")}},
		`must not be called "state"`:        {Name: "r", Initial: "a", Events: fsm.Events{agents.Edge("a", "e", "state")}},
		// looplab/fsm ignores these keys without a word.
		`callback "before_f": the role has no event "f"`:                       {Name: "r", Initial: "a", Events: ab, Callbacks: agents.Callbacks{"before_f": nop}},
		`callback "after_f": the role has no event "f"`:                        {Name: "r", Initial: "a", Events: ab, Callbacks: agents.Callbacks{"after_f": nop}},
		`callback "enter_c": no event of the role leaves or reaches`:           {Name: "r", Initial: "a", Events: ab, Callbacks: agents.Callbacks{"enter_c": nop}},
		`callback "leave_B": no event of the role leaves or reaches`:           {Name: "r", Initial: "a", Events: ab, Callbacks: agents.Callbacks{"leave_B": nop}},
		`callback "on_e" names no event or state`:                              {Name: "r", Initial: "a", Events: ab, Callbacks: agents.Callbacks{"on_e": nop}},
		`callback "before_events": the role has no event "events"`:             {Name: "r", Initial: "a", Events: ab, Callbacks: agents.Callbacks{"before_events": nop}},
		`callbacks "b" and "enter_b" are the same callback`:                    {Name: "r", Initial: "a", Events: ab, Callbacks: agents.Callbacks{"b": nop, "enter_b": nop}},
		`callback "after_e" is nil`:                                            {Name: "r", Initial: "a", Events: ab, Callbacks: agents.Callbacks{"after_e": nil}},
		`callback "enter_a": no event of the role leaves or reaches state "a"`: {Name: "r", Initial: "a", Events: fsm.Events{agents.Edge("b", "e", "c")}, Callbacks: agents.Callbacks{"enter_a": nop}},
	} {
		err := r.Validate()
		assert.ErrorIs(t, err, agents.ErrBadRole, msg)
		assert.ErrorContains(t, err, msg)
	}
	ok := &agents.Role{Name: "r", Initial: "a", Events: ab, Callbacks: agents.Callbacks{
		"before_e": nop, "before_event": nop, "leave_a": nop, "leave_state": nop,
		"enter_b": nop, "enter_state": nop, "after_e": nop, "after_event": nop,
	}}
	assert.NoError(t, ok.Validate())
	short := &agents.Role{Name: "r", Initial: "a", Events: ab, Callbacks: agents.Callbacks{"b": nop, "e": nop}}
	assert.NoError(t, short.Validate(), "looplab's short forms: <state> is enter_<state>, <event> after_<event>")
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
// Machine.Fire and through looplab/fsm's own Event, with and without
// callbacks, and compares states, errors and callback traces.
func TestFireAgreesWithLooplab(t *testing.T) {
	agentstest.Check(t, door)
	agentstest.Check(t, &agents.Role{Name: "one", Initial: "only", Events: fsm.Events{agents.Edge("only", "stay", "only")}})
}

// TestAgentstestCatchesDisagreement checks the oracle itself: a machine
// whose table differs from looplab's is caught.
func TestAgentstestCatchesDisagreement(t *testing.T) {
	// Two descriptions of one event from one state: looplab keeps the
	// last, troupe refuses the role.
	r := &agents.Role{Name: "r", Initial: "a", Events: fsm.Events{agents.Edge("a", "e", "b"), agents.Edge("a", "e", "c")}}
	assert.ErrorIs(t, agentstest.Verify(r), agents.ErrBadRole)
}

// recorder is an agents.Env that records what callbacks do with it.
type recorder struct {
	log      []string
	machines []*agents.Machine
}

func (r *recorder) Time() int                            { return 7 }
func (r *recorder) State(seat int) agents.State          { return r.machines[seat].State() }
func (r *recorder) Fire(seat int, ev agents.Event) error { return r.machines[seat].Fire(ev) }
func (r *recorder) Send(from string, to protocol.Address, kind, payload string) error {
	r.log = append(r.log, fmt.Sprintf("send %s %s %s %s", from, to, kind, payload))
	return nil
}
func (r *recorder) Tell(seat int, kind, payload string) error {
	r.log = append(r.log, fmt.Sprintf("tell %d %s %s", seat, kind, payload))
	return nil
}
func (r *recorder) Announce(kind, payload string) error {
	r.log = append(r.log, "announce "+kind+" "+payload)
	return nil
}
func (r *recorder) Note(seat int, key string, value any) {
	r.log = append(r.log, fmt.Sprintf("note %d %s %v", seat, key, value))
}
func (r *recorder) End() { r.log = append(r.log, "end") }

var errLocked = errors.New("the door is locked")

func TestCallbacks(t *testing.T) {
	var trace []string
	locked := false
	rec := func(key string) agents.Callback {
		return func(tr agents.Transition) error {
			trace = append(trace, fmt.Sprintf("%s %s:%s->%s@%d", key, tr.Event, tr.Src, tr.Dst, tr.Env.Time()))
			return nil
		}
	}
	role := &agents.Role{
		Name:    "guarded",
		Initial: "closed",
		Events:  door.Events,
		Callbacks: agents.Callbacks{
			"before_open": func(tr agents.Transition) error {
				trace = append(trace, "before_open")
				if locked {
					return errLocked
				}
				return nil
			},
			"before_event": rec("before_event"),
			"leave_closed": rec("leave_closed"),
			"leave_state":  rec("leave_state"),
			"enter_open":   rec("enter_open"),
			"enter_state":  rec("enter_state"),
			"after_open":   rec("after_open"),
			"after_event":  rec("after_event"),
			"enter_broken": func(tr agents.Transition) error {
				tr.Env.Note(tr.Seat, "broken_by", tr.Agent)
				return tr.Env.Fire(1, "open") // another seat, from an enter_ callback
			},
		},
		Terminal: door.Terminal,
	}
	require.NoError(t, role.Validate())
	env := &recorder{}
	front, back := role.NewMachine("front"), role.NewMachine("back")
	env.machines = []*agents.Machine{front, back}
	front.Bind(0, env)
	back.Bind(1, env)

	require.NoError(t, front.Fire("open"))
	assert.Equal(t, []string{
		"before_open",
		"before_event open:closed->open@7",
		"leave_closed open:closed->open@7",
		"leave_state open:closed->open@7",
		"enter_open open:closed->open@7",
		"enter_state open:closed->open@7",
		"after_open open:closed->open@7",
		"after_event open:closed->open@7",
	}, trace, "looplab's order")

	trace = nil
	require.NoError(t, front.Fire("knock")) // open -> closed
	trace = nil
	require.NoError(t, front.Fire("knock"), "a self-transition is a success")
	assert.Equal(t, []string{"before_event knock:closed->closed@7", "after_event knock:closed->closed@7"}, trace,
		"a self-transition runs the before_ and after_ callbacks only, as looplab does")

	locked, trace = true, nil
	err := front.Fire("open")
	var ce *agents.CallbackError
	require.ErrorAs(t, err, &ce)
	assert.True(t, ce.Canceled())
	assert.Equal(t, "before_open", ce.Callback)
	assert.ErrorIs(t, err, errLocked)
	assert.ErrorIs(t, err, agents.ErrCanceled)
	var canceled fsm.CanceledError
	assert.ErrorAs(t, err, &canceled, "errors.As finds looplab's CanceledError")
	assert.Equal(t, agents.State("closed"), front.State(), "a cancelled transition leaves the state alone")
	assert.Equal(t, []string{"before_open"}, trace, "the first failing guard stops the rest")
	assert.Equal(t, `agent "front" (role "guarded"): before_open canceled "open" from "closed" to "open": the door is locked`, err.Error())

	locked = false
	require.NoError(t, front.Fire("break"))
	assert.Equal(t, []string{"note 0 broken_by front"}, env.log)
	assert.Equal(t, agents.State("open"), back.State(), "enter_broken fired open on the other seat")
}

func TestCallbackErrorsAfterTheTransition(t *testing.T) {
	boom := errors.New("boom")
	role := &agents.Role{Name: "r", Initial: "a", Events: fsm.Events{agents.Edge("a", "go", "b")}, Callbacks: agents.Callbacks{
		"enter_b":  func(agents.Transition) error { return errors.New("first") },
		"after_go": func(agents.Transition) error { return boom },
	}}
	m := role.NewMachine("m")
	err := m.Fire("go")
	var ce *agents.CallbackError
	require.ErrorAs(t, err, &ce)
	assert.False(t, ce.Canceled())
	assert.ErrorIs(t, err, boom, "the last error wins, as looplab's last Cancel does")
	assert.NotErrorIs(t, err, agents.ErrCanceled)
	assert.Equal(t, agents.State("b"), m.State(), "enter_ and after_ errors do not undo the transition")
}

func TestFiringFromAGuardIsRefused(t *testing.T) {
	var inner error
	var m *agents.Machine
	role := &agents.Role{Name: "r", Initial: "a", Events: fsm.Events{agents.Edge("a", "go", "b"), agents.Edge("b", "on", "c")},
		Callbacks: agents.Callbacks{
			"leave_a":  func(agents.Transition) error { inner = m.Fire("go"); return nil },
			"after_go": func(agents.Transition) error { return m.Fire("on") },
		}}
	m = role.NewMachine("m")
	require.NoError(t, m.Fire("go"))
	var te *agents.TransitionError
	require.ErrorAs(t, inner, &te, "looplab deadlocks here")
	var busy fsm.InTransitionError
	assert.ErrorAs(t, inner, &busy)
	assert.ErrorIs(t, inner, agents.ErrImpossibleTransition)
	assert.Equal(t, agents.State("c"), m.State(), "after_ callbacks may fire the next event, as in looplab")
}

func TestTransitionErrorUnwrapsToBoth(t *testing.T) {
	m := door.NewMachine("m")
	err := m.Fire("close")
	var invalid fsm.InvalidEventError
	require.ErrorAs(t, err, &invalid)
	assert.Equal(t, fsm.InvalidEventError{Event: "close", State: "closed"}, invalid)
	assert.ErrorIs(t, err, agents.ErrImpossibleTransition)
	err = m.Fire("fly")
	var unknown fsm.UnknownEventError
	require.ErrorAs(t, err, &unknown)
	assert.ErrorIs(t, err, agents.ErrImpossibleTransition)
}

func TestActing(t *testing.T) {
	assert.True(t, door.ActsIn("closed"), "no Acting: every non-terminal state acts")
	assert.False(t, door.ActsIn("broken"))
	r := &agents.Role{Name: "r", Initial: "waiting", Acting: []agents.State{"waiting"},
		Events: fsm.Events{agents.Edge("waiting", "go", "busy"), agents.Edge("busy", "rest", "waiting")}}
	require.NoError(t, r.Validate())
	m := r.NewMachine("m")
	assert.True(t, m.Acting())
	require.NoError(t, m.Fire("go"))
	assert.False(t, m.Acting())
	assert.Equal(t, []agents.State{"waiting", "busy"}, r.States())
	assert.Equal(t, []agents.Event{"go", "rest"}, r.EventNames())
}

func BenchmarkFire(b *testing.B) {
	m := door.NewMachine("m")
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Fire("open"); err != nil {
			b.Fatal(err)
		}
		if err := m.Fire("close"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFireWithCallbacks(b *testing.B) {
	n := 0
	count := func(agents.Transition) error { n++; return nil }
	role := &agents.Role{Name: "r", Initial: "closed", Events: door.Events, Callbacks: agents.Callbacks{
		"before_event": count, "leave_state": count, "enter_state": count, "after_event": count,
	}}
	m := role.NewMachine("m")
	m.Bind(0, &recorder{})
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Fire("open"); err != nil {
			b.Fatal(err)
		}
		if err := m.Fire("close"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLooplabEvent is the same work through looplab/fsm's Event, for
// comparison.
func BenchmarkLooplabEvent(b *testing.B) {
	f := fsm.NewFSM("closed", door.Events, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := f.Event(ctx, "open"); err != nil {
			b.Fatal(err)
		}
		if err := f.Event(ctx, "close"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMoveIsFiresUsualTransition: Move takes the transitions Fire takes
// without callbacks, for the role's own event constants, and leaves
// everything else (a refusal, an event string of other bytes, a role with
// callbacks) unchanged for Fire.
func TestMoveIsFiresUsualTransition(t *testing.T) {
	require.NoError(t, door.Validate())
	events := []agents.Event{}
	for _, d := range door.Events {
		events = append(events, agents.Event(d.Name))
	}
	for _, start := range []agents.State{"closed", "open", "broken"} {
		for _, ev := range events {
			moved, fired := door.NewMachine("m"), door.NewMachine("f")
			require.NoError(t, moved.SetState(start))
			require.NoError(t, fired.SetState(start))
			from, to, ok := moved.Move(ev)
			err := fired.Fire(ev)
			assert.Equal(t, err == nil, ok, "%s from %s", ev, start)
			assert.Equal(t, fired.State(), moved.State(), "%s from %s", ev, start)
			if ok {
				assert.Equal(t, start, from)
				assert.Equal(t, fired.State(), to)
			}
			// The same event in other bytes is Fire's to find.
			copied := door.NewMachine("c")
			require.NoError(t, copied.SetState(start))
			_, _, ok = copied.Move(agents.Event(string([]byte(ev))))
			assert.False(t, ok)
			assert.Equal(t, start, copied.State())
		}
	}
	withCallbacks := &agents.Role{Name: "r", Initial: "a", Events: fsm.Events{agents.Edge("a", "go", "b")},
		Callbacks: agents.Callbacks{"enter_b": func(agents.Transition) error { return nil }}}
	require.NoError(t, withCallbacks.Validate())
	m := withCallbacks.NewMachine("m")
	_, _, ok := m.Move("go")
	assert.False(t, ok, "a role with callbacks is Fire's")
	assert.Equal(t, agents.State("a"), m.State())
}
