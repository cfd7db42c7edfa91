package viewer

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
)

// workerRole is idle → ready → busy → done, with a self-transition in busy
// and a shortcut from ready to done.
func workerRole(t *testing.T) *agents.Role {
	t.Helper()
	r := &agents.Role{Name: "worker", Initial: "idle",
		Events: fsm.Events{
			agents.Edge("idle", "start", "ready"),
			agents.Edge("ready", "go", "busy"),
			agents.Edge("busy", "poke", "busy"),
			agents.Edge("busy", "finish", "done"),
			agents.Edge("ready", "skip", "done"),
		},
		Terminal: []agents.State{"done"},
		Acting:   []agents.State{"ready"},
	}
	require.NoError(t, r.Validate())
	return r
}

// workerEpisode: seat 0 is started at step 0 (the game's Start), acts at
// step 1, goes busy, is poked (a self-transition) and finishes at step 2;
// seat 1 acts at steps 1 and 2 and, at step 2, goes busy and finishes at
// once (a callback moving on); seat 2 never moves.
func workerEpisode() *Episode {
	e := &Episode{Scenario: "work", Steps: 2, HasBus: true}
	for i, id := range []string{"a", "b", "c"} {
		e.Seats = append(e.Seats, SeatView{Seat: i, ID: id, Role: "worker"})
	}
	for n, tn := range []struct {
		seat, step int
		state      string
	}{{0, 1, "ready"}, {1, 1, "ready"}, {1, 2, "ready"}} {
		e.Turns = append(e.Turns, TurnView{N: n, Seat: tn.seat, Agent: e.Seats[tn.seat].ID, Role: "worker", Step: tn.step, State: tn.state, Emit: true})
	}
	for k, tr := range []TransitionView{
		{Step: 0, Seat: 0, Event: "start", From: "idle", To: "ready"},
		{Step: 0, Seat: 1, Event: "start", From: "idle", To: "ready"},
		{Step: 1, Seat: 0, Event: "go", From: "ready", To: "busy"},
		{Step: 1, Seat: 0, Event: "poke", From: "busy", To: "busy"},
		{Step: 2, Seat: 0, Event: "finish", From: "busy", To: "done"},
		{Step: 2, Seat: 1, Event: "go", From: "ready", To: "busy"},
		{Step: 2, Seat: 1, Event: "finish", From: "busy", To: "done"},
	} {
		tr.K = k
		e.Transitions = append(e.Transitions, tr)
	}
	return e
}

func lookupOf(roles ...*agents.Role) func(string) ([]*agents.Role, error) {
	return func(string) ([]*agents.Role, error) { return roles, nil }
}

// row is what a timeline draws for one seat: each state segment as
// "state<-event@step#k" (the initial one "state"), each self-transition
// as "~event@step#k", in the order drawn.
func row(tl Timeline, seat int) (segs, selfs []string) {
	for _, s := range tl.Segs {
		if s.Seat != seat {
			continue
		}
		if s.K < 0 {
			segs = append(segs, s.State)
		} else {
			segs = append(segs, fmt.Sprintf("%s<-%s@%d#%d", s.State, s.Event, s.Step, s.K))
		}
	}
	for _, s := range tl.Selfs {
		if s.Seat == seat {
			selfs = append(selfs, fmt.Sprintf("~%s@%d#%d", s.Event, s.Step, s.K))
		}
	}
	return segs, selfs
}

// checkGeometry: each row's segments tile it without gaps or overlaps,
// from the labels to the final column, each at least a pixel wide; every
// self-transition lies inside the segment of its state; every turn's dot
// lies in a segment of the state it was played in.
func checkGeometry(t *testing.T, tl Timeline) {
	t.Helper()
	for _, r := range tl.Rows {
		var segs []Seg
		for _, s := range tl.Segs {
			if s.Seat == r.Seat {
				segs = append(segs, s)
			}
		}
		require.NotEmpty(t, segs, "seat %d", r.Seat)
		assert.InDelta(t, tlLabel, segs[0].X, 1e-9, "seat %d starts at the start", r.Seat)
		for i, s := range segs {
			assert.GreaterOrEqual(t, s.W, 1.0, "seat %d segment %d", r.Seat, i)
			if i > 0 {
				assert.InDelta(t, segs[i-1].X+segs[i-1].W, s.X, 1e-9, "seat %d: segment %d starts where %d ends", r.Seat, i, i-1)
			}
		}
		assert.Equal(t, segs[len(segs)-1].State, r.Final, "seat %d's final state", r.Seat)
		at := func(x float64) *Seg {
			for i := range segs {
				if x >= segs[i].X && x < segs[i].X+segs[i].W {
					return &segs[i]
				}
			}
			return nil
		}
		for _, st := range tl.Selfs {
			if st.Seat == r.Seat {
				s := at(st.X)
				if assert.NotNil(t, s, "self-transition #%d is on its row", st.K) {
					assert.Equal(t, st.State, s.State, "self-transition #%d", st.K)
				}
			}
		}
		for _, d := range tl.Turns {
			if d.Seat == r.Seat {
				s := at(d.X)
				if assert.NotNil(t, s, "turn %d is on its row", d.Turn) {
					assert.Equal(t, d.State, s.State, "turn %d is drawn in the state it was played in", d.Turn)
				}
			}
		}
	}
}

