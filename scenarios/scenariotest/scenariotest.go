// Package scenariotest is a test harness for scenarios, built-in or a user's
// own, in the spirit of net/http/httptest: one call checks that a scenario
// keeps the contracts the rest of troupe relies on.
//
//	func TestScenario(t *testing.T) {
//		scenariotest.Check(t, myscenario.New(), scenariotest.Options{
//			Params: []map[string]string{{}, {"players": "5"}},
//		})
//	}
//
// Check plays every parameter set with every named policy over several
// seeds and asserts that the scenario's Info is valid and stable, its roles'
// diagrams render, every episode completes by its own rules with finite
// scores (and finite episode metrics, for an env.EpisodeMetricer), every
// sample passes protocol.ValidateRollout, an episode is the
// same when played twice, when replayed from its recorded actions and when
// re-simulated by its Replayer, counterfactual replays work where the
// scenario declares them (each seat absent or playing its null action, and
// every seat absent: the empty coalition), every counterfactual allocator
// of trajectories/credit the scenario supports gives finite credit on a
// few episodes (exact and Monte Carlo Shapley shares adding up to
// v(N) - v(∅)), and a run's JSONL output is byte-identical at concurrency
// 1 and 4 (the second run recycling its records and, for a Renewer, its
// games). Golden compares text with a golden file, and
// CheckDoc keeps a package doc's state diagrams in step with its roles.
package scenariotest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/finite"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// The findings Verify reports, each wrapped with the context that produced
// it (parameters, policy, seed), so a test can tell them apart with
// errors.Is.
var (
	ErrInfo             = errors.New("scenariotest: bad scenario definition")
	ErrPolicy           = errors.New("scenariotest: policy cannot be built")
	ErrEpisode          = errors.New("scenariotest: episode did not complete")
	ErrSample           = errors.New("scenariotest: bad sample")
	ErrTransitions      = errors.New("scenariotest: the record's transitions do not match its turns")
	ErrNondeterministic = errors.New("scenariotest: same seed, different episode")
	ErrReplay           = errors.New("scenariotest: replay differs from the episode")
	ErrCounterfactual   = errors.New("scenariotest: counterfactual replay failed")
	ErrCredit           = errors.New("scenariotest: counterfactual allocator failed")
	ErrConcurrency      = errors.New("scenariotest: output depends on concurrency")
	ErrPublicView       = errors.New("scenariotest: the scenario declares a public view, but its seats see different views")
	ErrMetrics          = errors.New("scenariotest: bad episode metrics")
	ErrFeatures         = errors.New("scenariotest: bad numeric observation")
)

// defaultSeeds is how many scenario seeds (1, 2, ...) Check plays when
// Options.Seeds is nil.
const defaultSeeds = 8

// Options tune Check and Verify. The zero value checks the default
// parameters with every policy the scenario names, over seeds 1 to 8.
type Options struct {
	// Params are the parameter sets to check, each a name-to-text map as
	// the command line gives them; nil checks the defaults only. The empty
	// map is the defaults too.
	Params []map[string]string
	// Seeds are the scenario seeds each policy is played with; nil means
	// 1 to 8. An empty, non-nil list plays no single episodes: only the
	// runs are compared.
	Seeds []uint64
	// Policies names the scenario's policies to play, every role playing
	// the named one; nil plays "random" and every policy of Info.Policies,
	// an empty, non-nil list none of them (only Play's).
	Policies []string
	// Play adds policy assignments of the test's own (a scripted opponent,
	// a mixed pairing), played like the named ones, in name order.
	Play map[string]env.PolicyFor
	// Limits bound every episode; the zero value means 10,000 steps, so a
	// scenario that never ends fails instead of hanging.
	Limits env.Limits
	// AllowTruncated accepts episodes that Limits cut short. Without it,
	// every episode must end by the scenario's own rules.
	AllowTruncated bool
	// RunEpisodes is the size of the runs compared at concurrency 1 and 4,
	// played in groups of 2 with the first policy; 0 means 12.
	RunEpisodes int
	// CounterfactualSeats bounds how many seats, from the first, are
	// replayed absent and with their null action; 0 means 8.
	CounterfactualSeats int
	// CreditEpisodes is how many episodes (the first seeds, with the first
	// policy) of each parameter set the counterfactual allocators are run
	// on; 0 means 2, a negative value none.
	CreditEpisodes int
}

