package envserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
	creditpkg "github.com/troupe-rl/troupe/trajectories/credit"
)

// Ends of the episodes a vector environment stops.
const (
	// EndVectorReset: the vector was reset while the episode went on.
	EndVectorReset = "reset"
	// EndVectorClosed: the vector was closed, or went idle, or the
	// server shut down, while the episode went on.
	EndVectorClosed = "closed"
)

// DefaultMaxVectorEnvs is Config.MaxVectorEnvs' default.
const DefaultMaxVectorEnvs = 65536

// maxVectorElements bounds the elements of one batch's largest array, so
// that a vector's buffers stay within a few hundred megabytes.
const maxVectorElements = 1 << 26

// maxServerVectorElements bounds the elements of all vectors' batches
// together: MaxVectorEnvs alone lets many vectors of long observations
// (view_bytes up to 1 MiB an agent) hold tens of gigabytes.
const maxServerVectorElements = 1 << 28

// DefaultViewBytes is the observation length of a vector whose scenario
// declares no features, when its request names none.
const DefaultViewBytes = 1024

// vectorEnv is a vector environment: NumEnvs stepped episodes, their open
// seats the caller's (the others the house's, played as a table plays
// them), stepped together and synchronously by the call that steps them
// (no goroutine, no table: env.Episode's Pending and Act), each finished
// episode written as the server writes any and replaced at once (the
// autoreset). Its episode n is the episode a reset with run seed
// seeds.Mix(seed, n) and the same fields plays, and its record and
// samples are that episode's, byte for byte.
type vectorEnv struct {
	id string
	s  *Server
	// mu makes the vector's calls one at a time.
	mu     sync.Mutex
	closed bool
	// ctx is cancelled by close (Close, the idle reaper, Shutdown)
	// before it takes mu: a call's house policies run under it and the
	// call's request context together (callContext), so that a slow one
	// (an LLM) does not hold mu, and them, until it answers.
	ctx    context.Context
	cancel context.CancelCauseFunc
	last   time.Time // guarded by Server.mu

	req   envclient.VectorRequest
	spec  runspec.Spec
	check func(*agents.Observation, string) error
	feats env.Features // nil: view bytes
	// actionSets and params are the scenario's and the vector's: what
	// an episode's roles are checked against (alike).
	actionSets env.ActionSets
	params     env.Params
	answer     envclient.VectorAnswer
	agents     []env.Seat
	sets       [][]string         // by agent: its action set
	index      []map[string]int32 // by agent: the index of each move of its set
	obsLen     []int              // by agent: its observation's length (<= obsDim)
	house      []bool             // by agent: the house plays it
	// learners are the agents the caller plays, by index: their
	// counterfactual moves replay theirs, as a session's do (credit.go).
	learners []int
	obsDim   int
	k        int // mask row length
	sdim     int // state length, 0 when none
	team     bool
	// nCredit is the number of allocators whose credit the batch
	// carries (those named and the reward's; 0 when none is), rewardBy
	// the one whose credit is the reward, or -1.
	nCredit  int
	rewardBy int
	// cost is the batch's elements, counted against the server's budget.
	cost uint64

	seed    uint64
	next    uint64 // episodes started since seed was set
	ridBase int64
	fixedID bool // ridBase+n, else the server's counter

	slots []vectorSlot
	// broken is why a step failed after it made moves: steps are
	// refused until a reset.
	broken string
	out    envclient.Batch
	acts   envclient.Actions
	buf    []byte
}

// vectorSlot is one env of a vector: the episode it plays.
type vectorSlot struct {
	ep  *env.Episode
	res *runspec.Resolved
	// setup is the episode's: its Policy makes the house's policies,
	// policies holds those made.
	setup    env.Setup
	policies []agents.Policy
	rid      int64
	pend     []env.PendingSeat
	// views are each agent's last view, for a scenario without features.
	views []string
}

