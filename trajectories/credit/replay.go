package credit

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// DefaultBudget is the default cap on the re-simulations of one episode.
const DefaultBudget = 1 << 16

// Sim says how the counterfactual allocators re-simulate an episode
// (through Episode.Replay).
//
// In the default "frozen" mode, the agents a counterfactual does not change
// replay their recorded actions, turn by turn (and, past the end of the
// record, ask their policies with the episode's seeds). With Resimulate,
// their policies are asked again at every turn, with the same seeds, so
// they may react to the change.
//
// Either way v(N), the value of the episode as it was played, is its
// recorded team reward G(z): it is never re-simulated.
type Sim struct {
	Resimulate bool
	// Budget caps the re-simulations of one episode; 0 means
	// DefaultBudget. What happens when an episode needs more depends on
	// the allocator: the exact ones fail with ErrBudget, the sampling ones
	// use fewer samples and say so in a note (NoteBudgetExhausted).
	Budget int
	// Parallel is how many re-simulations run at once; 0 means GOMAXPROCS.
	// It changes the speed only: values do not depend on it.
	Parallel int
	// Implied says that Resimulate is the scenario's declared mode
	// (env.CounterfactualSpec.Resimulate, applied by ParseDefaultingSim),
	// not a choice of the spec: the allocator's name then leaves sim= out,
	// as its user typed it, and says sim=frozen where the spec asked for
	// that against the scenario's mode. Its dict reward key is what its
	// user typed.
	Implied bool
}

func (s Sim) budget() int {
	if s.Budget <= 0 {
		return DefaultBudget
	}
	return s.Budget
}

func (s Sim) parallel() int {
	if s.Parallel <= 0 {
		return runtime.GOMAXPROCS(0)
	}
	return s.Parallel
}

// params returns the parameters of a name that Sim contributes.
func (s Sim) params() []kv {
	mode := "frozen"
	if s.Resimulate {
		mode = "resimulate"
	}
	def := "frozen"
	if s.Implied {
		def = "resimulate"
	}
	return []kv{{"sim", mode, def}, {"budget", strconv.Itoa(s.budget()), strconv.Itoa(DefaultBudget)}}
}

// Presence says what an agent outside a coalition does.
type Presence int

const (
	// Absent agents take no part (the scenario must accept absent agents:
	// env.CounterfactualSpec.AbsentOK).
	Absent Presence = iota
	// Null agents play their role's null action at every turn (the
	// scenario must declare one: env.CounterfactualSpec.NullAction).
	Null
)

var presenceNames = []string{"absent", "null"}

// String returns "absent" or "null", the values of the mode parameter.
func (p Presence) String() string {
	if p < 0 || int(p) >= len(presenceNames) {
		return fmt.Sprintf("Presence(%d)", int(p))
	}
	return presenceNames[p]
}

func (p Presence) needs() Needs {
	return Needs{Replay: true, Absent: p == Absent, Null: p == Null}
}

// without returns the counterfactual in which the given seats are out of
// the coalition.
func (s Sim) without(p Presence, out []int) episode.Counterfactual {
	cf := episode.Counterfactual{Resimulate: s.Resimulate, TeamOnly: true}
	if p == Null {
		cf.Null = out
	} else {
		cf.Absent = out
	}
	return cf
}

// replace returns the counterfactual in which seat i plays action.
func (s Sim) replace(i int, action string) episode.Counterfactual {
	return episode.Counterfactual{Resimulate: s.Resimulate, TeamOnly: true, Replace: map[int]string{i: action}}
}

// inlineFor is how long run re-simulates on the calling goroutine before
// parallel workers take the rest. Starting workers costs goroutines,
// stacks and wake-ups, more than a whole episode's counterfactuals cost
// when the finished game rescores them in O(1) (env.Rescorer); a batch of
// real replays is past this in a few replays, and then fans out.
const inlineFor = 100 * time.Microsecond

// clockEvery is how many re-simulations run between two looks at the
// clock (and the context) on the calling goroutine, after the first one:
// a replay that alone takes longer than inlineFor fans the rest out at
// once.
const clockEvery = 16

// run re-simulates ep under the counterfactuals cf(0), ..., cf(n-1) and
// returns their team rewards, in order: of each, the reward of the team
// cf names beside it (Score.Of; 0 in a scenario without teams). It takes them in index order on
// the calling goroutine, for as long as they have taken less than
// inlineFor; then parallel workers (an errgroup) take the rest, still in
// index order. A failure stops the workers from taking more, and the error
// of the lowest failing index is returned: an error every replay shares (a
// scenario that declares no absence) costs one replay. Neither the values
// nor the error depend on how the work was split.
func (s Sim) run(ctx context.Context, ep *trajectories.Episode, n int, cf func(k int) (episode.Counterfactual, int)) ([]float64, error) {
	return s.runInto(ctx, make([]float64, n), ep, n, cf)
}

// runInto is run, writing the values into out, of length n.
func (s Sim) runInto(ctx context.Context, out []float64, ep *trajectories.Episode, n int, cf func(k int) (episode.Counterfactual, int)) ([]float64, error) {
	// An episode that cannot be replayed is an error even when it needs
	// no replay, so that the allocator fails the same way on every episode.
	if ep.Replay == nil {
		return nil, fmt.Errorf("episode %d of %s: %w", ep.Index, ep.Scenario, ErrNoReplay)
	}
	one := func(k int) error {
		c, team := cf(k)
		score, err := ep.Replay.Replay(ctx, c)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("episode %d of %s: re-simulation with %s: %w", ep.Index, ep.Scenario, describe(ep, c), err)
		}
		out[k] = score.Of(team)
		return nil
	}
	start := time.Now()
	k := 0
	for k < n {
		if err := one(k); err != nil {
			return nil, err
		}
		k++
		if k == 1 || k%clockEvery == 0 {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if s.parallel() > 1 && time.Since(start) > inlineFor {
				break
			}
		}
	}
	if k < n {
		if err := s.fanOut(ctx, k, n, one); err != nil {
			return nil, err
		}
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return out, nil
}

