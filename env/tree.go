package env

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/protocol"
)

// treeSeedStream is the stream a candidate's policy seed is drawn from:
// candidate c > 0 of a turn whose seed is s plays with
// seeds.Mix2(s, treeSeedStream, c); candidate 0 plays with s itself, so
// that it is the answer the turn would get without tree sampling.
const treeSeedStream = 0x7472 // "tr"

// CandidateSeed returns the policy seed of candidate c of a turn whose seed
// is turnSeed (episode.Candidate.Seed).
func CandidateSeed(turnSeed uint64, c int) uint64 {
	if c == 0 {
		return turnSeed
	}
	return seeds.Mix2(turnSeed, treeSeedStream, uint64(c))
}

// ValidateTree checks a tree-sampling specification against the scenario:
// at least two candidates, a finite alpha, and roles the scenario has.
func ValidateTree(t *episode.Tree, info *Info) error {
	if t == nil {
		return nil
	}
	if t.K < 2 {
		return fmt.Errorf("%w: tree sampling draws %d candidates per turn: want at least 2", ErrBadConfig, t.K)
	}
	if math.IsNaN(t.Alpha) || math.IsInf(t.Alpha, 0) {
		return fmt.Errorf("%w: tree sampling's alpha is %v: want a finite number", ErrBadConfig, t.Alpha)
	}
	for _, r := range t.Roles {
		if !slices.ContainsFunc(info.Roles, func(role *agents.Role) bool { return role.Name == r }) {
			return fmt.Errorf("%w: tree sampling names role %q, which %s does not have", ErrBadConfig, r, info.Name)
		}
	}
	return nil
}

// PlayTree plays the episode of setup with tree sampling (setup.Tree, which
// must not be nil), driving a stepped Episode with setup's policies, and
// returns its record, as Engine.Run does for a run without tree sampling.
//
// At each step, every acting seat's policy is asked once, with the turn's
// seed. A tree-sampled seat (one whose turns are emitted, of one of
// Tree.Roles when it names any) is asked K-1 times more from the same
// observation, candidate c with the seed CandidateSeed(turn's seed, c).
// Each candidate is scored by a fork of the episode given it, played to
// its end with setup's policies: its Team reward (the seat's side's, in a
// scenario with teams) and the seat's own score
// (Local, 0 for a scenario without agent scores), mixed into
// Reward = Alpha·Team + Local, as AT-GRPO (Zhao et al., arXiv 2510.11062)
// mixes them. The main line goes on with the candidate of the highest
// Reward, the lowest index among equals, and every candidate is recorded
// (Record.Candidates) with the record of the continuation that scored it
// (Candidate.Fork), from which allocators credit it; each becomes a
// sample.
//
// Without Tree.Joint (AT-GRPO), the tree-sampled seats of a step are
// sampled one after the other in seat order, a fork giving the seats
// before the sampled one their chosen moves and the ones after it their
// first answers. With Joint (MAGRPO, Liu et al., arXiv 2508.04652),
// candidate c of a step is the joint action in which every tree-sampled
// seat plays its c-th answer, scored by one fork, and the joint candidate
// of the highest mean Reward over the step's tree-sampled seats is kept.
//
// The scores are those of continuations, not of the step alone: a
// scenario is scored once, at its end (Game.Score), so a candidate's
// value is what the episode is worth after it, with the run's policies
// playing on. For a one-step game that is the candidate's immediate
// reward. Everything is a function of the seeds and the policies'
// answers: the record is the same whatever ParallelPolicies (which asks
// the candidates, and plays their forks, concurrently).
//
// A policy that fails (an error, a panic) aborts the episode as Engine.Run
// would; so does a continuation that failed, naming its candidate.
func PlayTree(ctx context.Context, setup Setup) *episode.Record {
	tr := setup.Tree
	if err := ValidateTree(tr, setup.Scenario.Info()); err != nil || tr == nil {
		if err == nil {
			err = fmt.Errorf("%w: no tree", ErrBadConfig)
		}
		return failedRecord(setup, err)
	}
	if setup.Policy == nil {
		return failedRecord(setup, fmt.Errorf("%w: no policy", ErrBadSeats))
	}
	stepped := setup
	stepped.Drive = Drive{} // this function is the episode's driver
	ep, err := NewEpisode(stepped)
	if err != nil {
		return failedRecord(setup, err)
	}
	runCtx := ctx
	if setup.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, setup.Timeout)
		defer cancel()
	}
	d := &treeDriver{ctx: runCtx, setup: &setup, tree: tr}
	var cands []episode.Candidate
	for !ep.Done() {
		if ctx.Err() != nil {
			ep.Stop(protocol.StatusAborted, EndInterrupted, context.Cause(ctx))
			break
		}
		if runCtx.Err() != nil {
			ep.Stop(protocol.StatusTruncated, EndDeadline, nil)
			break
		}
		step, err := d.step(ep)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				ep.Stop(protocol.StatusAborted, EndInterrupted, context.Cause(ctx))
			case runCtx.Err() != nil:
				ep.Stop(protocol.StatusTruncated, EndDeadline, nil)
			case errors.Is(err, ErrPolicyPanic), errors.Is(err, errContinuation):
				ep.Stop(protocol.StatusFailed, EndGameError, err)
			default:
				ep.Stop(protocol.StatusAborted, EndPolicyError, err)
			}
			break
		}
		cands = append(cands, step...)
	}
	rec := ep.Record()
	t := *tr
	rec.Tree = &t
	// Only the candidates of turns the record holds: a step whose moves
	// were all given is recorded, whatever happened next.
	rec.Candidates = slices.DeleteFunc(cands, func(c episode.Candidate) bool { return c.Turn >= len(rec.Turns) })
	return rec
}