// createVector makes the vector a request describes and starts nothing:
// its first reset starts its episodes.
func (s *Server) createVector(req *envclient.VectorRequest) (*vectorEnv, *apiError) {
	bad := func(format string, args ...any) *apiError {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, format, args...)
	}
	switch {
	case req.Scenario == "":
		return nil, bad("scenario: name one (%v)", s.cfg.Scenarios.Names())
	case req.NumEnvs < 1:
		return nil, bad("num_envs: %d (at least 1)", req.NumEnvs)
	case req.NumEnvs > s.cfg.MaxVectorEnvs:
		return nil, bad("num_envs: %d is over the server's limit of %d (troupe env-serve --max-vector-envs)", req.NumEnvs, s.cfg.MaxVectorEnvs)
	case req.ViewBytes < 0 || req.ViewBytes > 1<<20:
		return nil, bad("view_bytes: %d (0 to %d)", req.ViewBytes, 1<<20)
	}
	v := &vectorEnv{id: newID("v-"), s: s, req: *req, team: req.Reward == "team", rewardBy: -1}
	v.ctx, v.cancel = context.WithCancelCause(context.Background())
	reward := req.Reward // an allocator's spec, which joins the allocators (resolve)
	if reward == "score" || reward == "team" {
		reward = ""
	}
	v.spec = specOf(req.Scenario, req.Params, req.Policies, req.Limits, req.OnInvalid, req.Emit, req.Allocators, req.RewardFormat)
	// A probe episode, never played nor written, tells the seats; the
	// spec is resolved once here so that a bad one is refused now.
	res, rewardBy, setup, e := s.resolveAt(v.spec, 0, 0, reward)
	if e != nil {
		return nil, e
	}
	if len(req.Allocators) > 0 || reward != "" {
		// The allocators' credit rides in the batch: those named, and
		// the reward's.
		v.spec.Allocators = res.Spec.Allocators
		v.nCredit, v.rewardBy = len(res.Spec.Allocators), rewardBy
	}
	probe, err := env.NewEpisode(setup)
	if err != nil {
		return nil, bad("%v", err)
	}
	if rec := probe.Record(); rec != nil {
		return nil, bad("the scenario's episode ended before anyone acted (%s %s): it cannot be stepped: %s", rec.Status, rec.End, rec.Err)
	}
	sc, params := res.Scenario, res.Config.Params
	if sa, ok := sc.(env.StructuredActions); ok {
		v.check = sa.CheckAnswer
	}
	as, ok := sc.(env.ActionSets)
	if !ok {
		return nil, bad("scenario %s declares no action sets (env.ActionSets): a vector environment's actions are indexes of them", res.Info.Name)
	}
	v.feats, _ = sc.(env.Features)
	v.actionSets, v.params = as, params
	if e := s.checkSeats(res.Info.Name, len(probe.Seats())); e != nil {
		return nil, e
	}
	v.agents = slices.Clone(probe.Seats())
	v.house = make([]bool, len(v.agents))
	if len(req.Open) > 0 {
		// Sets, not scans: open may name each of 100,000 agents.
		open := make(map[string]bool, len(req.Open))
		for _, id := range req.Open {
			open[id] = true
		}
		known := make(map[string]bool, len(v.agents))
		for k, seat := range v.agents {
			v.house[k] = !open[seat.ID]
			known[seat.ID] = true
		}
		for _, id := range req.Open {
			if !known[id] {
				return nil, bad("open: no agent %q (the agents: %v)", id, agentIDs(v.agents))
			}
		}
	}
	for k, h := range v.house {
		if !h {
			v.learners = append(v.learners, k)
		}
	}
	a := &v.answer
	a.Scenario, a.Params, a.NumEnvs = res.Info.Name, params.Map(), req.NumEnvs
	if v.nCredit > 0 {
		a.Allocators = res.Spec.Allocators
		if v.rewardBy >= 0 {
			a.RewardAllocator = a.Allocators[v.rewardBy]
		}
	}
	for _, seat := range v.agents {
		set := as.ActionSet(params, seat.Role)
		if len(set) == 0 {
			return nil, bad("scenario %s: role %s declares no action set: it has no fixed action space", res.Info.Name, seat.Role)
		}
		idx := make(map[string]int32, len(set))
		for i, m := range set {
			idx[m] = int32(i)
		}
		v.sets, v.index = append(v.sets, set), append(v.index, idx)
		v.k = max(v.k, len(set))
		va := envclient.VectorAgent{Agent: seat.ID, Role: seat.Role, House: v.house[len(a.Agents)], Actions: set}
		n := cmp.Or(req.ViewBytes, DefaultViewBytes)
		if v.feats != nil {
			sp := v.feats.ObservationSpace(params, seat.Role)
			if err := sp.Validate(); err != nil {
				return nil, errorf(http.StatusInternalServerError, envclient.CodeInternal, "scenario %s, role %s: %v", res.Info.Name, seat.Role, err)
			}
			va.Observation = spaceOf(sp)
			n = sp.Size()
		}
		v.obsLen = append(v.obsLen, n)
		v.obsDim = max(v.obsDim, n)
		a.Agents = append(a.Agents, va)
	}
	a.ObsDim, a.NumActions, a.ObsDType = v.obsDim, v.k, "uint8"
	if v.feats != nil {
		a.ObsDType = "float32"
		sp := v.feats.StateSpace(params)
		if err := sp.Validate(); err != nil {
			return nil, errorf(http.StatusInternalServerError, envclient.CodeInternal, "scenario %s, state: %v", res.Info.Name, err)
		}
		a.State = spaceOf(sp)
		v.sdim = sp.Size()
	}
	n, na := req.NumEnvs, len(v.agents)
	v.cost = uint64(n) * uint64(na) * uint64(max(v.obsDim, v.k, 1)+v.sdim)
	if v.cost > maxVectorElements {
		return nil, bad("num_envs: %d envs of %d agents with %d observations and %d actions each are over %d elements a batch: fewer envs", n, na, v.obsDim, v.k, maxVectorElements)
	}
	b := &v.out
	b.NumEnvs, b.NumAgents, b.ObsDim, b.NumActions, b.StateDim, b.Final, b.NumCredit = n, na, v.obsDim, v.k, v.sdim, req.FinalObservations, v.nCredit
	b.Rewards, b.State = make([]float32, n*na), make([]float32, n*v.sdim)
	if v.feats != nil {
		b.ObsDType, b.Obs = envclient.DTypeFloat32, make([]float32, n*na*v.obsDim)
	} else {
		b.ObsDType, b.ObsBytes = envclient.DTypeUint8, make([]byte, n*na*v.obsDim)
	}
	b.Masks, b.Acting = make([]byte, n*na*v.k), make([]byte, n*na)
	b.Terminated, b.Truncated = make([]byte, n), make([]byte, n)
	v.slots = make([]vectorSlot, n)

	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.draining:
		return nil, errorf(http.StatusServiceUnavailable, envclient.CodeDraining, "the server is shutting down")
	case s.vectorEnvs+n > s.cfg.MaxVectorEnvs:
		return nil, errorf(http.StatusServiceUnavailable, envclient.CodeTooMany, "the server steps %d vector envs; %d more are over its limit of %d", s.vectorEnvs, n, s.cfg.MaxVectorEnvs)
	case s.vectorElements+v.cost > s.vectorBudget:
		return nil, errorf(http.StatusServiceUnavailable, envclient.CodeTooMany, "the server's vectors hold %d batch elements; %d more are over its limit of %d: close vectors, or ask for fewer envs or view bytes", s.vectorElements, v.cost, s.vectorBudget)
	}
	v.seed = v.seedOf(req.Seed)
	if req.RolloutID != nil {
		v.ridBase, v.fixedID = *req.RolloutID, true
	}
	a.VectorID, a.Seed = v.id, v.seed
	s.vectorEnvs += n
	s.vectorElements += v.cost
	v.last = time.Now()
	s.vectors[v.id] = v
	return v, nil
}

