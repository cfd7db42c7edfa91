package negotiation_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/negotiation"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/trajectories"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata")

func params(t *testing.T, given map[string]string) env.Params {
	t.Helper()
	p, err := negotiation.New().Info().ParseParams(given)
	require.NoError(t, err)
	return p
}

// pair seats alice and bob with their policies.
func pair(alice, bob agents.Policy) env.PolicyFor {
	return env.ByRole(map[string]agents.Policy{negotiation.RoleAlice: alice}, bob)
}

func play(t *testing.T, given map[string]string, seed uint64, alice, bob agents.Policy) *trajectories.Episode {
	t.Helper()
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
		Play:       env.Play{Scenario: negotiation.New(), Params: params(t, given), Policy: pair(alice, bob)},
		Seed:       seed,
		PolicySeed: seed + 100,
	}))
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	return ep
}

// briefings reads both negotiators' private briefings from the episode's
// message log.
func briefings(t *testing.T, ep *trajectories.Episode) [2]negotiation.Briefing {
	t.Helper()
	var out [2]negotiation.Briefing
	n := 0
	for _, m := range ep.Messages {
		if m.Kind != negotiation.KindValues {
			continue
		}
		seat := 0
		if m.To == protocol.To(negotiation.RoleBob) {
			seat = 1
		}
		require.NoError(t, json.Unmarshal([]byte(m.Payload), &out[seat]))
		n++
	}
	require.Equal(t, 2, n, "one private briefing each")
	return out
}

func TestHarness(t *testing.T) {
	scenariotest.Check(t, negotiation.New(), scenariotest.Options{
		Params: []map[string]string{
			{},
			{"scoring": negotiation.Cooperative},
			{"scoring": negotiation.ZeroSum, "illegal": negotiation.IllegalPenalty},
			{"items": "6", "max_count": "10", "max_value": "100", "rounds": "2"},
			{"items": "1", "max_count": "1", "max_value": "1", "rounds": "1"},
		},
	})
}