// errContinuation marks a candidate whose continuation did not finish.
var errContinuation = errors.New("tree sampling: a candidate's continuation did not finish")

// failedRecord is the record of an episode that could not start.
func failedRecord(setup Setup, err error) *episode.Record {
	return &episode.Record{
		Scenario: setup.Scenario.Info().Name, Params: setup.Params.raw, Seed: setup.Seed, PolicySeed: setup.PolicySeed,
		Index: setup.Index, RolloutID: setup.RolloutID, GroupIndex: setup.GroupIndex,
		Status: protocol.StatusFailed, End: EndGameError, Err: err.Error(),
	}
}

// treeDriver drives one tree-sampled episode.
type treeDriver struct {
	ctx   context.Context
	setup *Setup
	tree  *episode.Tree
}

// sampled reports whether seat i of ep is tree-sampled.
func (d *treeDriver) sampled(ep *Episode, i int) bool {
	if !ep.e.emit[i] {
		return false
	}
	return len(d.tree.Roles) == 0 || slices.Contains(d.tree.Roles, ep.Seats()[i].Role)
}

// ask asks seat's policy for obs, turning a panic into an error.
func (d *treeDriver) ask(ep *Episode, obs *agents.Observation, seat int) (a agents.Action, err error) {
	// The episode's engine asked setup.Policy for every seat when it
	// seated them (and failed the episode for a seat without one).
	p := ep.e.base[seat]
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: agent %q turn %d: %v", ErrPolicyPanic, obs.Agent, obs.Turn, r)
		}
	}()
	a, err = p.Act(d.ctx, obs)
	if err != nil {
		err = fmt.Errorf("agent %q turn %d: %w", obs.Agent, obs.Turn, err)
	}
	return a, err
}

