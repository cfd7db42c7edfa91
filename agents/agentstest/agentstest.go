// Package agentstest checks a role's compiled state machine against
// looplab/fsm itself: the oracle that agents.Machine must agree with.
//
// Verify fires every event of a role (and one it does not have) in every
// state, through agents.Machine and through a *fsm.FSM that looplab builds
// from the same declaration, under a range of synthetic callbacks on every
// callback key looplab knows (none; all passing; each one failing in turn;
// looplab's short forms; random subsets with random failures). It demands
// the same final state, the same class of error (none, looplab's
// NoTransitionError without error, InvalidEventError, UnknownEventError,
// CanceledError with the same cause, or a callback's error after the
// transition) and the same callback trace. The role's own callbacks are not
// run: they need an episode.
package agentstest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
)

// Check calls Verify and reports its errors on t.
func Check(t testing.TB, role *agents.Role) {
	t.Helper()
	if err := Verify(role); err != nil {
		t.Error(err)
	}
}

// ErrDisagree is wrapped by Verify's errors.
var ErrDisagree = errors.New("agents.Machine and looplab/fsm disagree")

// randomTrials is the number of random callback configurations tried per
// state and event.
const randomTrials = 12

// Verify runs the comparison and returns every disagreement, joined; nil
// when troupe and looplab agree everywhere. The role must validate.
func Verify(role *agents.Role) error {
	if err := role.Validate(); err != nil {
		return err
	}
	keys := callbackKeys(role)
	configs := []config{{name: "no callbacks"}, {name: "every callback passes", keys: keys}}
	for _, k := range keys {
		configs = append(configs, config{name: k + " fails", keys: keys, fail: []string{k}})
	}
	if short := shortForms(role, keys); short != nil {
		configs = append(configs, config{name: "short forms", keys: short})
		configs = append(configs, config{name: "short forms, the generic ones failing", keys: short, fail: []string{"before_event", "enter_state"}})
	}
	rng := rand.New(rand.NewPCG(uint64(len(keys)), 0x6167_656e_7473))
	for i := range randomTrials {
		c := config{name: fmt.Sprintf("random callbacks #%d", i)}
		for _, k := range keys {
			if rng.IntN(2) == 0 {
				c.keys = append(c.keys, k)
				if rng.IntN(4) == 0 {
					c.fail = append(c.fail, k)
				}
			}
		}
		configs = append(configs, c)
	}
	events := append(role.EventNames(), "no_such_event")
	var errs []error
	for _, c := range configs {
		for _, s := range role.States() {
			for _, ev := range events {
				if err := compare(role, c, s, ev); err != nil {
					errs = append(errs, fmt.Errorf("%w: role %q, %s, event %q in state %q: %w", ErrDisagree, role.Name, c.name, ev, s, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// config is one set of synthetic callbacks: keys are registered, and those
// in fail fail (cancel, in looplab's words) with an error naming them.
type config struct {
	name string
	keys []string
	fail []string
}

// callbackKeys lists every key looplab resolves for the role, in a fixed
// order.
func callbackKeys(role *agents.Role) []string {
	keys := []string{"before_event", "leave_state", "enter_state", "after_event"}
	for _, ev := range role.EventNames() {
		keys = append(keys, "before_"+string(ev), "after_"+string(ev))
	}
	for _, s := range statesInEvents(role) {
		keys = append(keys, "leave_"+s, "enter_"+s)
	}
	return keys
}

// statesInEvents are the states looplab knows: those its events mention.
func statesInEvents(role *agents.Role) []string {
	var states []string
	for _, d := range role.Events {
		for _, s := range append(slices.Clone(d.Src), d.Dst) {
			if !slices.Contains(states, s) {
				states = append(states, s)
			}
		}
	}
	return states
}

// shortForms is keys with enter_<state> written <state> and after_<event>
// written <event> where looplab reads them so; nil when none can be.
func shortForms(role *agents.Role, keys []string) []string {
	states := statesInEvents(role)
	var out []string
	changed := false
	for _, k := range keys {
		if s, ok := strings.CutPrefix(k, "enter_"); ok && k != "enter_state" && !prefixed(s) {
			out, changed = append(out, s), true
			continue
		}
		if ev, ok := strings.CutPrefix(k, "after_"); ok && k != "after_event" && !slices.Contains(states, ev) && !prefixed(ev) {
			out, changed = append(out, ev), true
			continue
		}
		out = append(out, k)
	}
	if !changed {
		return nil
	}
	return out
}

// prefixed reports whether a name reads as a long-form key.
func prefixed(name string) bool {
	for _, p := range []string{"before_", "leave_", "enter_", "after_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func failure(key string) error { return errors.New("callback " + key + " failed") }

// compare fires ev in state s through both machines under c.
func compare(role *agents.Role, c config, s agents.State, ev agents.Event) error {
	var trace, ref []string
	mine := agents.Callbacks{}
	theirs := fsm.Callbacks{}
	for _, k := range c.keys {
		fails := slices.Contains(c.fail, k)
		mine[k] = func(agents.Transition) error {
			trace = append(trace, k)
			if fails {
				return failure(k)
			}
			return nil
		}
		theirs[k] = func(_ context.Context, e *fsm.Event) {
			ref = append(ref, k)
			if fails {
				e.Cancel(failure(k))
			}
		}
	}
	r := &agents.Role{Name: role.Name, Initial: role.Initial, Events: role.Events, Terminal: role.Terminal, Acting: role.Acting, Callbacks: mine}
	if err := r.Validate(); err != nil {
		return fmt.Errorf("synthetic callbacks: %w", err)
	}
	m := r.NewMachine("agent")
	if err := m.SetState(s); err != nil {
		return err
	}
	f := fsm.NewFSM(string(s), role.Events, theirs)
	err := m.Fire(ev)
	refErr := f.Event(context.Background(), string(ev))
	var problems []string
	if got, want := m.State(), agents.State(f.Current()); got != want {
		problems = append(problems, fmt.Sprintf("troupe ends in %q, looplab in %q", got, want))
	}
	if got, want := classOf(err), refClass(refErr); got != want {
		problems = append(problems, fmt.Sprintf("troupe's error is %s (%v), looplab's %s (%v)", got, err, want, refErr))
	}
	if !slices.Equal(trace, ref) {
		problems = append(problems, fmt.Sprintf("troupe ran callbacks %v, looplab %v", trace, ref))
	}
	if p := unwrapProblem(err); p != "" {
		problems = append(problems, p)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// classOf names the class of Fire's error.
func classOf(err error) string {
	var te *agents.TransitionError
	var ce *agents.CallbackError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &te):
		return fmt.Sprintf("impossible (%T)", te.Err)
	case errors.As(err, &ce) && ce.Canceled():
		return "canceled: " + ce.Err.Error()
	case errors.As(err, &ce):
		return "failed: " + ce.Err.Error()
	}
	return fmt.Sprintf("unexpected %T", err)
}

// refClass names the class of looplab's Event error in classOf's terms.
func refClass(err error) string {
	var none fsm.NoTransitionError
	var canceled fsm.CanceledError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &none) && none.Err == nil:
		return "ok"
	case errors.As(err, &none):
		return "failed: " + none.Err.Error()
	case errors.As(err, &canceled):
		return "canceled: " + canceled.Err.Error()
	}
	switch err.(type) {
	case fsm.InvalidEventError, fsm.UnknownEventError:
		return fmt.Sprintf("impossible (%T)", err)
	}
	return "failed: " + err.Error() // a Cancel in enter_ or after_: e.Err
}

// unwrapProblem checks that Fire's error unwraps as its doc says.
func unwrapProblem(err error) string {
	var te *agents.TransitionError
	var ce *agents.CallbackError
	var invalid fsm.InvalidEventError
	var unknown fsm.UnknownEventError
	var canceled fsm.CanceledError
	switch {
	case errors.As(err, &te):
		if !errors.Is(err, agents.ErrImpossibleTransition) || !(errors.As(err, &invalid) || errors.As(err, &unknown)) {
			return fmt.Sprintf("%v does not unwrap to ErrImpossibleTransition and looplab's error", err)
		}
	case errors.As(err, &ce) && ce.Canceled():
		if !errors.Is(err, agents.ErrCanceled) || !errors.As(err, &canceled) || !errors.Is(err, ce.Err) {
			return fmt.Sprintf("%v does not unwrap to ErrCanceled, fsm.CanceledError and its cause", err)
		}
	case errors.As(err, &ce):
		if !errors.Is(err, ce.Err) || errors.Is(err, agents.ErrCanceled) {
			return fmt.Sprintf("%v does not unwrap to its cause alone", err)
		}
	}
	return ""
}
