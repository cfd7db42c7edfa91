package league

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// Seed streams of a match: seeds.Mix(league seed, stream, match, ...).
// The first two are play.Run's, which plays the matches (League.run): its
// groups' scenario seeds and its episodes' policy seeds.
const (
	streamScenario = 1 // the episode's scenario seed
	streamPolicy   = 2 // its policy seed
	streamDraw     = 3 // matchmaking: (match, role, k)
	streamRole     = 4 // the focal player's role
)

// Match is one drawn match: who plays which role.
type Match struct {
	Index int64
	Rule  string
	// Focal is the player the opponents were drawn for, playing
	// FocalRole.
	Focal, FocalRole string
	// Roles maps every role to its player.
	Roles map[string]string
}

// Opponents are the roles not the focal player's and their players, as
// "role=player" joined by commas, in the scenario's role order.
func (m *Match) Opponents(info *env.Info) string {
	var parts []string
	for _, r := range info.Roles {
		if r.Name != m.FocalRole {
			parts = append(parts, r.Name+"="+m.Roles[r.Name])
		}
	}
	return strings.Join(parts, ",")
}

// Draw draws match number k for focal with rule, from the league's state
// now: the focal player plays a role drawn uniformly, and each other role
// gets an opponent chosen by rule, from draws that depend on the league's
// seed, k and the role alone. focal "" is the league's learner,
// or, in a league without one, the players in turn (player k mod n).
func (l *League) Draw(rule Rule, focal string, k int64) (Match, error) {
	if focal == "" {
		focal = l.state.Learner
	}
	if focal == "" {
		var eligible []string
		for _, p := range l.state.Players {
			if p.Policy.Name != PolicyExternal {
				eligible = append(eligible, p.Name)
			}
		}
		if len(eligible) == 0 {
			return Match{}, fmt.Errorf("%w: the league has no players", ErrNoOpponent)
		}
		focal = eligible[k%int64(len(eligible))]
	}
	if l.Player(focal) == nil {
		return Match{}, fmt.Errorf("%w %q: not a player of the league", ErrBadPlayer, focal)
	}
	roles := l.info.Roles
	focalRole := roles[seeds.Intn(seeds.Mix(l.state.Seed, streamRole, uint64(k)), len(roles))].Name
	m := Match{Index: k, Rule: rule.String(), Focal: focal, FocalRole: focalRole, Roles: map[string]string{}}
	c := Choice{Focal: focal, Latest: l.latestSnapshot(focal),
		WinRate: func(opp string) float64 { return l.Versus(focal, opp).WinRate(1) }}
	for _, p := range l.state.Players {
		if p.Name != focal && p.Policy.Name != PolicyExternal {
			c.Pool = append(c.Pool, p.Name)
		}
	}
	for ri, r := range roles {
		if r.Name == m.FocalRole {
			m.Roles[r.Name] = focal
			continue
		}
		c.Draw = func(j uint64) float64 {
			return seeds.Float64(seeds.Mix(l.state.Seed, streamDraw, uint64(k), uint64(ri), j))
		}
		opp, err := rule.Choose(&c)
		if err != nil {
			return Match{}, fmt.Errorf("match %d role %s: %w", k, r.Name, err)
		}
		m.Roles[r.Name] = opp
	}
	return m, nil
}

// latestSnapshot is the most recent snapshot of focal, or "".
func (l *League) latestSnapshot(focal string) string {
	for i := len(l.state.Players) - 1; i >= 0; i-- {
		if p := l.state.Players[i]; p.Parent == focal {
			return p.Name
		}
	}
	return ""
}

// PlayOptions say what Play plays.
type PlayOptions struct {
	// N is how many matches to play; Until, when set instead, plays until
	// the league has played that many (so that a command killed half way
	// and run again finishes the same run). Either is rounded up to whole
	// batches (Config.Batch).
	N, Until int64
	// Rule is the matchmaking rule; "" is the league's (Config.Rule).
	Rule string
	// Focal is the player the opponents are drawn for; "" is the learner,
	// else every player in turn.
	Focal string
	// Concurrency is how many matches of a batch are played at once; 0
	// is 1. It never changes the results.
	Concurrency int
	// CheckpointEvery commits the league every that many matches (0:
	// 1000), and at the end. A run killed between commits loses what it
	// played since the last one, which the next Play plays again, to the
	// same bytes.
	CheckpointEvery int64
	// Progress, when set, is called after every batch with the matches
	// played so far by this call.
	Progress func(done int64)
}

// ErrInterrupted is wrapped by Play's error when its context was
// cancelled: the batches finished before that are committed.
var ErrInterrupted = errors.New("league play interrupted")