// each runs f(0..n-1), concurrently under ParallelPolicies, and returns the
// first error in index order: the same error whatever the concurrency.
func (d *treeDriver) each(n int, f func(k int) error) error {
	if !d.setup.ParallelPolicies || n < 2 {
		for k := range n {
			if err := f(k); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() { errs[k] = f(k) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// step plays one step of ep with tree sampling and returns the candidates
// drawn for it, with their turns' indexes in the record.
func (d *treeDriver) step(ep *Episode) ([]episode.Candidate, error) {
	pending := slices.Clone(ep.Pending())
	seats := slices.Clone(ep.actors)
	first := len(ep.rec.Turns)
	n := len(pending)
	// answers[k][c]: candidate c of actor k; one answer for the seats not
	// sampled.
	answers := make([][]agents.Action, n)
	var sampled []int // actors' positions
	for k := range pending {
		if d.sampled(ep, seats[k]) {
			sampled = append(sampled, k)
			answers[k] = make([]agents.Action, d.tree.K)
		} else {
			answers[k] = make([]agents.Action, 1)
		}
	}
	type ask struct{ k, c int }
	var asks []ask
	for k := range pending {
		for c := range answers[k] {
			asks = append(asks, ask{k, c})
		}
	}
	if err := d.each(len(asks), func(j int) error {
		k, c := asks[j].k, asks[j].c
		obs := pending[k].Observation
		obs.Seed = CandidateSeed(obs.Seed, c)
		a, err := d.ask(ep, &obs, seats[k])
		answers[k][c] = a
		return err
	}); err != nil {
		return nil, err
	}
	chosen := make([]int, n) // per actor: its chosen candidate
	moves := func(joint int) []agents.Action {
		out := make([]agents.Action, n)
		for k := range n {
			c := chosen[k]
			if joint >= 0 && len(answers[k]) > 1 {
				c = joint
			}
			out[k] = answers[k][c]
		}
		return out
	}
	var cands []episode.Candidate
	record := func(k int, forks []*episode.Record, best int) {
		for c := range d.tree.K {
			a := answers[k][c]
			// The seat's own side's reward, in a scenario with teams.
			score := &forks[c].Score
			team, local := score.Of(ep.Seats()[seats[k]].Team), 0.0
			if i := seats[k]; i < len(score.Agents) {
				local = score.Agents[i]
			}
			cands = append(cands, episode.Candidate{
				Turn: first + k, Index: c, Seed: CandidateSeed(pending[k].Seed, c),
				Action: a.Text, Generation: generationOf(a.Generation), Invalid: a.Invalid, Notes: a.Notes,
				Team: team, Local: local, Reward: d.tree.Alpha*team + local, Chosen: c == best,
				Fork: forks[c],
			})
		}
	}
	if len(sampled) > 0 && d.tree.Joint {
		forks, err := d.score(ep, func(c int) []agents.Action { return moves(c) }, sampled, seats)
		if err != nil {
			return nil, err
		}
		best, bestR := 0, math.Inf(-1)
		for c := range d.tree.K {
			r := 0.0
			for _, k := range sampled {
				r += d.reward(ep, forks[c].Score, seats[k])
			}
			if r /= float64(len(sampled)); r > bestR {
				best, bestR = c, r
			}
		}
		for _, k := range sampled {
			chosen[k] = best
			record(k, forks, best)
		}
	} else {
		for _, k := range sampled {
			forks, err := d.score(ep, func(c int) []agents.Action {
				m := moves(-1)
				m[k] = answers[k][c]
				return m
			}, []int{k}, seats)
			if err != nil {
				return nil, err
			}
			best, bestR := 0, math.Inf(-1)
			for c := range d.tree.K {
				if r := d.reward(ep, forks[c].Score, seats[k]); r > bestR {
					best, bestR = c, r
				}
			}
			chosen[k] = best
			record(k, forks, best)
		}
	}
	// The candidates in the record's order: by turn, then index.
	slices.SortStableFunc(cands, func(a, b episode.Candidate) int { return a.Turn - b.Turn })
	if err := ep.Step(moves(-1)...); err != nil {
		return nil, err
	}
	return cands, nil
}

// reward is the mixed reward of seat i in the continuation scored s: its
// team's reward (its side's, in a scenario with teams) and its own score.
func (d *treeDriver) reward(ep *Episode, s episode.Score, i int) float64 {
	local := 0.0
	if i < len(s.Agents) {
		local = s.Agents[i]
	}
	return d.tree.Alpha*s.Of(ep.Seats()[i].Team) + local
}

// generationOf is the generation a turn records of g: nil for one that
// says nothing.
func generationOf(g *agents.Generation) *agents.Generation {
	if g != nil && *g == (agents.Generation{}) {
		return nil
	}
	return g
}

// score plays, for each candidate c of the step, a fork of ep given the
// moves of(c) to its end with the policies, and returns their records
// (episode.Candidate.Fork).
func (d *treeDriver) score(ep *Episode, of func(c int) []agents.Action, sampled, seats []int) ([]*episode.Record, error) {
	forks := make([]*episode.Record, d.tree.K)
	err := d.each(d.tree.K, func(c int) error {
		f, err := ep.Fork()
		if err != nil {
			return err
		}
		if err := f.Step(of(c)...); err != nil {
			return err
		}
		if err := d.playOut(f); err != nil {
			return err
		}
		rec := f.Record()
		if !rec.Finished() {
			who := make([]string, len(sampled))
			for j, k := range sampled {
				who[j] = ep.Seats()[seats[k]].ID
			}
			return fmt.Errorf("%w: candidate %d of %v at step %d ended %s (%s): %s", errContinuation, c, who, ep.Time(), rec.Status, rec.End, rec.Err)
		}
		forks[c] = rec
		return nil
	})
	return forks, err
}

// playOut plays f to its end with the policies, each turn's answer its
// first (candidate 0's).
func (d *treeDriver) playOut(f *Episode) error {
	for !f.Done() {
		if err := d.ctx.Err(); err != nil {
			return err
		}
		// The pending seats, read before the moves: the last one applies
		// the step.
		for _, o := range f.Pending() {
			obs, i := o.Observation, o.Seat
			a, err := d.ask(f, &obs, i)
			if err != nil {
				f.Stop(protocol.StatusAborted, EndPolicyError, err)
				return err
			}
			if err := f.Act(i, a); err != nil {
				return err
			}
		}
	}
	return nil
}
