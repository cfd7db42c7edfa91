package env_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// batcher is a BatchPolicy that answers "1" and logs how it was asked:
// "act a" for Act, "batch a,b,c" for ActBatch. fail names an agent whose
// answer is an error, panics one whose ActBatch panics.
type batcher struct {
	mu           sync.Mutex
	log          []string
	fail, panics string
}

func (p *batcher) answer(obs *agents.Observation) (agents.Action, error) {
	if obs.Agent == p.fail {
		return agents.Action{}, errors.New("no answer")
	}
	return agents.Action{Text: "1"}, nil
}

func (p *batcher) Act(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = append(p.log, "act "+obs.Agent)
	return p.answer(obs)
}

func (p *batcher) ActBatch(_ context.Context, obs []agents.Observation, acts []agents.Action, errs []error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for k := range obs {
		ids = append(ids, obs[k].Agent)
		if obs[k].Agent == p.panics {
			panic("batch bug")
		}
		acts[k], errs[k] = p.answer(&obs[k])
	}
	p.log = append(p.log, "batch "+strings.Join(ids, ","))
}

// TestBatchPoliciesAreAskedOncePerStep checks when the engine uses
// ActBatch: for the actors of a step that share a BatchPolicy (runs of
// consecutive seats), never for a lone actor, a policy asked in parallel
// or a counterfactual replay; and that the episode is the one Act alone
// plays.
func TestBatchPoliciesAreAskedOncePerStep(t *testing.T) {
	sc := relayScenario(env.Simultaneous, 6, relayHooks{}, nil)
	play := func(pf env.PolicyFor, mod func(*env.Setup)) *episode.Record {
		s := env.Setup{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: pf}, Seed: 7, PolicySeed: 11}
		if mod != nil {
			mod(&s)
		}
		rec := env.RunEpisode(context.Background(), s)
		require.Empty(t, rec.Err)
		return rec
	}

	shared := &batcher{}
	rec := play(env.SamePolicy(shared), nil)
	assert.Equal(t, []string{"batch a,b,c", "batch a,b,c"}, shared.log, "one call per step")

	// What a policy that is asked agent by agent plays.
	single := &batcher{}
	byAct := play(env.SamePolicy(agents.PolicyFunc(single.Act)), nil)
	assert.Equal(t, trajectories.Transcript(trajectories.NewEpisode(byAct)), trajectories.Transcript(trajectories.NewEpisode(rec)))

	// a and c share one batcher, b has its own: no run of two seats.
	ac, b := &batcher{}, &batcher{}
	play(func(s env.Seat) agents.Policy {
		if s.ID == "b" {
			return b
		}
		return ac
	}, nil)
	assert.Equal(t, []string{"act a", "act c", "act a", "act c"}, ac.log)
	assert.Equal(t, []string{"act b", "act b"}, b.log)

	// a and b share one, c has its own: a run of two, then a lone actor.
	ab, c := &batcher{}, &batcher{}
	play(func(s env.Seat) agents.Policy {
		if s.ID == "c" {
			return c
		}
		return ab
	}, nil)
	assert.Equal(t, []string{"batch a,b", "batch a,b"}, ab.log)
	assert.Equal(t, []string{"act c", "act c"}, c.log)

	parallel := &batcher{}
	play(env.SamePolicy(parallel), func(s *env.Setup) { s.ParallelPolicies = true })
	assert.Len(t, parallel.log, 6)
	for _, l := range parallel.log {
		assert.True(t, strings.HasPrefix(l, "act "), l)
	}

	replayed := &batcher{}
	rec = play(env.SamePolicy(replayed), nil)
	replayed.log = nil
	_, err := rec.Replay.Replay(context.Background(), episode.Counterfactual{Reseed: map[int]uint64{1: 5}, Resimulate: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"act a", "act b", "act c", "act a", "act b", "act c"}, replayed.log, "a replay asks agent by agent")
}

// TestBatchPolicyFailures: an error in a batch is its agent's, named as
// Act's would be; a panic is the agent the policy was answering, and the
// agents after it are asked with Act, as when the engine asks one by one.
func TestBatchPolicyFailures(t *testing.T) {
	sc := relayScenario(env.Simultaneous, 6, relayHooks{}, nil)
	run := func(p agents.Policy) *episode.Record {
		return env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(p)}, Seed: 7, PolicySeed: 11})
	}
	rec := run(&batcher{fail: "b"})
	assert.Equal(t, env.EndPolicyError, rec.End)
	assert.Equal(t, `agent "b" (role "p") turn 0: no answer`, rec.Err)

	panics := &batcher{panics: "b"}
	rec = run(panics)
	assert.Equal(t, env.EndGameError, rec.End)
	assert.Regexp(t, `^agent "b": policy panicked: batch bug \(at batch_test\.go:\d+ in .*\(\*batcher\)\.ActBatch\)$`, rec.Err, "the panic names where the batch policy panicked")
	assert.Equal(t, []string{"act c"}, panics.log, "c, after the panic, is asked with Act")
	one := &batcher{panics: "b"}
	byAct := run(agents.PolicyFunc(func(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
		if obs.Agent == one.panics {
			panic("batch bug")
		}
		return one.Act(ctx, obs)
	}))
	assert.Equal(t, withoutSite(byAct.Err), withoutSite(rec.Err), "the episode Act alone plays, but for where it panicked")
	assert.Equal(t, []string{"act a", "act c"}, one.log)
}

// quiet is a BatchPolicy that answers nothing at all: it leaves acts and
// errs as it found them.
type quiet struct{ batcher }

func (*quiet) ActBatch(context.Context, []agents.Observation, []agents.Action, []error) {}

// TestBatchPolicyThatAnswersNothing: an errs slot the policy left unset
// is its agent's error, not a silent empty move.
func TestBatchPolicyThatAnswersNothing(t *testing.T) {
	sc := relayScenario(env.Simultaneous, 6, relayHooks{}, nil)
	rec := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(&quiet{})}, Seed: 7, PolicySeed: 11})
	assert.Equal(t, env.EndPolicyError, rec.End)
	assert.Contains(t, rec.Err, `agent "a" (role "p") turn 0: the batch policy gave no answer`)
}

// mixed is a comparable type whose values may not compare: seats that
// share one holding a sliceBatch must be asked one by one, not compared
// (which would panic).
type mixed struct{ agents.BatchPolicy }

// sliceBatch is a BatchPolicy by value with a slice in it: not comparable.
type sliceBatch struct {
	log  *batcher
	tags []string
}

func (p sliceBatch) Act(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
	return p.log.Act(ctx, obs)
}

func (p sliceBatch) ActBatch(ctx context.Context, obs []agents.Observation, acts []agents.Action, errs []error) {
	p.log.ActBatch(ctx, obs, acts, errs)
}

func TestUncomparableBatchPoliciesAreAskedOneByOne(t *testing.T) {
	sc := relayScenario(env.Simultaneous, 6, relayHooks{}, nil)
	log := &batcher{}
	p := mixed{sliceBatch{log: log, tags: []string{"x"}}}
	rec := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(p)}, Seed: 7, PolicySeed: 11})
	assert.Empty(t, rec.Err)
	assert.Equal(t, []string{"act a", "act b", "act c", "act a", "act b", "act c"}, log.log)
}

// withoutSite is a panic's error text without the place it names.
func withoutSite(err string) string {
	return regexp.MustCompile(` \(at [^()]+:\d+ in .*\)$`).ReplaceAllString(err, "")
}