// Play plays matches, each drawn by the matchmaking rule from the league
// as it stands, batch by batch (Config.Batch): the batch's matches are
// drawn, then played (concurrently), then, in match order, learned by the
// learner (from its own turns, with each turn's credit its agent's score:
// the individual allocator), logged and rated. Snapshots of the learner
// join the league every Config.SnapshotEvery matches. Everything depends
// on the league's seed and its history only: the same league played with
// any concurrency, with or without interruptions and resumes, gives the
// same bytes.
func (l *League) Play(ctx context.Context, o PlayOptions) error {
	if l.log == nil {
		return fmt.Errorf("%w: %s", ErrReadOnly, l.dir)
	}
	target := l.state.Matches + o.N
	if o.Until > 0 {
		target = o.Until
	}
	if o.N < 0 || o.Until < 0 || (o.N > 0 && o.Until > 0) {
		return fmt.Errorf("league play: give N or Until, not negative, not both")
	}
	ruleSpec := o.Rule
	if ruleSpec == "" {
		ruleSpec = l.state.Rule
	}
	rule, err := ParseRule(ruleSpec)
	if err != nil {
		return err
	}
	if o.Focal != "" && l.Player(o.Focal) == nil {
		return fmt.Errorf("%w %q: not a player of the league", ErrBadPlayer, o.Focal)
	}
	// Whole batches only: a batch is drawn from the league as it stood
	// at its start and learned at its end, so one cut short would be
	// drawn and learned otherwise by the run that finished it.
	batch := int64(l.state.Batch)
	if r := target % batch; r != 0 {
		target += batch - r
	}
	every := o.CheckpointEvery
	if every <= 0 {
		every = 1000
	}
	p := &leaguePlay{l: l, ctx: ctx, o: &o, rule: rule, target: target, every: every,
		start: l.state.Matches, lastCommit: l.state.Matches}
	if batch == 1 {
		err = p.lockstep()
	} else {
		err = p.batches(max(o.Concurrency, 1))
	}
	if err != nil {
		return err
	}
	if l.state.Matches != p.lastCommit {
		if err := l.commit(); err != nil {
			return err
		}
	}
	if l.state.Matches < target {
		return fmt.Errorf("%w after %d matches (%d of %d): %w", ErrInterrupted, l.state.Matches-p.start, l.state.Matches, target, context.Cause(ctx))
	}
	return nil
}

// leaguePlay is one Play's progress: what it plays, to which total, and when
// it last committed.
type leaguePlay struct {
	l      *League
	ctx    context.Context
	o      *PlayOptions
	rule   Rule
	target int64
	every  int64 // CheckpointEvery, resolved
	// start is the league's matches when the Play began; lastCommit, when
	// it was last committed.
	start, lastCommit int64
}

// batches plays the Play's matches batch by batch (Config.Batch > 1),
// each batch through an play.Run of its own: the batch is drawn from the
// league as it stands, played conc matches at a time, and then learned
// from and rated in match order (end). The run's fixed cost is shared by
// the batch's matches.
func (p *leaguePlay) batches(conc int) error {
	l := p.l
	batch := int64(l.state.Batch)
	for l.state.Matches < p.target {
		if p.ctx.Err() != nil {
			break
		}
		k0 := l.state.Matches
		// A batch ends at a multiple of Batch (a league that played a
		// partial batch elsewhere, troupe serve's matches, completes it).
		n := min(batch-k0%batch, p.target-k0)
		matches := make([]Match, n)
		for i := range matches {
			var err error
			if matches[i], err = l.Draw(p.rule, p.o.Focal, k0+int64(i)); err != nil {
				return err
			}
		}
		recs, execs, err := l.playBatch(p.ctx, matches, conc)
		if err != nil {
			return err
		}
		if p.ctx.Err() != nil {
			break // the batch's episodes may have been cut short: not kept
		}
		results := make([]Result, n)
		for i, rec := range recs {
			if results[i], err = l.learnFrom(p.ctx, &matches[i], rec); err != nil {
				return err
			}
			execs[i].Recycle(rec)
		}
		if err := p.end(results); err != nil {
			return err
		}
	}
	return nil
}

// end closes a batch whose matches were learned from: their results are
// logged and rated, the learner's snapshot joins the league when one is
// due, the league is committed when a checkpoint is, and progress is
// reported.
func (p *leaguePlay) end(results []Result) error {
	l := p.l
	if err := l.appendResults(results); err != nil {
		return err
	}
	if e := l.state.SnapshotEvery; e > 0 && l.learner != nil && l.state.Matches%e == 0 {
		if _, err := l.snapshot("", l.state.SnapshotGreedy); err != nil {
			return err
		}
	}
	if l.state.Matches-p.lastCommit >= p.every || l.state.Matches >= p.target {
		if err := l.commit(); err != nil {
			return err
		}
		p.lastCommit = l.state.Matches
	}
	if p.o.Progress != nil {
		p.o.Progress(l.state.Matches - p.start)
	}
	return nil
}