func TestDocShowsTheRoles(t *testing.T) {
	scenariotest.CheckDoc(t, ".", negotiation.New().Info().Roles...)
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name       string
		given      map[string]string
		seed       uint64
		alice, bob agents.Policy
	}{
		{"fair-deal", nil, 1, negotiation.Fair(), negotiation.Fair()},
		{"greedy-vs-fair", nil, 2, negotiation.Greedy(), negotiation.Fair()},
		{"random", nil, 3, negotiation.Random(), negotiation.Random()},
		{"cooperative", map[string]string{"scoring": negotiation.Cooperative}, 1, negotiation.Fair(), negotiation.Fair()},
		{"zero-sum-walk", map[string]string{"scoring": negotiation.ZeroSum}, 4,
			agents.Replay(`{"type":"propose","take":{"book":0,"hat":0,"ball":0},"say":"all yours <3"}`), agents.Replay(negotiation.NullAction)},
		{"illegal-count", map[string]string{"illegal": negotiation.IllegalPenalty}, 5,
			negotiation.Fair(), agents.Replay(`{"type":"propose","take":{"book":99,"hat":0,"ball":0}}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := play(t, tc.given, tc.seed, tc.alice, tc.bob)
			scenariotest.Golden(t, "testdata/"+tc.name+".golden", trajectories.Transcript(ep), *update)
		})
	}
}

// TestPrivateValues checks that each negotiator is told its own values,
// and only its own: one KindValues message each, addressed to it, and a
// view that shows them.
func TestPrivateValues(t *testing.T) {
	var seen [2]*agents.Observation
	spy := func(seat int) agents.Policy {
		return agents.PolicyFunc(func(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
			if seen[seat] == nil {
				c := *obs
				c.Seen = append([]protocol.Message(nil), obs.Seen...)
				seen[seat] = &c
			}
			return negotiation.Fair().Act(ctx, obs)
		})
	}
	ep := play(t, nil, 11, spy(0), spy(1))
	brief := briefings(t, ep)
	require.NotEqual(t, brief[0].Values, brief[1].Values, "seed 11 draws different values")
	for seat, obs := range seen {
		require.NotNil(t, obs)
		var values []protocol.Message
		for _, m := range obs.Seen {
			if m.Kind == negotiation.KindValues {
				values = append(values, m)
			}
		}
		require.Len(t, values, 1, "seat %d", seat)
		assert.Equal(t, protocol.To(obs.Agent), values[0].To)
		table, err := negotiation.ReadTable(obs)
		require.NoError(t, err)
		assert.Equal(t, brief[seat].Values, table.Values)
		assert.Contains(t, obs.View, "Your value per item (private")
		assert.Contains(t, obs.View, brief[seat].Describe(brief[seat].Values))
		assert.Nil(t, obs.Legal, "answers are free-form JSON")
	}
}

func TestSeedsDrawPoolsAndValues(t *testing.T) {
	given := map[string]string{"items": "4", "max_count": "3", "max_value": "6", "rounds": "1"}
	pools, values := map[string]bool{}, map[string]bool{}
	for seed := range uint64(1000) {
		ep := play(t, given, seed, agents.Replay(negotiation.NullAction), agents.Replay(negotiation.NullAction))
		brief := briefings(t, ep)
		assert.Equal(t, brief[0].Pool, brief[1].Pool, "one pool")
		assert.Equal(t, []string{"book", "hat", "ball", "pen"}, brief[0].Items)
		for _, b := range brief {
			assert.Equal(t, 1, b.Rounds)
			for i := range b.Items {
				assert.GreaterOrEqual(t, b.Counts[i], 1)
				assert.LessOrEqual(t, b.Counts[i], 3)
				assert.GreaterOrEqual(t, b.Values[i], 0)
				assert.LessOrEqual(t, b.Values[i], 6)
			}
			assert.Positive(t, b.Total(), "a negotiator always values the pool")
			values[fmt.Sprint(b.Values)] = true
		}
		pools[fmt.Sprint(brief[0].Counts)] = true
	}
	assert.Len(t, pools, 81, "every pool of 4 items with counts 1..3 is drawn in 1,000 seeds")
	// 2,000 draws of 7^4 value vectors give about 1,360 distinct ones.
	assert.Greater(t, len(values), 1200, "values are drawn per negotiator and seed")
}

// proposeThen plays alice's proposal and bob's answer.
func proposeThen(t *testing.T, given map[string]string, seed uint64, proposal, answer string) *trajectories.Episode {
	t.Helper()
	return play(t, given, seed, agents.Replay(proposal), agents.Replay(answer))
}

func TestAcceptMakesTheDeal(t *testing.T) {
	// Seed 6 with one item type: alice takes 1 of the pool's count, bob
	// accepts; then bob proposes and alice accepts.
	given := map[string]string{"items": "1", "max_count": "5"}
	ep := play(t, given, 6, agents.Replay(negotiation.NullAction), agents.Replay(negotiation.NullAction))
	brief := briefings(t, ep)
	count := brief[0].Counts[0]

	ep = proposeThen(t, given, 6, `{"type":"propose","take":{"book":1}}`, `{"type":"accept"}`)
	assert.Equal(t, env.EndTerminated, ep.End)
	assert.Equal(t, fmt.Sprintf("deal: alice gets 1 book; bob gets %d book", count-1), ep.Messages[len(ep.Messages)-1].Payload)
	assert.InDelta(t, 1/float64(count), ep.Score.Agents[0], 1e-12)
	assert.InDelta(t, float64(count-1)/float64(count), ep.Score.Agents[1], 1e-12)

	ep = play(t, given, 6, agents.Replay(`{"type":"propose","take":{"book":0}}`, `{"type":"accept"}`),
		agents.Replay(`{"type":"propose","take":{"book":1}}`))
	assert.Equal(t, fmt.Sprintf("deal: alice gets %d book; bob gets 1 book", count-1), ep.Messages[len(ep.Messages)-1].Payload)
	assert.Equal(t, []string{negotiation.Propose, negotiation.Propose, negotiation.Accept}, moveKinds(ep))
}

func moveKinds(ep *trajectories.Episode) []string {
	var kinds []string
	for _, m := range ep.Messages {
		if m.From != protocol.EnvSender {
			kinds = append(kinds, m.Kind)
		}
	}
	return kinds
}

func TestIllegalAnswers(t *testing.T) {
	walk := negotiation.NullAction
	for _, tc := range []struct {
		name       string
		alice, bob []string
		offender   int
		reason     error
	}{
		{"accept without an offer", []string{`{"type":"accept"}`}, nil, 0, negotiation.ErrNoOffer},
		{"count beyond the pool", []string{`{"type":"propose","take":{"book":0,"hat":0,"ball":0}}`},
			[]string{`{"type":"propose","take":{"book":11,"hat":0,"ball":0}}`}, 1, negotiation.ErrCount},
		{"negative count", []string{`{"type":"propose","take":{"book":-1,"hat":0,"ball":0}}`}, nil, 0, negotiation.ErrCount},
		{"missing item", []string{`{"type":"propose","take":{"book":1,"hat":0}}`}, nil, 0, negotiation.ErrItems},
		{"free text", []string{`I'll take the books, thanks`}, nil, 0, negotiation.ErrSyntax},
		{"accept after own offer", []string{`{"type":"propose","take":{"book":1,"hat":1,"ball":1}}`, `{"type":"accept"}`},
			[]string{`{"type":"propose","take":{"book":0,"hat":0,"ball":0}}`, walk}, 0, nil},
	} {
		for _, mode := range []string{negotiation.IllegalWalk, negotiation.IllegalPenalty} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				ep := play(t, map[string]string{"illegal": mode}, 3, agents.Replay(tc.alice...), agents.Replay(tc.bob...))
				if tc.reason == nil {
					// Bob's proposal replaced alice's: her accept takes
					// his offer, which leaves her everything.
					assert.Equal(t, []string{negotiation.Propose, negotiation.Propose, negotiation.Accept}, moveKinds(ep))
					assert.Equal(t, []float64{1, 0}, ep.Score.Agents)
					return
				}
				last := ep.Samples[len(ep.Samples)-1]
				assert.Equal(t, ep.Seats[tc.offender].ID, last.Metadata.Agent)
				reason, _ := last.Metadata.Extra["illegal"].(string)
				assert.Contains(t, reason, tc.reason.Error())
				assert.Equal(t, negotiation.KindIllegal, ep.Messages[len(ep.Messages)-2].Kind)
				assert.Equal(t, "no deal: "+ep.Seats[tc.offender].ID+" answered illegally", ep.Messages[len(ep.Messages)-1].Payload)
				want := []float64{0, 0}
				if mode == negotiation.IllegalPenalty {
					want[tc.offender] = negotiation.PenaltyScore
				}
				assert.Equal(t, want, ep.Score.Agents)
			})
		}
	}
}