// spaceOf is sp on the wire.
func spaceOf(sp env.Space) *envclient.Space {
	return &envclient.Space{Shape: sp.Shape, Low: sp.Low, High: sp.High}
}

func agentIDs(seats []env.Seat) []string {
	out := make([]string, len(seats))
	for k, s := range seats {
		out[k] = s.ID
	}
	return out
}

// seedOf is the vector seed a request gives, else the server's next
// (s.mu held).
func (v *vectorEnv) seedOf(seed *uint64) uint64 {
	if seed != nil {
		return *seed
	}
	sd := seeds.Mix(v.s.cfg.Seed, v.s.seeded)
	v.s.seeded++
	return sd
}

// reset stops the episodes in play and starts NumEnvs new ones, the
// first of seed when it is set; the batch holds their first observations.
func (v *vectorEnv) reset(ctx context.Context, seed *uint64) *apiError {
	v.broken = ""
	v.begin()
	for i := range v.slots {
		v.stop(i, EndVectorReset)
	}
	if seed != nil {
		v.seed, v.next = *seed, 0
	}
	for i := range v.slots {
		if e := v.start(ctx, i); e != nil {
			return e
		}
		if e := v.observe(i); e != nil {
			return e
		}
	}
	return nil
}

// callContext is the context a call's house policies run under: r's,
// cancelled too when the vector closes (with the close's cause). Its
// stop must be called when the call ends.
func (v *vectorEnv) callContext(r context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(r)
	undo := context.AfterFunc(v.ctx, func() { cancel(context.Cause(v.ctx)) })
	return ctx, func() {
		undo()
		cancel(nil)
	}
}