// lockstep plays the Play's matches when batches are of one match: the
// whole Play is one play.Run, in lockstep (one match at a time, each
// written before the next is played), whose requests are the matches'
// own (League.run). Each match is drawn when the run asks for its episode
// (Execute), from the league as the matches before it left it, and once
// played it is learned from, logged, rated and committed (Finish and its
// write) before the next is drawn: what a batch of one did, without a
// run's fixed cost per match.
func (p *leaguePlay) lockstep() error {
	l := p.l
	k0 := l.state.Matches
	if k0 >= p.target || p.ctx.Err() != nil {
		return nil
	}
	s := &stepper{p: p}
	s.writeFn = s.write
	cfg := l.run(k0, int(p.target-k0), 1, s)
	cfg.Lockstep = true
	_, err := play.Run(p.ctx, cfg, s)
	switch {
	case s.err != nil:
		return s.err
	case err != nil && p.ctx.Err() == nil:
		return err
	}
	return nil // played to the end, or interrupted (Play says so)
}

// stepper is the executor and the output of a lockstep Play's run (one
// match at a time): it draws each match as its episode is asked for,
// plays it with the executor of its players, and writes it as a batch of
// one was. Lockstep makes the run's calls one at a time, in turn:
// Execute, Finish, then the write.
type stepper struct {
	p *leaguePlay
	// The match being played, its executor and record; err, the first
	// error of the league's (a draw's, a write's), which ends the run
	// and is Play's.
	m       Match
	exec    *env.LocalExecutor
	rec     *episode.Record
	err     error
	writeFn func(int) (int, error) // write, made once
	results [1]Result
}

// Execute implements env.Executor: it draws match req.Index from the
// league as it stands and plays it.
func (s *stepper) Execute(ctx context.Context, req env.Request) *episode.Record {
	l := s.p.l
	s.exec = nil
	if req.Index != l.state.Matches {
		s.err = fmt.Errorf("league play: match %d asked for with %d played", req.Index, l.state.Matches)
	} else if m, err := l.Draw(s.p.rule, s.p.o.Focal, req.Index); err != nil {
		s.err = err
	} else if x, err := l.executor(&m); err != nil {
		s.err = err
	} else {
		s.m, s.exec = m, x
		return x.Execute(ctx, req)
	}
	return &episode.Record{Index: req.Index, Status: protocol.StatusFailed, Err: s.err.Error()}
}

// Finish implements play.Output: the match's record, written next (or its
// draw's error, which stops the run).
func (s *stepper) Finish(_ context.Context, group []*episode.Record) (func(int) (int, error), error) {
	if s.err != nil {
		return nil, s.err
	}
	s.rec = group[0]
	return s.writeFn, nil
}

// write writes the match: the learner learns from it, its result is
// logged and rated, and the batch of one ends (play.end). A match played
// while the Play was being cancelled is not kept, as a batch cut short
// was not: the next Play plays it again.
func (s *stepper) write(int) (int, error) {
	p := s.p
	if err := p.ctx.Err(); err != nil {
		return 0, context.Cause(p.ctx)
	}
	rec := s.rec
	s.rec = nil
	r, err := p.l.learnFrom(p.ctx, &s.m, rec)
	if err == nil {
		s.exec.Recycle(rec)
		s.results[0] = r
		err = p.end(s.results[:])
	}
	if err != nil {
		s.err = err
	}
	return 0, err
}

// Flush implements play.Output.
func (*stepper) Flush() error { return nil }

// Recycles implements play.RecyclingOutput: a match's record is done with
// once written (given back to its executor, which Run does not do for an
// executor of the caller's), so Run may reuse its arrays of records.
func (*stepper) Recycles() bool { return true }

// executor is the local executor of the matches with m's players in
// m's roles, made once per combination: it keeps its engines' state
// machines and the records given back to it (Recycle) between matches,
// so a match allocates no record. Its emit filter is the learner's roles.
func (l *League) executor(m *Match) (*env.LocalExecutor, error) {
	roles := slices.Sorted(maps.Keys(m.Roles))
	var key strings.Builder
	for _, role := range roles {
		key.WriteString(role + "=" + m.Roles[role] + "\x00")
	}
	if x, ok := l.execs[key.String()]; ok {
		return x, nil
	}
	byRole := make(map[string]agents.Policy, len(roles))
	var emit []string
	for _, role := range roles {
		p := l.Player(m.Roles[role])
		if p == nil {
			return nil, fmt.Errorf("%w %q: not a player of the league", ErrBadPlayer, m.Roles[role])
		}
		pol, err := l.pols.policy(p, role)
		if err != nil {
			return nil, err
		}
		byRole[role] = pol
		if p.Name == l.state.Learner {
			emit = append(emit, role)
		}
	}
	x := &env.LocalExecutor{Play: env.Play{Scenario: l.scenario, Params: l.params, Policy: env.ByRole(byRole, nil), Emit: env.EmitRoles(emit...)}}
	if l.execs == nil {
		l.execs = map[string]*env.LocalExecutor{}
	}
	l.execs[key.String()] = x
	return x, nil
}