// TestScoring checks the scoring modes' defining properties on episodes
// of random play, recomputing every score from the briefings and the deal.
func TestScoring(t *testing.T) {
	deals := 0
	for seed := range uint64(150) {
		var eps [3]*trajectories.Episode
		for k, mode := range []string{negotiation.Selfish, negotiation.Cooperative, negotiation.ZeroSum} {
			eps[k] = play(t, map[string]string{"scoring": mode}, seed, negotiation.Random(), negotiation.Random())
		}
		// The scoring changes what agents are paid, not what they see or
		// do: the same random play ends the same way.
		require.Equal(t, moveKinds(eps[0]), moveKinds(eps[1]))
		require.Equal(t, moveKinds(eps[0]), moveKinds(eps[2]))

		u := utilities(t, eps[0])
		if u != [2]float64{} {
			deals++
		}
		selfish, coop, zero := eps[0].Score, eps[1].Score, eps[2].Score
		assert.Equal(t, []float64{u[0], u[1]}, selfish.Agents, "seed %d", seed)
		assert.Equal(t, u[0]+u[1], selfish.Team)
		assert.Equal(t, u[0]+u[1], coop.Team, "cooperative: the team reward is the sum of both values")
		assert.Equal(t, []float64{coop.Team, coop.Team}, coop.Agents)
		assert.Equal(t, 0.0, zero.Team)
		assert.Equal(t, 0.0, zero.Agents[0]+zero.Agents[1], "zero-sum scores sum to 0")
		assert.Equal(t, u[0]-u[1], zero.Agents[0])
		for _, v := range u {
			assert.GreaterOrEqual(t, v, 0.0)
			assert.LessOrEqual(t, v, 1.0)
		}
	}
	assert.Greater(t, deals, 30, "random play reaches deals often enough to test their scores")
}