// interrupted answers nil while ctx is live. Once it is done (the
// request ended, or the vector closed while a house policy played), it
// writes slot's episode, which advance stopped (aborted, end
// "interrupted"), empties the slot, and answers why the call failed.
func (v *vectorEnv) interrupted(ctx context.Context, sl *vectorSlot) *apiError {
	if ctx.Err() == nil {
		return nil
	}
	if sl.ep != nil {
		if !sl.ep.Done() {
			sl.ep.Stop(protocol.StatusAborted, env.EndInterrupted, context.Cause(ctx))
		}
		if v.s.cfg.Sink != nil {
			_ = v.write(sl, false)
		}
		sl.ep = nil
	}
	return errorf(http.StatusServiceUnavailable, envclient.CodeInternal, "vector %s: the call ended while a house policy played: %v", v.id, context.Cause(ctx))
}

// begin clears the per-step parts of the batch.
func (v *vectorEnv) begin() {
	b := &v.out
	clear(b.Rewards)
	clear(b.Terminated)
	clear(b.Truncated)
	b.Started, b.Ended = b.Started[:0], b.Ended[:0]
}

// stop ends slot i's episode, if one is in play, aborted with end, and
// writes it.
func (v *vectorEnv) stop(i int, end string) {
	sl := &v.slots[i]
	if sl.ep == nil || sl.ep.Done() {
		return
	}
	sl.ep.Stop(protocol.StatusAborted, end, fmt.Errorf("the vector environment %s: %s", v.id, end))
	if v.s.cfg.Sink != nil {
		_ = v.write(sl, false)
	}
	sl.ep = nil
}

// write hands slot's finished episode to the server's output stage, as
// every episode of the server is written (to the server's sink, if any),
// and answers its credit seat by seat when credit is asked for (nil
// otherwise, or when writing failed, which it logs).
func (v *vectorEnv) write(sl *vectorSlot, credit bool) *creditpkg.Seats {
	var seats *creditpkg.Seats
	var observe func(*episode.Record, *trajectories.Credit) error
	if credit {
		observe = func(rec *episode.Record, c *trajectories.Credit) (err error) {
			seats, err = creditpkg.SeatsOf(rec, c)
			return err
		}
	}
	rec := sl.ep.Record()
	if err := v.s.write(sl.res, rec, learnersReplay(rec, sl.setup, v.learners), observe); err != nil {
		v.s.cfg.Logger.Error("environment server: an episode could not be written", "vector", v.id, "rollout_id", sl.rid, "error", err)
		return nil
	}
	return seats
}