// run is the play.Run of matches k0 to k0+n-1, one episode each: match k
// is the run's group and episode k, so its seeds derive from the league's
// seed and k alone (seeds.Mix(seed, streamScenario, k) and
// seeds.Mix(seed, streamPolicy, k), env's scenario and policy streams),
// and k is its index, rollout id and group index.
func (l *League) run(k0 int64, n, conc int, exec env.Executor) play.Config {
	return play.Config{Play: env.Play{Scenario: l.scenario, Params: l.params}, Episodes: int(k0) + n, FirstGroup: int(k0),
		Seed: l.state.Seed, Concurrency: conc, Executor: exec}
}

// playBatch plays the matches' episodes (consecutive matches, from
// matches[0].Index), conc at a time, through play.Run,
// each by the executor of its players (executor), and returns them with
// those executors (which get them back, once read, through Recycle). A
// batch cut short by ctx returns no error: the caller, seeing ctx done,
// keeps none of it.
func (l *League) playBatch(ctx context.Context, matches []Match, conc int) ([]*episode.Record, []*env.LocalExecutor, error) {
	execs := make([]*env.LocalExecutor, len(matches))
	for i := range matches {
		x, err := l.executor(&matches[i])
		if err != nil {
			return nil, nil, err
		}
		execs[i] = x
	}
	recs := make([]*episode.Record, len(matches))
	if len(matches) == 0 {
		return recs, execs, nil
	}
	k0 := matches[0].Index
	exec := env.ExecutorFunc(func(ctx context.Context, req env.Request) *episode.Record {
		return execs[req.Index-k0].Execute(ctx, req)
	})
	if _, err := play.Run(ctx, l.run(k0, len(matches), conc, exec), matchRecords{recs: recs, k0: k0}); err != nil && ctx.Err() == nil {
		return nil, nil, err
	}
	return recs, execs, nil
}

// matchRecords is the play.Output of a batch's run: it keeps each match's
// record, at its place in the batch, to be learned from once the batch is
// played.
type matchRecords struct {
	recs []*episode.Record
	k0   int64
}

// Finish implements play.Output.
func (o matchRecords) Finish(_ context.Context, group []*episode.Record) (func(k int) (int, error), error) {
	return func(k int) (int, error) {
		rec := group[k]
		o.recs[rec.Index-o.k0] = rec
		return 0, nil
	}, nil
}

// Flush implements play.Output.
func (matchRecords) Flush() error { return nil }

// learnFrom has the learner learn a played match (when it played in it)
// and returns the match's result.
func (l *League) learnFrom(ctx context.Context, m *Match, rec *episode.Record) (Result, error) {
	r, err := l.ResultOf(m, rec)
	if err != nil {
		return r, err
	}
	if l.learner == nil || !rec.Finished() || !slices.Contains(slices.Collect(maps.Values(m.Roles)), l.state.Learner) {
		return r, nil
	}
	ep := trajectories.RecordOnly(rec)
	if err := trajectories.Allocate(ctx, []*trajectories.Episode{ep}, []trajectories.Allocator{credit.Individual{}}, trajectories.RewardScalar); err != nil {
		return r, fmt.Errorf("match %d: the learner's credit: %w", m.Index, err)
	}
	if err := l.learner.Learn(&ep.Record, ep.Credit); err != nil {
		return r, fmt.Errorf("match %d: learner %q: %w", m.Index, l.state.Learner, err)
	}
	return r, nil
}

// ResultOf is the result of match m played as rec: each role's mean
// seat score. A finished episode without per-agent scores is an error: a
// league ranks players by their own scores.
func (l *League) ResultOf(m *Match, rec *episode.Record) (Result, error) {
	r := Result{Match: m.Index, Rule: m.Rule, Focal: m.Focal, FocalRole: m.FocalRole, Roles: maps.Clone(m.Roles),
		Scores: map[string]float64{}, Status: rec.Status}
	if r.Status == "" {
		r.Status = protocol.StatusFailed
	}
	if !rec.Finished() {
		return r, nil
	}
	if len(rec.Score.Agents) != len(rec.Seats) {
		return r, fmt.Errorf("match %d: scenario %s gives no per-agent scores: a league ranks its players by them", m.Index, l.info.Name)
	}
	n := map[string]int{}
	for i, s := range rec.Seats {
		r.Scores[s.Role] += rec.Score.Agents[i]
		n[s.Role]++
	}
	for role, c := range n {
		r.Scores[role] /= float64(c)
	}
	return r, nil
}