// Check runs Verify and reports each finding with t.Errorf.
func Check(t testing.TB, sc env.Scenario, opts Options) {
	t.Helper()
	err := Verify(t.Context(), sc, opts)
	if err == nil {
		return
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			t.Errorf("%v", e)
		}
		return
	}
	t.Errorf("%v", err)
}

// Verify checks sc as Check does and returns every finding, joined with
// errors.Join; nil means the scenario passed. For each parameter set and
// policy it stops at the first seed that fails, so one bug is reported
// once per pairing rather than once per seed.
func Verify(ctx context.Context, sc env.Scenario, opts Options) error {
	info := sc.Info()
	if err := checkInfo(sc, info); err != nil {
		return err // nothing can be played with a broken definition
	}
	sets := opts.Params
	if sets == nil {
		sets = []map[string]string{{}}
	}
	var errs []error
	for _, given := range sets {
		p, err := info.ParseParams(given)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: params %s: %w", ErrInfo, label(given), err))
			continue
		}
		assigned, err := plays(sc, p, opts)
		if err != nil {
			errs = append(errs, fmt.Errorf("params %s: %w", label(given), err))
			continue
		}
		for _, pl := range assigned {
			for _, seed := range seedList(opts.Seeds) {
				if err := checkEpisode(ctx, sc, p, pl, seed, opts); err != nil {
					errs = append(errs, fmt.Errorf("params %s, policy %s, seed %d: %w", label(given), pl.name, seed, err))
					break
				}
			}
		}
		if len(assigned) > 0 {
			if err := checkCredit(ctx, sc, p, assigned[0], opts); err != nil {
				errs = append(errs, fmt.Errorf("params %s, policy %s: %w", label(given), assigned[0].name, err))
			}
			if err := checkRun(ctx, sc, p, assigned[0], opts); err != nil {
				errs = append(errs, fmt.Errorf("params %s, policy %s: %w", label(given), assigned[0].name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func seedList(given []uint64) []uint64 {
	if given != nil {
		return given
	}
	out := make([]uint64, defaultSeeds)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

// label renders a parameter set for messages, sorted.
func label(given map[string]string) string {
	if len(given) == 0 {
		return "{defaults}"
	}
	parts := make([]string, 0, len(given))
	for _, k := range slices.Sorted(maps.Keys(given)) {
		parts = append(parts, k+"="+given[k])
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// checkInfo validates the definition, its stability (info is what an
// earlier call of sc.Info returned) and its diagrams.
func checkInfo(sc env.Scenario, info *env.Info) error {
	if err := info.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInfo, err)
	}
	if a, b := fingerprint(info), fingerprint(sc.Info()); a != b {
		return fmt.Errorf("%w: Info() returned different definitions on two calls:\n%s\nthen\n%s", ErrInfo, a, b)
	}
	for _, r := range info.Roles {
		for _, kind := range []agents.DiagramKind{agents.Mermaid, agents.Graphviz} {
			d, err := r.Diagram(kind)
			if err != nil {
				return fmt.Errorf("%w: role %q: diagram: %w", ErrInfo, r.Name, err)
			}
			if !strings.Contains(d, string(r.Initial)) {
				return fmt.Errorf("%w: role %q: diagram does not show initial state %q:\n%s", ErrInfo, r.Name, r.Initial, d)
			}
		}
	}
	return nil
}

// fingerprint renders what Info must keep from call to call.
func fingerprint(info *env.Info) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%v|%v|%s\n", info.Name, info.Summary, info.Schedule, info.PolicyNames(), info.DefaultPolicy)
	for _, r := range info.Roles {
		d, _ := r.Diagram(agents.Mermaid)
		fmt.Fprintf(&b, "role %s %v\n%s", r.Name, r.Terminal, d)
	}
	for _, p := range info.Params {
		fmt.Fprintf(&b, "param %+v\n", p)
	}
	return b.String()
}

// assignment is a named policy assignment.
type assignment struct {
	name   string
	policy env.PolicyFor
}

func plays(sc env.Scenario, p env.Params, opts Options) ([]assignment, error) {
	info := sc.Info()
	names := opts.Policies
	if names == nil {
		names = info.PolicyNames()
	}
	var out []assignment
	for _, name := range names {
		pf, err := NamedPolicy(sc, p, name)
		if err != nil {
			return nil, err
		}
		out = append(out, assignment{name: name, policy: pf})
	}
	for _, name := range slices.Sorted(maps.Keys(opts.Play)) {
		out = append(out, assignment{name: name, policy: opts.Play[name]})
	}
	return out, nil
}

// NamedPolicy builds the policy a user names, for every role of sc: one
// of its Info.Policies, made once per role, or "random". An unknown name
// wraps ErrPolicy and lists the known ones.
func NamedPolicy(sc env.Scenario, p env.Params, name string) (env.PolicyFor, error) {
	policy, _, err := sc.Info().AssignPolicies(env.PolicyRequest{Scenario: sc, Params: p, Name: name}, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	return policy, nil
}

func limits(opts Options) env.Limits {
	if opts.Limits == (env.Limits{}) {
		return env.Limits{MaxSteps: 10_000}
	}
	return opts.Limits
}

// episodeSetup is the setup Check plays seed with.
func episodeSetup(sc env.Scenario, p env.Params, pl assignment, seed uint64, opts Options) env.Setup {
	return env.Setup{
		Play:       env.Play{Scenario: sc, Params: p, Policy: pl.policy, Limits: limits(opts)},
		Seed:       seed,
		PolicySeed: seeds.Mix(seed, 0xe7),
		Index:      int64(seed),
		RolloutID:  int64(seed) + 1000,
		GroupIndex: int64(seed),
	}
}

// checkEpisode plays one seed and checks the episode, its samples, its
// determinism and its replays.
func checkEpisode(ctx context.Context, sc env.Scenario, p env.Params, pl assignment, seed uint64, opts Options) error {
	setup := episodeSetup(sc, p, pl, seed, opts)
	ep := runEpisode(ctx, setup)
	if err := checkOutcome(ep, opts); err != nil {
		return err
	}
	if err := checkSamples(ep); err != nil {
		return err
	}
	if err := checkTransitions(sc.Info(), &ep.Record); err != nil {
		return err
	}
	if err := checkMetrics(sc, p, &ep.Record); err != nil {
		return err
	}
	want := trajectories.Transcript(ep)
	if got := trajectories.Transcript(runEpisode(ctx, setup)); got != want {
		return fmt.Errorf("%w: the second play differs: %s", ErrNondeterministic, FirstDifference(want, got))
	}
	if err := checkPublicView(ctx, sc, setup, ep); err != nil {
		return err
	}
	replay := setup
	replay.Policy = recorded(ep)
	if err := checkFeatures(ctx, sc, p, replay); err != nil {
		return err
	}
	if want, got := gameTranscript(ep), gameTranscript(runEpisode(ctx, replay)); got != want {
		return fmt.Errorf("%w: replaying the recorded actions gives another episode, so the game depends on more than the moves: %s",
			ErrReplay, FirstDifference(want, got))
	}
	return checkReplayer(ctx, sc, ep, opts)
}

// checkMetrics checks the episode metrics of a scenario that has them
// (env.EpisodeMetricer): finite numbers, one per name.
func checkMetrics(sc env.Scenario, p env.Params, rec *episode.Record) (err error) {
	m, ok := sc.(env.EpisodeMetricer)
	if !ok {
		return nil
	}
	names := m.MetricNames(p)
	metrics := make([]float64, len(names))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: EpisodeMetrics panicked with %d names: %v", ErrMetrics, len(names), r)
		}
	}()
	m.EpisodeMetrics(p, rec, metrics)
	if err := env.CheckMetrics(names, metrics); err != nil {
		return fmt.Errorf("%w: %w", ErrMetrics, err)
	}
	return nil
}

// checkPublicView checks the claim of a scenario that declares
// Info.PublicView: the episode played with every actor observed on its
// own (Setup.ObserveEachSeat) is the same, view for view and legal action
// for legal action.
func checkPublicView(ctx context.Context, sc env.Scenario, setup env.Setup, ep *trajectories.Episode) error {
	if !sc.Info().PublicView {
		return nil
	}
	each := setup
	each.ObserveEachSeat = true
	got := runEpisode(ctx, each)
	for k := range min(len(ep.Turns), len(got.Turns)) {
		t, u := &ep.Turns[k], &got.Turns[k]
		if t.View != u.View || !slices.Equal(t.Legal, u.Legal) {
			return fmt.Errorf("%w: at step %d, seat %d (%s) sees %q with legal actions %q, not the step's first actor's %q with %q",
				ErrPublicView, u.Step, u.Seat, ep.Seats[u.Seat].ID, u.View, u.Legal, t.View, t.Legal)
		}
	}
	if want, got := trajectories.Transcript(ep), trajectories.Transcript(got); got != want {
		return fmt.Errorf("%w: the episode with every seat observed differs: %s", ErrPublicView, FirstDifference(want, got))
	}
	return nil
}

// checkTransitions checks that the record's transitions tell each seat's
// story: every transition starts where the seat's previous one ended (its
// role's initial state before the first), is one its role declares, and
// every turn was played in the state its seat's transitions before the
// turn's step led to.
func checkTransitions(info *env.Info, rec *episode.Record) error {
	state := make([]agents.State, len(rec.Seats))
	for i, s := range rec.Seats {
		state[i] = info.Role(s.Role).Initial
	}
	k := 0 // the next transition to apply
	applyUntil := func(step int) error {
		for ; k < len(rec.Transitions) && rec.Transitions[k].Step < step; k++ {
			tr := rec.Transitions[k]
			if tr.Seat < 0 || tr.Seat >= len(state) {
				return fmt.Errorf("%w: transition %d names seat %d of %d", ErrTransitions, k, tr.Seat, len(state))
			}
			if tr.From != state[tr.Seat] {
				return fmt.Errorf("%w: transition %d of %s leaves %q, but the seat is in %q", ErrTransitions, k, rec.Seats[tr.Seat].ID, tr.From, state[tr.Seat])
			}
			if !info.Role(rec.Seats[tr.Seat].Role).Allows(tr.From, tr.Event, tr.To) {
				return fmt.Errorf("%w: transition %d of %s: %q on %q to %q is not one of role %s", ErrTransitions, k, rec.Seats[tr.Seat].ID, tr.Event, tr.From, tr.To, rec.Seats[tr.Seat].Role)
			}
			if k > 0 && rec.Transitions[k-1].Step > tr.Step {
				return fmt.Errorf("%w: transition %d at step %d follows one at step %d", ErrTransitions, k, tr.Step, rec.Transitions[k-1].Step)
			}
			state[tr.Seat] = tr.To
		}
		return nil
	}
	for n := range rec.Turns {
		t := &rec.Turns[n]
		if err := applyUntil(t.Step); err != nil {
			return err
		}
		if t.State != state[t.Seat] {
			return fmt.Errorf("%w: turn %d of %s was played in %q, but its transitions left it in %q", ErrTransitions, n, rec.Seats[t.Seat].ID, t.State, state[t.Seat])
		}
	}
	return applyUntil(math.MaxInt)
}

// runEpisode plays setup and projects its samples, as the runner does.
func runEpisode(ctx context.Context, setup env.Setup) *trajectories.Episode {
	return trajectories.NewEpisode(env.RunEpisode(ctx, setup))
}

func checkOutcome(ep *trajectories.Episode, opts Options) error {
	switch {
	case ep.Status == protocol.StatusCompleted:
	case ep.Status == protocol.StatusTruncated && opts.AllowTruncated:
	default:
		return fmt.Errorf("%w: %s (%s) after %d steps: %s", ErrEpisode, ep.Status, ep.End, ep.Steps, ep.Err)
	}
	// A score that is not finite, or has the wrong number of agent
	// scores, has already failed the episode (env.ErrBadScore,
	// env.ErrBadSeats).
	return nil
}

// checkSamples validates the samples as the runner would write them
// (numbered), and their agreement with the episode.
func checkSamples(ep *trajectories.Episode) error {
	if len(ep.Samples) != len(ep.Turns) {
		return fmt.Errorf("%w: %d samples for %d turns", ErrSample, len(ep.Samples), len(ep.Turns))
	}
	numbered := slices.Clone(ep.Samples)
	for i := range numbered {
		numbered[i].Index = int64(i)
	}
	if err := protocol.ValidateRollout(numbered); err != nil {
		return fmt.Errorf("%w: %w", ErrSample, err)
	}
	for i := range ep.Samples {
		s, a := &ep.Samples[i], &ep.Turns[i]
		md := &s.Metadata
		switch {
		case s.RolloutID != ep.RolloutID:
			return fmt.Errorf("%w: sample %d has rollout_id %d, the episode %d", ErrSample, i, s.RolloutID, ep.RolloutID)
		case s.Status != ep.Status:
			return fmt.Errorf("%w: sample %d has status %s, the episode %s", ErrSample, i, s.Status, ep.Status)
		case a.Seat < 0 || a.Seat >= len(ep.Seats):
			return fmt.Errorf("%w: turn %d names seat %d of %d", ErrSample, i, a.Seat, len(ep.Seats))
		case md.Agent != ep.Seats[a.Seat].ID || md.Role != ep.Seats[a.Seat].Role:
			return fmt.Errorf("%w: sample %d is %s (%s), its turn was %s's", ErrSample, i, md.Agent, md.Role, ep.Seats[a.Seat].ID)
		case s.Response != a.Action || md.Turn != a.Turn || md.Step != a.Step:
			return fmt.Errorf("%w: sample %d (%q, turn %d, step %d) disagrees with its turn (%q, turn %d, step %d)",
				ErrSample, i, s.Response, md.Turn, md.Step, a.Action, a.Turn, a.Step)
		}
	}
	return nil
}

// gameTranscript is the transcript of ep without what a policy, rather than
// the game, puts in a sample (its own prompt, its tokens): what replaying
// the same moves with another policy must reproduce.
func gameTranscript(ep *trajectories.Episode) string {
	c := *ep
	c.Samples = slices.Clone(ep.Samples)
	for i := range c.Samples {
		s := &c.Samples[i]
		s.Prompt, s.Tokens, s.ResponseLength, s.LossMask, s.RolloutLogProbs = protocol.Prompt{}, nil, 0, nil, nil
		s.Metadata.TextOnly = false
	}
	return trajectories.Transcript(&c)
}

// recorded replays ep's actions, seat by seat, turn by turn.
func recorded(ep *trajectories.Episode) env.PolicyFor {
	bySeat := make(map[string][]string, len(ep.Seats))
	for _, a := range ep.Turns {
		id := ep.Seats[a.Seat].ID
		bySeat[id] = append(bySeat[id], a.Action)
	}
	return func(s env.Seat) agents.Policy { return agents.Replay(bySeat[s.ID]...) }
}

// checkReplayer checks the episode's Replayer: with no change, replayed or
// re-simulated, it must give the episode's own score; with a seat absent or
// playing its null action (where the scenario declares them), and with
// every seat absent (the empty coalition, where it declares absence), it
// must finish with finite scores.
func checkReplayer(ctx context.Context, sc env.Scenario, ep *trajectories.Episode, opts Options) error {
	if ep.Replay == nil {
		return fmt.Errorf("%w: the episode has no Replayer", ErrReplay)
	}
	for _, cf := range []episode.Counterfactual{{}, {Resimulate: true}} {
		score, err := ep.Replay.Replay(ctx, cf)
		if err != nil {
			return fmt.Errorf("%w: %+v: %w", ErrReplay, cf, err)
		}
		if score.Team != ep.Score.Team || !slices.Equal(score.Teams, ep.Score.Teams) || !slices.Equal(score.Agents, ep.Score.Agents) {
			return fmt.Errorf("%w: %+v scored %v, the episode %v", ErrReplay, cf, score, ep.Score)
		}
	}
	spec := sc.Info().Counterfactual
	if spec == nil {
		return nil
	}
	if spec.AbsentOK {
		for _, resim := range []bool{false, true} {
			cf := episode.Counterfactual{Absent: allSeats(len(ep.Seats)), Resimulate: resim}
			score, err := ep.Replay.Replay(ctx, cf)
			if err != nil {
				return fmt.Errorf("%w: every seat absent (resimulate %v): %w", ErrCounterfactual, resim, err)
			}
			if err := finiteScore(score, len(ep.Seats)); err != nil {
				return fmt.Errorf("%w: every seat absent (resimulate %v): %w", ErrCounterfactual, resim, err)
			}
		}
	}
	n := opts.CounterfactualSeats
	if n == 0 {
		n = 8
	}
	for i := range min(n, len(ep.Seats)) {
		var cfs []episode.Counterfactual
		if null, ok := spec.NullAction[ep.Seats[i].Role]; ok {
			cfs = append(cfs, episode.Counterfactual{Replace: map[int]string{i: null}})
		} else if spec.HasNullAction(ep.Seats[i].Role) {
			// A null action by state: the engine's null policy plays it.
			cfs = append(cfs, episode.Counterfactual{Null: []int{i}})
		}
		if spec.AbsentOK {
			cfs = append(cfs, episode.Counterfactual{Absent: []int{i}})
		}
		for _, cf := range cfs {
			score, err := ep.Replay.Replay(ctx, cf)
			if err != nil {
				return fmt.Errorf("%w: seat %d (%s) %+v: %w", ErrCounterfactual, i, ep.Seats[i].ID, cf, err)
			}
			if !finite.Is(score.Team) {
				return fmt.Errorf("%w: seat %d (%s) %+v: team reward %v", ErrCounterfactual, i, ep.Seats[i].ID, cf, score.Team)
			}
		}
	}
	return nil
}

// largestTeam returns the number of seats of the largest team.
func largestTeam(seats []env.Seat) int {
	n := map[int]int{}
	top := 0
	for _, s := range seats {
		n[s.Team]++
		top = max(top, n[s.Team])
	}
	return top
}

// teamName names team t of ep for an error message: " of team NAME", or
// nothing in a scenario without teams.
func teamName(ep *trajectories.Episode, t int) string {
	if ep.Teams == nil {
		return ""
	}
	return " of team " + ep.TeamName(t)
}

func allSeats(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// finiteScore checks that a replay's score is finite, with one agent score
// per seat or none.
func finiteScore(score env.Score, seats int) error {
	if !finite.Is(score.Team) {
		return fmt.Errorf("team reward %v", score.Team)
	}
	if !finite.All(score.Teams) {
		return fmt.Errorf("team rewards %v", score.Teams)
	}
	if score.Agents != nil && len(score.Agents) != seats {
		return fmt.Errorf("%d agent scores for %d seats", len(score.Agents), seats)
	}
	for i, v := range score.Agents {
		if !finite.Is(v) {
			return fmt.Errorf("seat %d scored %v", i, v)
		}
	}
	return nil
}

// maxExactShapley is the most seats Check runs exact Shapley with.
const maxExactShapley = 12

// creditCase is one counterfactual allocator Check runs, and for exact
// and Monte Carlo Shapley, whose shares add up to v(N) - v(∅) on every
// team (Σ_{i∈T} φ_i = G_T(N) - G_T(N \ T)), the empty coalition's
// counterfactual with the seats out (empty); empty is nil for the others.
type creditCase struct {
	a     trajectories.Allocator
	empty func(out []int) episode.Counterfactual
}

// creditCases lists the counterfactual allocators of trajectories/credit
// that ep's scenario declares support for, in its default mode of
// re-simulation (Resimulate): difference (c=null) where every seat's role
// has a null action, leave-one-out, exact Shapley (up to 12 seats) and
// Monte Carlo Shapley in each mode it supports (absent, null), and COMA.
func creditCases(spec *env.CounterfactualSpec, seats []env.Seat) []creditCase {
	sim := credit.Sim{Resimulate: spec.Resimulate}
	null := true
	for _, s := range seats {
		null = null && spec.HasNullAction(s.Role)
	}
	var modes []credit.Presence
	if spec.AbsentOK {
		modes = append(modes, credit.Absent)
	}
	if null {
		modes = append(modes, credit.Null)
	}
	var out []creditCase
	if null {
		out = append(out, creditCase{a: credit.Difference{Sim: sim}})
	}
	for _, mode := range modes {
		empty := func(seats []int) episode.Counterfactual {
			cf := episode.Counterfactual{Resimulate: sim.Resimulate, TeamOnly: true}
			if mode == credit.Absent {
				cf.Absent = seats
			} else {
				cf.Null = seats
			}
			return cf
		}
		out = append(out, creditCase{a: credit.LeaveOneOut{Out: mode, Sim: sim}})
		if largestTeam(seats) <= maxExactShapley {
			out = append(out, creditCase{a: credit.Shapley{Out: mode, Sim: sim}, empty: empty})
		}
		out = append(out, creditCase{a: credit.MonteCarloShapley{Out: mode, Permutations: 4, Sim: sim}, empty: empty})
	}
	return append(out, creditCase{a: credit.COMA{Samples: 2, Sim: sim}})
}

// checkCredit plays the first Options.CreditEpisodes seeds and runs on
// each episode every counterfactual allocator the scenario declares
// support for (creditCases): each must succeed with finite values, and the
// Shapley shares must add up to v(N) - v(∅) (efficiency), v(∅) replayed
// anew, which fails when replays of one coalition differ.
func checkCredit(ctx context.Context, sc env.Scenario, p env.Params, pl assignment, opts Options) error {
	spec := sc.Info().Counterfactual
	n := opts.CreditEpisodes
	if n == 0 {
		n = 2
	}
	if spec == nil || n < 0 {
		return nil
	}
	seeds := seedList(opts.Seeds)
	for _, seed := range seeds[:min(n, len(seeds))] {
		ep := runEpisode(ctx, episodeSetup(sc, p, pl, seed, opts))
		if ep.Status != protocol.StatusCompleted {
			continue // checkEpisode reports it
		}
		for _, c := range creditCases(spec, ep.Seats) {
			dst := [][]float64{make([]float64, len(ep.Samples))}
			if _, err := credit.AllocateNoted(ctx, c.a, []*trajectories.Episode{ep}, dst); err != nil {
				return fmt.Errorf("%w: seed %d: %s: %w", ErrCredit, seed, c.a.Name(), err)
			}
			share := make([]float64, len(ep.Seats))
			has := make([]bool, len(ep.Seats))
			for k, v := range dst[0] {
				if !finite.Is(v) {
					return fmt.Errorf("%w: seed %d: %s: sample %d got %v", ErrCredit, seed, c.a.Name(), k, v)
				}
				i := ep.Turns[k].Seat
				share[i], has[i] = v, true
			}
			if c.empty == nil {
				continue
			}
			// Each team's shares add up to its own v(N) - v(∅), the
			// other teams present.
			for t := range ep.TeamCount() {
				members := ep.Members(nil, t)
				if len(members) == 0 || slices.ContainsFunc(members, func(i int) bool { return !has[i] }) {
					continue // a seat without samples: its share is not known
				}
				empty, err := ep.Replay.Replay(ctx, c.empty(members))
				if err != nil {
					return fmt.Errorf("%w: seed %d: %s: the empty coalition%s: %w", ErrCredit, seed, c.a.Name(), teamName(ep, t), err)
				}
				sum := 0.0
				for _, i := range members {
					sum += share[i]
				}
				full, none := ep.Score.Of(t), empty.Of(t)
				if want := full - none; math.Abs(sum-want) > 1e-9*max(1, math.Abs(want)) {
					return fmt.Errorf("%w: seed %d: %s: the shares%s add up to %v, v(N) - v(∅) = %v - %v = %v (replays of one coalition differ?)",
						ErrCredit, seed, c.a.Name(), teamName(ep, t), sum, full, none, want)
				}
			}
		}
	}
	return nil
}

// checkRun plays a run at concurrency 1, then at concurrency 4 with
// policies asked in parallel, and compares the JSONL bytes; then reads the
// output back and validates every rollout.
func checkRun(ctx context.Context, sc env.Scenario, p env.Params, pl assignment, opts Options) error {
	n := opts.RunEpisodes
	if n == 0 {
		n = 12
	}
	withSamples := 0 // episodes that wrote a rollout, in the first run
	run := func(concurrency int) ([]byte, play.Summary, error) {
		var buf bytes.Buffer
		w := trajectories.NewJSONLWriter(&buf, trajectories.Flat)
		out := &trajectories.Output{Sink: w, Allocators: []trajectories.Allocator{credit.Team{}}}
		if concurrency == 1 {
			out.Observe = func(ep *trajectories.Episode) {
				if len(ep.Samples) > 0 {
					withSamples++
				}
			}
		}
		// Without Observe the output recycles: the second run also shows
		// that recycled records, and the games a Renewer renews from them,
		// play the same episodes as new ones.
		sum, err := play.Run(ctx, play.Config{
			Play: env.Play{Scenario: sc, Params: p, Policy: pl.policy, Limits: limits(opts)},
			// Concurrent runs ask simultaneous actors' policies at once too.
			Drive:         env.Drive{ParallelPolicies: concurrency > 1},
			Episodes:      n,
			GroupSize:     2,
			Concurrency:   concurrency,
			Seed:          42,
			RolloutIDBase: 500,
		}, out)
		return buf.Bytes(), sum, err
	}
	one, sum, err := run(1)
	if err != nil {
		return fmt.Errorf("%w: run: %w", ErrEpisode, err)
	}
	if bad := sum.Episodes - sum.ByStatus[protocol.StatusCompleted]; bad > 0 && !(opts.AllowTruncated && bad == sum.ByStatus[protocol.StatusTruncated]) {
		return fmt.Errorf("%w: %d of %d episodes of a run did not complete (%v); first: %s", ErrEpisode, bad, sum.Episodes, sum.ByStatus, sum.FirstFailure)
	}
	four, _, err := run(4)
	if err != nil {
		return fmt.Errorf("%w: run: %w", ErrEpisode, err)
	}
	if !bytes.Equal(one, four) {
		return fmt.Errorf("%w: JSONL at concurrency 1 and 4 differ: %s", ErrConcurrency, FirstDifference(string(one), string(four)))
	}
	rollouts, err := trajectories.ReadRollouts(bytes.NewReader(one))
	if err != nil {
		return fmt.Errorf("%w: reading the run back: %w", ErrSample, err)
	}
	for _, r := range rollouts {
		if err := protocol.ValidateRollout(r); err != nil {
			return fmt.Errorf("%w: run: %w", ErrSample, err)
		}
	}
	if len(rollouts) != withSamples {
		return fmt.Errorf("%w: %d rollouts read back, %d episodes wrote samples", ErrSample, len(rollouts), withSamples)
	}
	return nil
}

// checkFeatures checks the numeric observations of a scenario that
// declares them (env.Features): valid spaces, and at every decision of
// the episode setup plays (stepped, its policy asked for the moves) and at
// its end, every element of every seat's features and of the state
// written and within its space's bounds; for a game with hidden state, a
// fork from a seat's information set (Episode.ForkFor) shows the seat the
// same features, so that they hold nothing it may not know.
func checkFeatures(ctx context.Context, sc env.Scenario, p env.Params, setup env.Setup) error {
	fs, ok := sc.(env.Features)
	if !ok {
		return nil
	}
	state := fs.StateSpace(p)
	if err := state.Validate(); err != nil {
		return fmt.Errorf("%w: the state: %w", ErrFeatures, err)
	}
	ep, err := env.NewEpisode(setup)
	if err != nil {
		return err
	}
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for k := range v {
			v[k] = float32(math.NaN())
		}
		return v
	}
	inside := func(what string, sp env.Space, v []float32) error {
		for k, x := range v {
			if !(x >= sp.Low && x <= sp.High) {
				return fmt.Errorf("%w: step %d: %s: element %d is %v, outside %v (NaN: not written)", ErrFeatures, ep.Time(), what, k, x, sp)
			}
		}
		return nil
	}
	check := func() error {
		for i, seat := range ep.Seats() {
			sp := fs.ObservationSpace(p, seat.Role)
			if err := sp.Validate(); err != nil {
				return fmt.Errorf("%w: role %s: %w", ErrFeatures, seat.Role, err)
			}
			v := fill(sp.Size())
			if err := ep.Features(i, v); err != nil {
				return fmt.Errorf("%w: %w", ErrFeatures, err)
			}
			if err := inside(seat.ID+"'s features", sp, v); err != nil {
				return err
			}
			if ep.Done() {
				continue
			}
			f, err := ep.ForkFor(i, uint64(i)+1)
			switch {
			case errors.Is(err, env.ErrNoHiddenState):
				continue
			case err != nil:
				return fmt.Errorf("%w: a fork for %s: %w", ErrFeatures, seat.ID, err)
			}
			w := fill(sp.Size())
			if err := f.Features(i, w); err != nil {
				return fmt.Errorf("%w: %w", ErrFeatures, err)
			}
			if !slices.Equal(v, w) {
				return fmt.Errorf("%w: step %d: %s's features differ in a fork from its information set (%v, not %v): they show what it may not know", ErrFeatures, ep.Time(), seat.ID, w, v)
			}
		}
		v := fill(state.Size())
		if err := ep.State(v); err != nil {
			return fmt.Errorf("%w: %w", ErrFeatures, err)
		}
		return inside("the state", state, v)
	}
	policies := map[int]agents.Policy{}
	for {
		if err := check(); err != nil {
			return err
		}
		if ep.Done() {
			return nil
		}
		for _, o := range ep.Pending() {
			pol := policies[o.Seat]
			if pol == nil {
				pol = setup.Policy(ep.Seats()[o.Seat])
				policies[o.Seat] = pol
			}
			a, err := pol.Act(ctx, &o.Observation)
			if err != nil {
				return fmt.Errorf("%w: replaying the episode: %w", ErrFeatures, err)
			}
			if err := ep.Act(o.Seat, a); err != nil {
				return fmt.Errorf("%w: replaying the episode: %w", ErrFeatures, err)
			}
		}
	}
}