// start starts the vector's next episode in slot i.
func (v *vectorEnv) start(ctx context.Context, i int) *apiError {
	s := v.s
	n := v.next
	v.next++
	seed := seeds.Mix(v.seed, n)
	rid := v.ridBase + int64(n)
	if !v.fixedID {
		s.mu.Lock()
		rid = s.rollouts
		s.rollouts++
		s.mu.Unlock()
	}
	res, _, setup, e := s.resolveAt(v.spec, seed, rid, "")
	if e != nil {
		return errorf(http.StatusInternalServerError, envclient.CodeInternal, "vector %s, episode %d: %s", v.id, n, e.body.Message)
	}
	ep, err := env.NewEpisode(setup)
	if err != nil {
		return errorf(http.StatusInternalServerError, envclient.CodeInternal, "vector %s, episode %d: %v", v.id, n, err)
	}
	if rec := ep.Record(); rec != nil {
		return errorf(http.StatusInternalServerError, envclient.CodeInternal, "vector %s, episode %d (run seed %d) ended before anyone acted (%s %s): %s", v.id, n, seed, rec.Status, rec.End, rec.Err)
	}
	seats := ep.Seats()
	if len(seats) != len(v.agents) {
		return errorf(http.StatusInternalServerError, envclient.CodeInternal, "vector %s, episode %d (run seed %d) has %d seats, the vector %d: a vector's episodes must seat the same agents", v.id, n, seed, len(seats), len(v.agents))
	}
	for k, st := range seats {
		if st.ID != v.agents[k].ID || st.Role != v.agents[k].Role && !v.alike(st.Role, k) {
			return errorf(http.StatusInternalServerError, envclient.CodeInternal, "vector %s, episode %d (run seed %d) seats %s (%s) where the vector has %s (%s): a vector's episodes must seat the same agents, in roles of the same action set and observation space", v.id, n, seed, st.ID, st.Role, v.agents[k].ID, v.agents[k].Role)
		}
	}
	sl := &v.slots[i]
	sl.ep, sl.res, sl.rid, sl.setup = ep, res, rid, setup
	sl.policies = resize(sl.policies, len(seats))
	clear(sl.policies)
	v.advance(ctx, sl)
	if e := v.interrupted(ctx, sl); e != nil {
		return e
	}
	if rec := ep.Record(); rec != nil {
		return errorf(http.StatusInternalServerError, envclient.CodeInternal, "vector %s, episode %d (run seed %d) ended before the vector's agents acted (%s %s): %s", v.id, n, seed, rec.Status, rec.End, rec.Err)
	}
	if v.feats == nil {
		sl.views = resize(sl.views, len(seats))
		clear(sl.views)
	}
	v.out.Started = append(v.out.Started, envclient.Started{Env: i, Seed: seed, RolloutID: rid})
	return nil
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// observe writes slot i's row of the batch: its agents' observations,
// masks and the state, and keeps its pending seats.
func (v *vectorEnv) observe(i int) *apiError {
	sl := &v.slots[i]
	b := &v.out
	na := len(v.agents)
	sl.pend = sl.ep.Pending()
	acting := b.Acting[i*na : (i+1)*na]
	clear(acting)
	masks := b.Masks[i*na*v.k : (i+1)*na*v.k]
	clear(masks)
	for k := range sl.pend {
		p := &sl.pend[k]
		acting[p.Seat] = 1
		v.mask(p, masks[p.Seat*v.k:(p.Seat+1)*v.k])
		if v.feats == nil {
			sl.views[p.Seat] = p.View
		}
	}
	return v.observations(sl, i, b)
}

// observations writes the observations and state of slot's episode into
// row i of b's arrays.
func (v *vectorEnv) observations(sl *vectorSlot, i int, b *envclient.Batch) *apiError {
	na, d := len(v.agents), v.obsDim
	if v.feats == nil {
		for a := range na {
			row := b.ObsBytes[(i*na+a)*d : (i*na+a+1)*d]
			clear(row[copy(row, sl.views[a]):])
		}
		return nil
	}
	for a := range na {
		row := b.Obs[(i*na+a)*d : (i*na+a+1)*d]
		if err := sl.ep.Features(a, row[:v.obsLen[a]]); err != nil {
			return errorf(http.StatusInternalServerError, envclient.CodeInternal, "vector %s, env %d: %v", v.id, i, err)
		}
		clear(row[v.obsLen[a]:])
	}
	if err := sl.ep.State(b.State[i*v.sdim : (i+1)*v.sdim]); err != nil {
		return errorf(http.StatusInternalServerError, envclient.CodeInternal, "vector %s, env %d: %v", v.id, i, err)
	}
	return nil
}

// mask sets the actions of p's set that the rules allow now, as a seat
// observation's choices are.
func (v *vectorEnv) mask(p *env.PendingSeat, mask []byte) {
	set := v.sets[p.Seat]
	switch {
	case p.Legal != nil:
		idx := v.index[p.Seat]
		for _, m := range p.Legal {
			if j, ok := idx[m]; ok {
				mask[j] = 1
			}
		}
	case v.check != nil:
		for j, m := range set {
			if v.check(&p.Observation, m) == nil {
				mask[j] = 1
			}
		}
	default:
		for j := range set {
			mask[j] = 1
		}
	}
}

// step gives every pending seat of every episode its action, once all are
// checked (a refused one gives none), ends and replaces the episodes that
// end, and writes the batch.
func (v *vectorEnv) step(ctx context.Context, acts []int32) *apiError {
	if v.broken != "" {
		return errorf(http.StatusConflict, envclient.CodeBadRequest, "vector %s: an earlier step failed after its moves were made (%s): reset it", v.id, v.broken)
	}
	na := len(v.agents)
	for i := range v.slots {
		sl := &v.slots[i]
		if sl.ep == nil {
			return errorf(http.StatusConflict, envclient.CodeBadRequest, "vector %s: step before reset", v.id)
		}
		for k := range sl.pend {
			p := &sl.pend[k]
			a, set := acts[i*na+p.Seat], v.sets[p.Seat]
			if a < 0 || int(a) >= len(set) {
				return errorf(http.StatusUnprocessableEntity, envclient.CodeIllegal, "env %d: agent %s acts now, and action %d is not one of its %d actions", i, p.Agent, a, len(set))
			}
			if !v.req.PassIllegal {
				if err := table.Judge(v.check, &p.Observation, set[a]); err != nil {
					return errorf(http.StatusUnprocessableEntity, envclient.CodeIllegal, "env %d: action %d: %v", i, a, err)
				}
			}
		}
	}
	v.begin()
	if e := v.play(ctx, acts); e != nil {
		// Some envs moved, and the caller sees none of it: stepping
		// on would play them on observations it never got.
		v.broken = e.body.Message
		return e
	}
	return nil
}

// play makes the checked moves of step, env by env.
func (v *vectorEnv) play(ctx context.Context, acts []int32) *apiError {
	na := len(v.agents)
	for i := range v.slots {
		sl := &v.slots[i]
		for k := range sl.pend {
			p := &sl.pend[k]
			move := agents.Action{Text: v.sets[p.Seat][acts[i*na+p.Seat]]}
			if v.req.PassIllegal {
				if err := table.Judge(v.check, &p.Observation, move.Text); err != nil {
					move.Invalid = err.Error()
				}
			}
			if err := sl.ep.Act(p.Seat, move); err != nil {
				return errorf(http.StatusInternalServerError, envclient.CodeInternal, "vector %s, env %d: %v", v.id, i, err) // unreachable: p is pending
			}
		}
		v.advance(ctx, sl)
		if e := v.interrupted(ctx, sl); e != nil {
			return e
		}
		if sl.ep.Done() {
			if e := v.end(i); e != nil {
				return e
			}
			if e := v.start(ctx, i); e != nil {
				return e
			}
		}
		if e := v.observe(i); e != nil {
			return e
		}
	}
	return nil
}

// alike reports whether role has agent k's action set and observation
// length, so that agent k may play it in an episode: a scenario that
// deals roles per episode (werewolf) gives them all one set and space.
func (v *vectorEnv) alike(role string, k int) bool {
	params := v.params
	if !slices.Equal(v.actionSets.ActionSet(params, role), v.sets[k]) {
		return false
	}
	if v.feats != nil && v.feats.ObservationSpace(params, role).Size() != v.obsLen[k] {
		return false
	}
	return true
}

// advance plays the house's pending moves in slot's episode until it
// waits for the caller's agents, or ends: a table's way (play/table), one
// move at a time in seat order, each house seat's policy made once an
// episode, so that the episode is the one a reset with the same closed
// seats plays.
func (v *vectorEnv) advance(ctx context.Context, sl *vectorSlot) {
	ep := sl.ep
	for !ep.Done() {
		played := false
		for _, o := range ep.Pending() {
			i := o.Seat
			if !v.house[i] {
				continue
			}
			a, err := v.house1(ctx, sl, i, &o.Observation)
			if err != nil {
				if ctx.Err() != nil {
					ep.Stop(protocol.StatusAborted, env.EndInterrupted, context.Cause(ctx))
				} else {
					ep.Stop(protocol.StatusAborted, env.EndPolicyError, err)
				}
				return
			}
			if err := ep.Act(i, a); err != nil {
				ep.Stop(protocol.StatusFailed, env.EndGameError, err) // unreachable: i is pending
				return
			}
			played = true
			break // the step may have been applied: read Pending again
		}
		if !played {
			return
		}
	}
}

// house1 asks seat i's house policy for its move, as a table does
// (table.Ask).
func (v *vectorEnv) house1(ctx context.Context, sl *vectorSlot, i int, o *agents.Observation) (agents.Action, error) {
	p := sl.policies[i]
	if p == nil {
		if sl.setup.Policy != nil {
			p = sl.setup.Policy(sl.ep.Seats()[i])
		}
		if p == nil {
			return agents.Action{}, fmt.Errorf("agent %q: the setup gives its seat no policy", o.Agent)
		}
		sl.policies[i] = p
	}
	if err := sl.ep.FeaturesFor(p, i, o); err != nil {
		return agents.Action{}, fmt.Errorf("agent %q: %w", o.Agent, err)
	}
	return table.Ask(ctx, p, o)
}

// end records slot i's finished episode in the batch (rewards, its end,
// its final observations) and writes it.
func (v *vectorEnv) end(i int) *apiError {
	sl := &v.slots[i]
	b := &v.out
	rec := sl.ep.Record()
	na := len(v.agents)
	e := envclient.Ended{Env: i, RolloutID: sl.rid}
	scored := false
	switch rec.Status {
	case protocol.StatusCompleted:
		e.Status, scored = envclient.StatusCompleted, true
		b.Terminated[i] = 1
	case protocol.StatusTruncated:
		e.Status, scored = envclient.StatusTruncated, true
		b.Truncated[i] = 1
	case protocol.StatusFailed:
		e.Status = envclient.StatusFailed
		b.Truncated[i] = 1
	default:
		e.Status = envclient.StatusAborted
		b.Truncated[i] = 1
	}
	var cs *creditpkg.Seats
	if v.nCredit > 0 || v.s.cfg.Sink != nil {
		cs = v.write(sl, v.nCredit > 0)
		if cs == nil && v.nCredit > 0 {
			return errorf(http.StatusInternalServerError, envclient.CodeInternal, "vector %s, env %d: the credit of episode %d could not be computed (the server's log says why)", v.id, i, sl.rid)
		}
	}
	if scored {
		e.Team = rec.Score.Team
		rewards := b.Rewards[i*na : (i+1)*na]
		for a := range rewards {
			r, ok := rec.AgentScore(a)
			switch {
			case v.rewardBy >= 0:
				r = 0
				if end := cs.Seats[a].End; end != nil {
					r = end[v.rewardBy]
				}
			case v.team || !ok:
				r = rec.SeatReward(a) // its team's: G, or its side's
			}
			rewards[a] = float32(r)
		}
	}
	if v.nCredit > 0 {
		w := 2 + v.nCredit
		e.Credit = make([]float64, na*w)
		for a := range na {
			sc := &cs.Seats[a]
			row := e.Credit[a*w : (a+1)*w]
			row[0], row[1] = sc.Reward, sc.ScoreOr()
			copy(row[2:], sc.End)
		}
	}
	if b.Final {
		final := envclient.Batch{NumEnvs: 1, ObsDType: b.ObsDType, State: make([]float32, v.sdim)}
		if b.ObsDType == envclient.DTypeUint8 {
			final.ObsBytes = make([]byte, na*v.obsDim)
		} else {
			final.Obs = make([]float32, na*v.obsDim)
		}
		if e := v.observations(sl, 0, &final); e != nil {
			return e
		}
		e.FinalObs, e.FinalObsBytes, e.FinalState = final.Obs, final.ObsBytes, final.State
	}
	b.Ended = append(b.Ended, e)
	sl.ep = nil
	return nil
}

// close stops the vector's episodes (aborted, end) and forgets it.
func (v *vectorEnv) close(end string) {
	// Cancel first: a call playing a house policy holds mu until the
	// policy answers.
	v.cancel(fmt.Errorf("the vector environment %s: %s", v.id, end))
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return
	}
	v.closed = true
	for i := range v.slots {
		v.stop(i, end)
	}
	s := v.s
	s.mu.Lock()
	if s.vectors[v.id] == v {
		delete(s.vectors, v.id)
		s.vectorEnvs -= len(v.slots)
		s.vectorElements -= v.cost
	}
	s.mu.Unlock()
}