func TestTimelineFromTransitions(t *testing.T) {
	role := workerRole(t)
	rv := roleViews(workerEpisode(), lookupOf(role))
	require.Len(t, rv, 1)
	tl := rv[0].Timeline
	require.True(t, tl.FromTransitions)
	require.Len(t, tl.Rows, 3)

	segs, selfs := row(tl, 0)
	assert.Equal(t, []string{"idle", "ready<-start@0#0", "busy<-go@1#2", "done<-finish@2#4"}, segs, "a step-0 transition, a state entered between turns, the final state")
	assert.Equal(t, []string{"~poke@1#3"}, selfs, "the self-transition is a tick, not a segment")
	segs, selfs = row(tl, 1)
	assert.Equal(t, []string{"idle", "ready<-start@0#1", "busy<-go@2#5", "done<-finish@2#6"}, segs, "a chain within one step: busy passed through")
	assert.Empty(t, selfs)
	segs, _ = row(tl, 2)
	assert.Equal(t, []string{"idle"}, segs, "a seat that never moved stays in its role's initial state")
	assert.Equal(t, []string{"done", "done", "idle"}, []string{tl.Rows[0].Final, tl.Rows[1].Final, tl.Rows[2].Final})
	require.Len(t, tl.Turns, 3, "a dot per turn")
	checkGeometry(t, tl)

	// The state busy, passed through within step 2, is drawn as wide as
	// the step was widened for it.
	for _, s := range tl.Segs {
		if s.Seat == 1 && s.State == "busy" {
			assert.GreaterOrEqual(t, s.W, 4.0)
			assert.Contains(t, s.Title, "no turn in it")
		}
		if s.Seat == 1 && s.State == "ready" {
			assert.Contains(t, s.Title, "2 turns in it")
		}
	}

	// The diagram: every state visited, every event taken, the shortcut
	// not.
	visited := map[string]string{}
	for _, n := range rv[0].Nodes {
		visited[n.State] = n.VisitedBy
		assert.Equal(t, n.VisitedBy != "", containsWord(n.Class, "visited"), n.State)
	}
	assert.Equal(t, map[string]string{"idle": "0 1 2", "ready": "0 1", "busy": "0 1", "done": "0 1"}, visited)
	taken := map[string]string{}
	for _, ed := range rv[0].Edges {
		key := ed.From + ">" + ed.To
		if len(ed.Taken) > 0 {
			taken[key] = fmt.Sprint(ed.Taken, " by ", ed.TakenBy)
			assert.True(t, containsWord(ed.Class, "taken"), key)
		} else {
			assert.True(t, containsWord(ed.Class, "not-taken"), key)
		}
	}
	assert.Equal(t, map[string]string{
		"idle>ready": "[start] by 0 1", "ready>busy": "[go] by 0 1", "busy>busy": "[poke] by 0", "busy>done": "[finish] by 0 1",
	}, taken)
	assert.Empty(t, rv[0].Undeclared)
}

func containsWord(class, w string) bool { return slices.Contains(strings.Fields(class), w) }

// Without a registry that knows the scenario, a seat's initial state is
// its first transition's From; a seat of the role that never moved takes
// the role's; a role without transitions takes its first turn's state; a
// seat with neither is drawn as unknown.
func TestTimelineOfAnUnknownScenario(t *testing.T) {
	e := workerEpisode()
	e.Seats = append(e.Seats, SeatView{Seat: 3, ID: "d", Role: "boss"}, SeatView{Seat: 4, ID: "f", Role: "boss"}, SeatView{Seat: 5, ID: "g", Role: "clerk"})
	e.Turns = append(e.Turns, TurnView{N: 3, Seat: 3, Agent: "d", Role: "boss", Step: 2, State: "watching"})
	for _, lookup := range []func(string) ([]*agents.Role, error){nil, func(string) ([]*agents.Role, error) { return nil, errors.New("no such scenario") }} {
		rv := roleViews(e, lookup)
		require.Len(t, rv, 3)
		for _, r := range rv {
			assert.False(t, r.Known)
			assert.NotEmpty(t, r.Why)
			assert.Empty(t, r.Nodes)
			assert.True(t, r.Timeline.FromTransitions)
		}
		segs, selfs := row(rv[0].Timeline, 0)
		assert.Equal(t, []string{"idle", "ready<-start@0#0", "busy<-go@1#2", "done<-finish@2#4"}, segs)
		assert.Equal(t, []string{"~poke@1#3"}, selfs)
		segs, _ = row(rv[0].Timeline, 2)
		assert.Equal(t, []string{"idle"}, segs, "the role's initial state, from its other seats' first transitions")
		checkGeometry(t, rv[0].Timeline)

		segs, _ = row(rv[1].Timeline, 3)
		assert.Equal(t, []string{"watching"}, segs, "no transition: the state its first turn was played in")
		segs, _ = row(rv[1].Timeline, 4)
		assert.Equal(t, []string{"watching"}, segs, "the role's, from its other seat's turn")
		checkGeometry(t, rv[1].Timeline)

		require.Len(t, rv[2].Timeline.Segs, 1)
		s := rv[2].Timeline.Segs[0]
		assert.Equal(t, "", s.State)
		assert.Contains(t, s.Class, "unknown")
		assert.Equal(t, "?", rv[2].Timeline.Rows[0].FinalLabel)
	}
}