// utilities recomputes u_alice and u_bob from the episode's briefings and
// the last proposal before an accept; both 0 without a deal.
func utilities(t *testing.T, ep *trajectories.Episode) [2]float64 {
	t.Helper()
	brief := briefings(t, ep)
	var last protocol.Message
	for _, m := range ep.Messages {
		switch m.Kind {
		case negotiation.Propose:
			last = m.Message
		case negotiation.Accept:
			a, err := negotiation.ParseAction(last.Payload, brief[0].Pool)
			require.NoError(t, err)
			shares := [2][]int{a.Take, brief[0].Rest(a.Take)}
			if last.From == negotiation.RoleBob {
				shares[0], shares[1] = shares[1], shares[0]
			}
			var u [2]float64
			for seat := range u {
				u[seat] = float64(brief[seat].Worth(shares[seat])) / float64(brief[seat].Total())
			}
			return u
		}
	}
	return [2]float64{}
}

func TestPenaltyScores(t *testing.T) {
	bad := `{"type":"accept"}` // alice's opening accept: there is no offer
	for _, tc := range []struct {
		scoring string
		want    env.Score
	}{
		{negotiation.Selfish, env.Score{Team: -1, Agents: []float64{-1, 0}}},
		{negotiation.Cooperative, env.Score{Team: -1, Agents: []float64{-1, -1}}},
		{negotiation.ZeroSum, env.Score{Team: 0, Agents: []float64{-1, 1}}},
	} {
		ep := play(t, map[string]string{"scoring": tc.scoring, "illegal": negotiation.IllegalPenalty}, 1, agents.Replay(bad), negotiation.Fair())
		assert.Equal(t, tc.want, ep.Score, tc.scoring)
		ep = play(t, map[string]string{"scoring": tc.scoring}, 1, agents.Replay(bad), negotiation.Fair())
		assert.Equal(t, env.Score{Agents: []float64{0, 0}}, ep.Score, "%s: illegal=walk is no deal", tc.scoring)
	}
}

func TestRoundsRunOut(t *testing.T) {
	offer := `{"type":"propose","take":{"book":1,"hat":1,"ball":1}}`
	ep := play(t, map[string]string{"rounds": "2"}, 1, agents.Replay(offer, offer), agents.Replay(offer, offer))
	assert.Equal(t, 4, len(ep.Turns), "two moves each")
	assert.Equal(t, "no deal: the last move passed without an accept", ep.Messages[len(ep.Messages)-1].Payload)
	assert.Equal(t, env.Score{Agents: []float64{0, 0}}, ep.Score)
	for _, s := range ep.Samples {
		assert.Nil(t, s.Metadata.Extra, "every move was legal")
	}
}

func TestFairPolicyDeals(t *testing.T) {
	// Fair self-play concedes to 50% each, so a split that gives both
	// half of their values is always reachable when items are divisible;
	// over many pools most episodes end in a deal, and every deal gives
	// the accepting side at least its floor.
	deals := 0
	const n = 300
	for seed := range uint64(n) {
		ep := play(t, nil, seed, negotiation.Fair(), negotiation.Fair())
		if kinds := moveKinds(ep); kinds[len(kinds)-1] == negotiation.Accept {
			deals++
			acceptor := ep.Turns[len(ep.Turns)-1].Seat
			assert.GreaterOrEqual(t, ep.Score.Agents[acceptor], 0.5, "seed %d", seed)
		}
	}
	t.Logf("fair self-play: %d deals in %d episodes", deals, n)
	assert.Greater(t, deals, n*3/4)
}