// handleVector creates a vector environment: POST /vectors.
func (s *Server) handleVector(w http.ResponseWriter, r *http.Request) *apiError {
	var req envclient.VectorRequest
	if e := s.decode(w, r, &req); e != nil {
		return e
	}
	s.reapSoon()
	v, e := s.createVector(&req)
	if e != nil {
		return e
	}
	return reply(w, v.answer)
}

// vectorOf looks up the vector a path names, and marks it alive.
func (s *Server) vectorOf(r *http.Request) (*vectorEnv, *apiError) {
	id := r.PathValue("vector")
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vectors[id]
	if v == nil {
		return nil, errorf(http.StatusNotFound, envclient.CodeUnknown, "no vector environment %q (it closed, went idle for %v, or never was)", id, s.cfg.SessionTimeout)
	}
	v.last = time.Now()
	return v, nil
}

// handleVectorReset resets a vector: POST /vector/{id}/reset, a JSON
// VectorReset, answered a batch frame.
func (s *Server) handleVectorReset(w http.ResponseWriter, r *http.Request) *apiError {
	var req envclient.VectorReset
	if e := s.decode(w, r, &req); e != nil {
		return e
	}
	v, e := s.vectorOf(r)
	if e != nil {
		return e
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return errorf(http.StatusNotFound, envclient.CodeUnknown, "vector environment %s is closed", v.id)
	}
	ctx, stop := v.callContext(r.Context())
	defer stop()
	if e := v.reset(ctx, req.Seed); e != nil {
		return e
	}
	return v.reply(w)
}