// fanOut runs one(k) for k from first to n-1 on parallel workers, which
// take the indexes in increasing order, and returns the error of the lowest
// failing index.
func (s Sim) fanOut(ctx context.Context, first, n int, one func(k int) error) error {
	var (
		next   atomic.Int64
		failed atomic.Bool
		g      errgroup.Group
	)
	next.Store(int64(first))
	type failure struct {
		k   int
		err error
	}
	fails := make([]failure, min(s.parallel(), n-first))
	for w := range fails {
		g.Go(func() error {
			for !failed.Load() && ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= n {
					return nil
				}
				if err := one(k); err != nil {
					failed.Store(true)
					fails[w] = failure{k, err}
					return err
				}
			}
			return nil
		})
	}
	if g.Wait() == nil || ctx.Err() != nil {
		return nil // the caller reports a cancellation
	}
	// Wait returns whichever failure came first in time; report the one
	// of the lowest index instead. Indexes are taken in increasing order
	// and every index taken is tried, so the lowest failing index of all
	// was tried before any other failure could stop the workers: the error
	// does not depend on timing.
	lowest := failure{k: n}
	for _, f := range fails {
		if f.err != nil && f.k < lowest.k {
			lowest = f
		}
	}
	return lowest.err
}

// runList is run over a list of counterfactuals, the k-th valued by the
// reward of team teams[k].
func (s Sim) runList(ctx context.Context, ep *trajectories.Episode, cfs []episode.Counterfactual, teams []int) ([]float64, error) {
	return s.run(ctx, ep, len(cfs), func(k int) (episode.Counterfactual, int) { return cfs[k], teams[k] })
}

// describe names a counterfactual for an error message.
func describe(ep *trajectories.Episode, cf episode.Counterfactual) string {
	seats := func(idx []int) string {
		if len(idx) > 4 {
			return strconv.Itoa(len(idx)) + " seats"
		}
		names := make([]string, len(idx))
		for j, i := range idx {
			names[j] = strconv.Itoa(i)
			if i >= 0 && i < len(ep.Seats) {
				names[j] = strconv.Quote(ep.Seats[i].ID)
			}
		}
		return strings.Join(names, ", ")
	}
	var parts []string
	if len(cf.Absent) > 0 {
		parts = append(parts, seats(cf.Absent)+" absent")
	}
	if len(cf.Null) > 0 {
		parts = append(parts, seats(cf.Null)+" playing the null action")
	}
	for i, a := range cf.Replace {
		parts = append(parts, seats([]int{i})+" playing "+strconv.Quote(a))
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing changed")
	}
	if cf.Resimulate {
		parts = append(parts, "the others re-asked")
	}
	return strings.Join(parts, ", ")
}

// emitted returns, per seat, whether it has samples: the seats whose
// credit is worth a re-simulation.
func emitted(ep *trajectories.Episode, seats []int) []bool {
	return emittedInto(nil, ep, seats)
}

// emittedInto is emitted, written into dst's array when it is large
// enough.
func emittedInto(dst []bool, ep *trajectories.Episode, seats []int) []bool {
	out := sized(dst, len(ep.Seats))
	clear(out)
	for _, i := range seats {
		out[i] = true
	}
	return out
}

// roleActions returns, per role, the distinct actions its seats played in
// ep and how often, most frequent first (ties by text).
func roleActions(ep *trajectories.Episode) map[string][]actionCount {
	counts := map[string]map[string]int{}
	for k := range ep.Turns {
		a := &ep.Turns[k]
		if a.Seat < 0 || a.Seat >= len(ep.Seats) {
			continue
		}
		role := ep.Seats[a.Seat].Role
		if counts[role] == nil {
			counts[role] = map[string]int{}
		}
		counts[role][a.Action]++
	}
	out := make(map[string][]actionCount, len(counts))
	for role, m := range counts {
		list := make([]actionCount, 0, len(m))
		for text, n := range m {
			list = append(list, actionCount{text, n})
		}
		sortActions(list)
		out[role] = list
	}
	return out
}

type actionCount struct {
	text string
	n    int
}

// sortActions orders actions most frequent first, ties by text.
func sortActions(list []actionCount) {
	slices.SortFunc(list, func(a, b actionCount) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.text, b.text))
	})
}

// seatActions returns every seat's recorded actions, in turn order.
func seatActions(ep *trajectories.Episode) [][]string {
	out := make([][]string, len(ep.Seats))
	for k := range ep.Turns {
		if a := &ep.Turns[k]; a.Seat >= 0 && a.Seat < len(out) {
			out[a.Seat] = append(out[a.Seat], a.Action)
		}
	}
	return out
}

// playedOnly reports whether actions is not empty and holds action only:
// replacing a seat's actions by action then changes nothing.
func playedOnly(actions []string, action string) bool {
	for _, a := range actions {
		if a != action {
			return false
		}
	}
	return len(actions) > 0
}