func TestGreedyAcceptsOnlyEverything(t *testing.T) {
	for seed := range uint64(100) {
		ep := play(t, nil, seed, negotiation.Fair(), negotiation.Greedy())
		if kinds := moveKinds(ep); kinds[len(kinds)-1] == negotiation.Accept && ep.Turns[len(ep.Turns)-1].Seat == 1 {
			assert.Equal(t, 1.0, ep.Score.Agents[1], "seed %d: greedy accepted less than all it values", seed)
		}
	}
}

func TestCounterfactuals(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(20) {
		ep := play(t, nil, seed, negotiation.Fair(), negotiation.Fair())
		for seat := range 2 {
			for _, cf := range []episode.Counterfactual{
				{Replace: map[int]string{seat: negotiation.NullAction}, Resimulate: true},
				{Absent: []int{seat}, Resimulate: true},
			} {
				score, err := ep.Replay.Replay(ctx, cf)
				require.NoError(t, err)
				assert.Equal(t, env.Score{Agents: []float64{0, 0}}, score, "seed %d %+v: no deal without both", seed, cf)
			}
		}
	}
}

func TestParseAction(t *testing.T) {
	pool := negotiation.Pool{Items: []string{"book", "hat", "ball"}, Counts: []int{2, 1, 3}}
	ok := []struct {
		text string
		want negotiation.Action
	}{
		{`{"type":"propose","take":{"book":1,"hat":0,"ball":3}}`, negotiation.Action{Type: "propose", Take: []int{1, 0, 3}}},
		{" \n{ \"take\" : {\"ball\":0, \"hat\":1, \"book\":2}, \"type\":\"propose\" }\t", negotiation.Action{Type: "propose", Take: []int{2, 1, 0}}},
		{`{"type":"accept"}`, negotiation.Action{Type: "accept"}},
		{`{"type":"walk","say":"bye < now"}`, negotiation.Action{Type: "walk", Say: "bye < now"}},
		{`{"say":"","type":"accept"}`, negotiation.Action{Type: "accept"}},
	}
	for _, tc := range ok {
		got, err := negotiation.ParseAction(tc.text, pool)
		require.NoError(t, err, tc.text)
		assert.Equal(t, tc.want, got, tc.text)
	}
	bad := []struct {
		text string
		err  error
	}{
		{``, negotiation.ErrSyntax},
		{`walk`, negotiation.ErrSyntax},
		{`[{"type":"walk"}]`, negotiation.ErrSyntax},
		{`{"type":"walk"} {"type":"walk"}`, negotiation.ErrSyntax},
		{`{"type":"walk"} thanks`, negotiation.ErrSyntax},
		{`{"type":"walk"`, negotiation.ErrSyntax},
		{`{"type":"WALK"}`, negotiation.ErrSyntax},
		{`{"type":"pass"}`, negotiation.ErrSyntax},
		{`{"say":"hi"}`, negotiation.ErrSyntax},
		{`{"type":"walk","type":"accept"}`, negotiation.ErrSyntax},
		{`{"type":"walk","mood":"sad"}`, negotiation.ErrSyntax},
		{`{"type":7}`, negotiation.ErrSyntax},
		{`{"type":"walk","say":7}`, negotiation.ErrSyntax},
		{`{"type":"walk","say":"` + strings.Repeat("x", negotiation.MaxSay+1) + `"}`, negotiation.ErrSyntax},
		{`{"type":"accept","take":{"book":1,"hat":0,"ball":0}}`, negotiation.ErrSyntax},
		{`{"type":"propose"}`, negotiation.ErrSyntax},
		{`{"type":"propose","take":[1,0,0]}`, negotiation.ErrSyntax},
		{`{"type":"propose","take":{"book":1.5,"hat":0,"ball":0}}`, negotiation.ErrSyntax},
		{`{"type":"propose","take":{"book":1e0,"hat":0,"ball":0}}`, negotiation.ErrSyntax},
		{`{"type":"propose","take":{"book":"1","hat":0,"ball":0}}`, negotiation.ErrSyntax},
		{`{"type":"propose","take":{"book":null,"hat":0,"ball":0}}`, negotiation.ErrSyntax},
		{`{"type":"propose","take":{"book":1,"book":1,"hat":0,"ball":0}}`, negotiation.ErrSyntax},
		{`{"type":"propose","take":{"book":1,"hat":0}}`, negotiation.ErrItems},
		{`{"type":"propose","take":{"book":1,"hat":0,"ball":0,"pen":0}}`, negotiation.ErrItems},
		{`{"type":"propose","take":{"Book":1,"hat":0,"ball":0}}`, negotiation.ErrItems},
		{`{"type":"propose","take":{"book":3,"hat":0,"ball":0}}`, negotiation.ErrCount},
		{`{"type":"propose","take":{"book":0,"hat":0,"ball":-1}}`, negotiation.ErrCount},
		{`{"type":"propose","take":{"book":99999999999999999999,"hat":0,"ball":0}}`, negotiation.ErrSyntax},
	}
	for _, tc := range bad {
		_, err := negotiation.ParseAction(tc.text, pool)
		assert.ErrorIs(t, err, tc.err, "%q", tc.text)
	}
}