// handleVectorStep steps a vector: POST /vector/{id}/step, an actions
// frame, answered a batch frame.
func (s *Server) handleVectorStep(w http.ResponseWriter, r *http.Request) *apiError {
	v, e := s.vectorOf(r)
	if e != nil {
		return e
	}
	if ct := r.Header.Get("Content-Type"); ct != envclient.ContentBinary {
		return errorf(http.StatusUnsupportedMediaType, envclient.CodeMedia, "a step's body is an actions frame, Content-Type %s (not %q)", envclient.ContentBinary, ct)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return errorf(http.StatusNotFound, envclient.CodeUnknown, "vector environment %s is closed", v.id)
	}
	na := len(v.agents)
	want := envclient.ActionsHeader + 4*len(v.slots)*na
	body := resize(v.buf, want)
	rd := http.MaxBytesReader(w, r.Body, int64(want))
	n, err := io.ReadFull(rd, body)
	if err == nil {
		// The frame must end here.
		var one [1]byte
		if m, err := rd.Read(one[:]); m > 0 || !errors.Is(err, io.EOF) {
			return errorf(http.StatusRequestEntityTooLarge, envclient.CodeTooLarge, "the actions frame of %d envs × %d agents is %d bytes; this one is longer", len(v.slots), na, want)
		}
	} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "reading the actions frame: %v", err)
	}
	if err := envclient.DecodeActions(body[:n], &v.acts); err != nil {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "%v", err)
	}
	if v.acts.NumEnvs != len(v.slots) || v.acts.NumAgents != na {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "the actions frame is of %d envs × %d agents; vector %s has %d × %d", v.acts.NumEnvs, v.acts.NumAgents, v.id, len(v.slots), na)
	}
	ctx, stop := v.callContext(r.Context())
	defer stop()
	if e := v.step(ctx, v.acts.Actions); e != nil {
		return e
	}
	return v.reply(w)
}

// reply writes the vector's batch frame.
func (v *vectorEnv) reply(w http.ResponseWriter) *apiError {
	v.buf = envclient.AppendBatch(v.buf[:0], &v.out)
	h := w.Header()
	h.Set("Content-Type", envclient.ContentBinary)
	h.Set("Content-Length", fmt.Sprint(len(v.buf)))
	_, _ = w.Write(v.buf)
	return nil
}

// handleVectorClose closes a vector: POST /vector/{id}/close. Its
// episodes in play end aborted (end "closed") and are written.
func (s *Server) handleVectorClose(w http.ResponseWriter, r *http.Request) *apiError {
	var req struct{}
	if e := s.decode(w, r, &req); e != nil {
		return e
	}
	v, e := s.vectorOf(r)
	if e != nil {
		return e
	}
	v.close(EndVectorClosed)
	return reply(w, map[string]string{"vector_id": v.id, "status": "closed"})
}