// Without transitions (sample files; records that hold none) the timeline
// is the turns' states, and the diagram marks the states acted in.
func TestTimelineWithoutTransitions(t *testing.T) {
	e := workerEpisode()
	e.Transitions = nil
	rv := roleViews(e, lookupOf(workerRole(t)))
	tl := rv[0].Timeline
	assert.False(t, tl.FromTransitions)
	require.Len(t, tl.Segs, len(e.Turns), "a segment per turn")
	for i, s := range tl.Segs {
		assert.Equal(t, e.Turns[i].N, s.Turn)
		assert.Equal(t, e.Turns[i].State, s.State)
		assert.Equal(t, e.Turns[i].Step, s.Step)
	}
	assert.Empty(t, tl.Selfs)
	assert.Empty(t, tl.Turns)
	for _, n := range rv[0].Nodes {
		assert.Equal(t, n.State == "ready", n.VisitedBy != "", n.State)
	}
	for _, ed := range rv[0].Edges {
		assert.Empty(t, ed.Taken)
		assert.Equal(t, "edge", ed.Class, "no transition is known: none is marked taken or not")
	}
}

// A record whose transitions contradict each other or the binary's role
// is drawn all the same, the contradictions marked.
func TestTimelineOfAnInconsistentRecord(t *testing.T) {
	e := workerEpisode()
	e.Transitions = append(e.Transitions,
		TransitionView{K: 7, Step: 1, Seat: 0, Event: "revive", From: "dead", To: "ready"}, // out of step order, from a state it was not in
		TransitionView{K: 8, Step: 9, Seat: 2, Event: "jump", From: "idle", To: "busy"},    // past the episode's steps, undeclared
	)
	rv := roleViews(e, lookupOf(workerRole(t)))
	tl := rv[0].Timeline
	segs, _ := row(tl, 0)
	assert.Equal(t, []string{"idle", "ready<-start@0#0", "busy<-go@1#2", "done<-finish@2#4", "ready<-revive@1#7"}, segs)
	last := tl.Segs[0]
	for _, s := range tl.Segs {
		if s.Seat == 0 {
			last = s
		}
	}
	assert.Contains(t, last.Class, "broken")
	assert.Contains(t, last.Title, "inconsistent")
	segs, _ = row(tl, 2)
	assert.Equal(t, []string{"idle", "busy<-jump@9#8"}, segs)
	checkGeometry(t, tl)
	assert.Equal(t, []string{"dead --revive--> ready", "idle --jump--> busy"}, rv[0].Undeclared)
}

// Step numbers a damaged record may hold, however large or negative, cost
// neither memory nor time: a bounded number of labels, drawable rows.
func TestTimelineOfHugeSteps(t *testing.T) {
	e := workerEpisode()
	e.Transitions = append(e.Transitions, TransitionView{K: 7, Step: math.MaxInt, Seat: 2, Event: "start", From: "idle", To: "ready"})
	e.Turns = append(e.Turns, TurnView{N: 3, Seat: 2, Agent: "c", Role: "worker", Step: -5, State: "idle"})
	for _, tr := range []bool{true, false} {
		ep := *e
		if !tr {
			ep.Transitions = nil
			ep.Turns = append(slices.Clone(e.Turns), TurnView{N: 4, Seat: 2, Agent: "c", Role: "worker", Step: math.MaxInt, State: "ready"})
		}
		tl := roleViews(&ep, lookupOf(workerRole(t)))[0].Timeline
		assert.LessOrEqual(t, len(tl.Ticks), maxTicks+2)
		assert.Positive(t, tl.W)
		if tr {
			segs, _ := row(tl, 2)
			assert.Equal(t, []string{"idle", fmt.Sprintf("ready<-start@%d#7", math.MaxInt)}, segs)
			checkGeometry(t, tl)
		}
	}
}