func FuzzParseAction(f *testing.F) {
	pool := negotiation.Pool{Items: []string{"book", "hat", "ball"}, Counts: []int{2, 1, 3}}
	for _, s := range []string{
		`{"type":"propose","take":{"book":1,"hat":0,"ball":3},"say":"x"}`, `{"type":"accept"}`, `{"type":"walk"}`, `{`, `"x"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		a, err := negotiation.ParseAction(text, pool)
		if err != nil {
			return
		}
		// Whatever parses is canonical once encoded, and encodes back to
		// the same action.
		enc := a.Encode(pool)
		b, err := negotiation.ParseAction(enc, pool)
		require.NoError(t, err, "%q encoded as %q", text, enc)
		require.Equal(t, a, b)
		require.Equal(t, enc, b.Encode(pool))
	})
}

func TestActionSchema(t *testing.T) {
	pool := negotiation.Pool{Items: []string{"book", "hat"}, Counts: []int{2, 4}}
	var schema struct {
		OneOf []struct {
			Properties struct {
				Type struct {
					Const string `json:"const"`
				} `json:"type"`
				Take *struct {
					Properties map[string]struct {
						Type    string `json:"type"`
						Minimum int    `json:"minimum"`
						Maximum int    `json:"maximum"`
					} `json:"properties"`
					Required []string `json:"required"`
				} `json:"take"`
			} `json:"properties"`
			Required             []string `json:"required"`
			AdditionalProperties bool     `json:"additionalProperties"`
		} `json:"oneOf"`
	}
	require.NoError(t, json.Unmarshal([]byte(negotiation.ActionSchema(pool)), &schema))
	require.Len(t, schema.OneOf, 3)
	var types []string
	for _, alt := range schema.OneOf {
		types = append(types, alt.Properties.Type.Const)
		assert.False(t, alt.AdditionalProperties)
		assert.Contains(t, alt.Required, "type")
	}
	assert.Equal(t, []string{negotiation.Propose, negotiation.Accept, negotiation.Walk}, types)
	take := schema.OneOf[0].Properties.Take
	require.NotNil(t, take)
	assert.Equal(t, []string{"book", "hat"}, take.Required)
	assert.Equal(t, 2, take.Properties["book"].Maximum)
	assert.Equal(t, 4, take.Properties["hat"].Maximum)
	assert.Equal(t, "integer", take.Properties["hat"].Type)

	sc := negotiation.New()
	p := params(t, map[string]string{"items": "2", "max_count": "7"})
	assert.Equal(t, negotiation.ActionSchema(negotiation.Pool{Items: []string{"book", "hat"}, Counts: []int{7, 7}}),
		sc.ActionSchema(p, negotiation.RoleBob))
	assert.Equal(t, sc.ActionSchema(p, negotiation.RoleAlice), sc.ActionSchema(p, negotiation.RoleBob))
	assert.Empty(t, sc.ActionSchema(p, "referee"))
}

func TestPolicyErrors(t *testing.T) {
	ctx := context.Background()
	for _, pol := range []agents.Policy{negotiation.Fair(), negotiation.Greedy(), negotiation.Random()} {
		_, err := pol.Act(ctx, &agents.Observation{Agent: "alice"})
		require.ErrorIs(t, err, negotiation.ErrUnbriefed)
		_, err = pol.Act(ctx, &agents.Observation{Agent: "alice", Seen: []protocol.Message{
			{From: protocol.EnvSender, To: "alice", Kind: negotiation.KindValues, Payload: "{not json"},
		}})
		require.ErrorIs(t, err, negotiation.ErrUnbriefed)
	}
	_, err := negotiation.New().Info().Policies["fair"](env.PolicyRequest{Params: params(t, nil), Role: "referee"})
	require.ErrorContains(t, err, `role "referee"`)
}

// TestCheckAnswerAgreesWithTheGame: for every answer of random play, and
// for illegal variants of it, CheckAnswer on the mover's observation says
// what the game then rules.
func TestCheckAnswerAgreesWithTheGame(t *testing.T) {
	answers := []string{
		`{"type":"accept"}`, `{"type":"walk"}`, `{"type":"propose","take":{"book":1,"hat":1,"ball":1}}`,
		`{"type":"propose","take":{"book":9,"hat":0,"ball":0}}`, `{"type":"propose","take":{"book":0}}`, `deal!`,
	}
	checked := 0
	for seed := range uint64(60) {
		for _, bad := range answers {
			var verdict error
			first := true
			probe := agents.PolicyFunc(func(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
				if obs.Turn < 2 || !first {
					return negotiation.Random().Act(ctx, obs)
				}
				first = false
				verdict = negotiation.CheckAnswer(obs, bad)
				return agents.Action{Text: bad}, nil
			})
			ep := play(t, nil, seed, probe, negotiation.Random())
			if first {
				continue // random play ended before alice's third move
			}
			checked++
			var probed protocol.Sample
			for _, s := range ep.Samples {
				if s.Metadata.Agent == negotiation.RoleAlice && s.Metadata.Turn == 2 {
					probed = s
				}
			}
			require.Equal(t, bad, probed.Response)
			reason, illegal := probed.Metadata.Extra["illegal"]
			if verdict == nil {
				assert.False(t, illegal, "seed %d %s: the game ruled %v", seed, bad, reason)
			} else {
				assert.Equal(t, verdict.Error(), reason, "seed %d %s", seed, bad)
			}
		}
	}
	assert.Greater(t, checked, 60)
	_, err := negotiation.Fair().Act(context.Background(), &agents.Observation{})
	require.ErrorIs(t, err, negotiation.ErrUnbriefed)
	require.ErrorIs(t, negotiation.CheckAnswer(&agents.Observation{}, `{"type":"walk"}`), negotiation.ErrUnbriefed)
}

// TestScenarioInterfaces: what a command line that holds only an
// env.Scenario discovers by type assertion to wire an LLM policy.
func TestScenarioInterfaces(t *testing.T) {
	var sc env.Scenario = negotiation.New()
	wiring, ok := sc.(interface {
		ActionSchema(p env.Params, role string) string
		CheckAnswer(obs *agents.Observation, text string) error
	})
	require.True(t, ok)
	for _, r := range sc.Info().Roles {
		assert.True(t, json.Valid([]byte(wiring.ActionSchema(params(t, nil), r.Name))), r.Name)
	}
	assert.Error(t, wiring.CheckAnswer(&agents.Observation{Role: sc.Info().Roles[0].Name}, "not json"))
}
