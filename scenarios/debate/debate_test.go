package debate_test

import (
	"context"
	"encoding/json"
	"flag"
	"go/token"
	"go/types"
	"math"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/debate"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/trajectories"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata")

func params(t *testing.T, given map[string]string) env.Params {
	t.Helper()
	p, err := debate.New().Info().ParseParams(given)
	require.NoError(t, err)
	return p
}

func pair(solver, critic agents.Policy) env.PolicyFor {
	return env.ByRole(map[string]agents.Policy{debate.RoleSolver: solver}, critic)
}

func playEpisode(t *testing.T, given map[string]string, seed uint64, solver, critic agents.Policy) *trajectories.Episode {
	t.Helper()
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
		Play:       env.Play{Scenario: debate.New(), Params: params(t, given), Policy: pair(solver, critic)},
		Seed:       seed,
		PolicySeed: seed + 100,
	}))
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	return ep
}

// question returns the puzzle the episode announced.
func question(t *testing.T, ep *trajectories.Episode) string {
	t.Helper()
	require.NotEmpty(t, ep.Messages)
	require.Equal(t, debate.KindPuzzle, ep.Messages[0].Kind)
	return ep.Messages[0].Payload
}

func answer(v int64) string { return debate.Answer{Value: v}.Encode() }

func TestHarness(t *testing.T) {
	scenariotest.Check(t, debate.New(), scenariotest.Options{
		Params: []map[string]string{
			{},
			{"kind": debate.Arithmetic, "difficulty": "5", "rounds": "1"},
			{"kind": debate.Modular, "difficulty": "4", "skill": "0"},
			{"kind": debate.Linear, "difficulty": "3", "rounds": "10", "skill": "1"},
		},
	})
}

func TestDocShowsTheRoles(t *testing.T) {
	scenariotest.CheckDoc(t, ".", debate.New().Info().Roles...)
}

func TestGolden(t *testing.T) {
	scripted := func(skill float64) (agents.Policy, agents.Policy) {
		return debate.ScriptedSolver(skill), debate.Checker()
	}
	revising, checker := scripted(0.5)
	for _, tc := range []struct {
		name           string
		given          map[string]string
		seed           uint64
		solver, critic agents.Policy
	}{
		{"scripted-revises", nil, 3, revising, checker},
		{"arithmetic-hard", map[string]string{"kind": debate.Arithmetic, "difficulty": "5"}, 1, debate.ScriptedSolver(1), debate.Checker()},
		{"modular", map[string]string{"kind": debate.Modular, "difficulty": "3"}, 2, debate.ScriptedSolver(0), debate.Checker()},
		{"linear", map[string]string{"kind": debate.Linear, "difficulty": "4"}, 4, debate.ScriptedSolver(1), debate.Checker()},
		{"random", nil, 5, debate.RandomSolver(), debate.RandomCritic()},
		{"illegal", nil, 6, agents.Replay("42", `{"answer": 7, "explanation": "a guess"}`), agents.Replay(`{"verdict":"object","message":"not JSON"}`, "looks fine")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := playEpisode(t, tc.given, tc.seed, tc.solver, tc.critic)
			scenariotest.Golden(t, "testdata/"+tc.name+".golden", trajectories.Transcript(ep), *update)
		})
	}
}

// TestLabels checks the ground truth over many seeds of every kind and
// difficulty: every sample's label is the answer, Solve computes the same
// answer from the question alone, and a right final answer scores 1.
func TestLabels(t *testing.T) {
	kinds := map[string]int{}
	for _, kind := range []string{debate.Arithmetic, debate.Modular, debate.Linear, debate.Mixed} {
		for d := 1; d <= 5; d++ {
			given := map[string]string{"kind": kind, "difficulty": strconv.Itoa(d), "rounds": "1"}
			for seed := range uint64(40) {
				ep := playEpisode(t, given, seed, debate.ScriptedSolver(1), debate.Checker())
				q := question(t, ep)
				want, err := debate.Solve(q)
				require.NoError(t, err, q)
				for _, s := range ep.Samples {
					require.Equal(t, protocol.TextLabel(strconv.FormatInt(want, 10)), s.Label, q)
				}
				require.Equal(t, 1.0, ep.Score.Team, q)
				switch {
				case strings.HasPrefix(q, "Solve"):
					kinds[debate.Linear]++
				case strings.Contains(q, " mod "):
					kinds[debate.Modular]++
				default:
					kinds[debate.Arithmetic]++
				}
			}
		}
	}
	// 200 of each fixed kind, and mixed spreads its 200 over the three.
	for _, k := range []string{debate.Arithmetic, debate.Modular, debate.Linear} {
		assert.Greater(t, kinds[k], 240, k)
	}
}

// goEval evaluates an integer expression with the Go compiler's exact
// constant arithmetic: an oracle that shares no code with the scenario.
func goEval(t *testing.T, expr string) *big.Int {
	t.Helper()
	tv, err := types.Eval(token.NewFileSet(), nil, token.NoPos, expr)
	require.NoError(t, err, expr)
	v, ok := new(big.Int).SetString(tv.Value.ExactString(), 10)
	require.True(t, ok, expr)
	return v
}

// TestPuzzlesAreRight checks NewPuzzle's answers against an independent
// oracle: Go's constant evaluation of the expression (arithmetic), of the
// base followed by big.Int's modular power (modular), and of both sides of
// the equation with the root put in for x (linear).
func TestPuzzlesAreRight(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	modRE := regexp.MustCompile(`^Compute (.+)\^([0-9]+) mod ([0-9]+)\.$`)
	linRE := regexp.MustCompile(`^Solve for the integer x: (.+) = (.+)\.$`)
	for i := range 500 {
		d := 1 + i%5
		p, err := debate.NewPuzzle(rng, debate.Arithmetic, d)
		require.NoError(t, err)
		expr := strings.TrimSuffix(strings.TrimPrefix(p.Question, "Compute "), ".")
		assert.Equal(t, goEval(t, expr).String(), strconv.FormatInt(p.Answer, 10), p.Question)

		p, err = debate.NewPuzzle(rng, debate.Modular, d)
		require.NoError(t, err)
		m := modRE.FindStringSubmatch(p.Question)
		require.NotNil(t, m, p.Question)
		e, _ := new(big.Int).SetString(m[2], 10)
		mod, _ := new(big.Int).SetString(m[3], 10)
		want := new(big.Int).Exp(goEval(t, m[1]), e, mod)
		assert.Equal(t, want.String(), strconv.FormatInt(p.Answer, 10), p.Question)

		p, err = debate.NewPuzzle(rng, debate.Linear, d)
		require.NoError(t, err)
		m = linRE.FindStringSubmatch(p.Question)
		require.NotNil(t, m, p.Question)
		root := "(" + strconv.FormatInt(p.Answer, 10) + ")"
		left, right := strings.ReplaceAll(m[1], "x", root), strings.ReplaceAll(m[2], "x", root)
		left, right = strings.ReplaceAll(left, "-"+root, "-1*"+root), strings.ReplaceAll(right, "-"+root, "-1*"+root)
		assert.Equal(t, goEval(t, left).String(), goEval(t, right).String(), p.Question)
		if d >= 3 {
			assert.Contains(t, m[2], "x", "x on both sides from difficulty 3")
		}
	}
}

func TestSolve(t *testing.T) {
	for q, want := range map[string]int64{
		"Compute 7 + 3 * (12 - 5).":                   28,
		"Compute 2 - (3 - 4).":                        3,
		"Compute 2 - 3 - 4.":                          -5,
		"Compute 2 * 3 + 4 * 5.":                      26,
		"Compute 3^4 mod 5.":                          1,
		"Compute (7 * 8 + 9)^3 mod 11.":               65 * 65 % 11 * 65 % 11,
		"Compute 2^62 mod 1000000007.":                (1 << 62) % 1000000007,
		"Solve for the integer x: 3*x - 7 = 2*x + 5.": 12,
		"Solve for the integer x: -x + 4 = 10.":       -6,
		"Solve for the integer x: x = -3.":            -3,
		"Solve for the integer x: 5*x = 2*x - 9.":     -3,
	} {
		got, err := debate.Solve(q)
		require.NoError(t, err, q)
		assert.Equal(t, want, got, q)
	}
	for _, q := range []string{
		"", "What is 2 + 2?", "Compute 2 +.", "Compute (2 + 3.", "Compute 2 + 3", "Compute 9223372036854775807 + 1.",
		"Compute 3037000500 * 3037000500.", "Compute 2^64.", "Solve for the integer x: 2*x = 3.",
		"Solve for the integer x: 2*x + 1 = 2*x + 3.", "Solve for the integer x: y = 3.",
	} {
		_, err := debate.Solve(q)
		assert.ErrorIs(t, err, debate.ErrPuzzle, q)
	}
	// Huge exponents of 0, 1 and -1 are cheap and exact.
	got, err := debate.Solve("Compute (0 - 1)^1000000000000001.")
	require.NoError(t, err)
	assert.Equal(t, int64(-1), got)
}

func TestNewPuzzleErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	_, err := debate.NewPuzzle(rng, debate.Linear, 0)
	assert.ErrorContains(t, err, "difficulty 0")
	_, err = debate.NewPuzzle(rng, "riddle", 2)
	assert.ErrorContains(t, err, `"riddle"`)
}

func TestDifficultyGrows(t *testing.T) {
	// Mean operand count and magnitude of arithmetic puzzles rise with
	// difficulty: count the numbers in the question.
	var prev float64
	for d := 1; d <= 5; d++ {
		rng := rand.New(rand.NewPCG(uint64(d), 7))
		total := 0
		for range 100 {
			p, err := debate.NewPuzzle(rng, debate.Arithmetic, d)
			require.NoError(t, err)
			assert.Equal(t, d+2, len(strings.FieldsFunc(p.Question, func(r rune) bool { return r < '0' || r > '9' })), p.Question)
			total += len(p.Question)
			if d < 3 {
				assert.NotContains(t, p.Question, "(", "no parentheses below difficulty 3")
			}
			if d == 1 {
				assert.NotContains(t, p.Question, "*", "no products at difficulty 1")
			}
		}
		mean := float64(total) / 100
		assert.Greater(t, mean, prev, "difficulty %d", d)
		prev = mean
	}
}

func TestRevisionFlow(t *testing.T) {
	ep := playEpisode(t, nil, 8, debate.ScriptedSolver(1), debate.Checker())
	truth, err := debate.Solve(question(t, ep))
	require.NoError(t, err)

	// Wrong, objection, wrong, objection, right (final without review).
	ep = playEpisode(t, map[string]string{"rounds": "3"}, 8,
		agents.Replay(answer(truth+1), answer(truth+2), answer(truth)), debate.Checker())
	assert.Equal(t, 1.0, ep.Score.Team)
	assert.Equal(t, []float64{1, 1}, ep.Score.Agents)
	var kinds []string
	for _, m := range ep.Messages {
		kinds = append(kinds, m.Kind)
	}
	assert.Equal(t, []string{"puzzle", "answer", "verdict", "answer", "verdict", "answer", "result"}, kinds)
	assert.Equal(t, "correct: the final answer is "+strconv.FormatInt(truth, 10)+", the right answer "+strconv.FormatInt(truth, 10),
		ep.Messages[len(ep.Messages)-1].Payload)
	assert.Len(t, ep.Turns, 5, "the last answer is not reviewed")

	// A final wrong answer scores 0 whatever the critic said before.
	ep = playEpisode(t, map[string]string{"rounds": "2"}, 8, agents.Replay(answer(truth), answer(truth+1)),
		agents.Replay(`{"verdict":"object","message":"are you sure?"}`))
	assert.Equal(t, env.Score{Team: 0, Agents: []float64{0, 0}}, ep.Score)

	// The critic's accept makes a wrong answer final.
	ep = playEpisode(t, nil, 8, agents.Replay(answer(truth+1)), agents.Replay(debate.NullVerdict))
	assert.Equal(t, 0.0, ep.Score.Team)
	assert.Len(t, ep.Turns, 2)
}

func TestIllegalAnswers(t *testing.T) {
	ep := playEpisode(t, nil, 8, debate.ScriptedSolver(1), debate.Checker())
	truth, err := debate.Solve(question(t, ep))
	require.NoError(t, err)

	// An illegal answer is no answer: accepted, it scores 0.
	ep = playEpisode(t, nil, 8, agents.Replay(strconv.FormatInt(truth, 10)), agents.Replay(debate.NullVerdict))
	assert.Equal(t, 0.0, ep.Score.Team)
	reason, _ := ep.Samples[0].Metadata.Extra["illegal"].(string)
	assert.Contains(t, reason, debate.ErrSyntax.Error())
	assert.Contains(t, ep.Messages[len(ep.Messages)-1].Payload, "the final answer is none")

	// The checker objects to a missing answer, and the solver recovers.
	ep = playEpisode(t, nil, 8, agents.Replay("I think it is "+strconv.FormatInt(truth, 10), answer(truth)), debate.Checker())
	assert.Equal(t, 1.0, ep.Score.Team)

	// An illegal verdict is no objection: the standing answer is final.
	ep = playEpisode(t, nil, 8, agents.Replay(answer(truth)), agents.Replay("LGTM"))
	assert.Equal(t, 1.0, ep.Score.Team)
	assert.Len(t, ep.Turns, 2)
	assert.NotNil(t, ep.Samples[1].Metadata.Extra["illegal"])
	assert.Nil(t, ep.Samples[0].Metadata.Extra)
}

func TestParseAnswerAndVerdict(t *testing.T) {
	for text, want := range map[string]debate.Answer{
		`{"answer":12}`:                           {Value: 12},
		` {"explanation":"x<3","answer": -7 } `:   {Value: -7, Explanation: "x<3"},
		`{"answer":-9223372036854775808}`:         {Value: math.MinInt64},
		`{"answer":0,"explanation":""}`:           {Value: 0},
		"{\"answer\":5,\n\"explanation\":\"ok\"}": {Value: 5, Explanation: "ok"},
	} {
		got, err := debate.ParseAnswer(text)
		require.NoError(t, err, text)
		assert.Equal(t, want, got, text)
		again, err := debate.ParseAnswer(got.Encode())
		require.NoError(t, err)
		assert.Equal(t, got, again, "canonical form reads back")
	}
	for _, text := range []string{
		``, `12`, `"12"`, `{}`, `{"answer":"12"}`, `{"answer":1.5}`, `{"answer":1e3}`, `{"answer":null}`,
		`{"answer":9223372036854775808}`, `{"answer":1,"answer":2}`, `{"answer":1,"confidence":0.9}`,
		`{"answer":1} and that's final`, `{"answer":1}{"answer":1}`, `{"answer":1,"explanation":3}`,
		`{"answer":1,"explanation":"` + strings.Repeat("x", debate.MaxText+1) + `"}`,
	} {
		_, err := debate.ParseAnswer(text)
		assert.ErrorIs(t, err, debate.ErrSyntax, "%q", text)
	}

	for text, want := range map[string]debate.Verdict{
		`{"verdict":"accept"}`:                                {Verdict: debate.Accept},
		`{"verdict":"accept","message":"nice"}`:               {Verdict: debate.Accept, Message: "nice"},
		`{"message":"step 2","verdict":"object"}`:             {Verdict: debate.Object, Message: "step 2"},
		" {\"verdict\" : \"object\", \"message\":\"why?\"}\n": {Verdict: debate.Object, Message: "why?"},
	} {
		got, err := debate.ParseVerdict(text)
		require.NoError(t, err, text)
		assert.Equal(t, want, got, text)
		again, err := debate.ParseVerdict(got.Encode())
		require.NoError(t, err)
		assert.Equal(t, got, again)
	}
	for _, text := range []string{
		``, `accept`, `{"verdict":"Accept"}`, `{"verdict":"reject"}`, `{"verdict":"object"}`,
		`{"verdict":"object","message":"  "}`, `{"verdict":"accept","score":1}`, `{"verdict":"accept","verdict":"object"}`,
		`{"verdict":true}`, `{"message":"hm"}`, `{"verdict":"accept"} ok`,
	} {
		_, err := debate.ParseVerdict(text)
		assert.ErrorIs(t, err, debate.ErrSyntax, "%q", text)
	}
}

func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{`{"answer":12,"explanation":"x"}`, `{"answer":-1}`, `{`, `12`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		a, err := debate.ParseAnswer(text)
		if err != nil {
			return
		}
		b, err := debate.ParseAnswer(a.Encode())
		require.NoError(t, err)
		require.Equal(t, a, b)
	})
}

func FuzzSolve(f *testing.F) {
	for _, s := range []string{"Compute 7 + 3 * (12 - 5).", "Compute (7 * 8 + 9)^3 mod 11.", "Solve for the integer x: 3*x - 7 = 2*x + 5."} {
		f.Add(s)
	}
	compute := regexp.MustCompile(`^Compute ([0-9 ()+*-]+?)(?: mod ([0-9]+))?\.$`)
	octal := regexp.MustCompile(`(^|[^0-9])0[0-9]`)
	f.Fuzz(func(t *testing.T, q string) {
		got, err := debate.Solve(q) // never panics or hangs, whatever the text
		m := compute.FindStringSubmatch(q)
		if err != nil || m == nil {
			return
		}
		// Where Go reads the expression the same way (it has no "--", and
		// reads 010 as octal), its exact constant arithmetic must agree.
		if octal.MatchString(m[1]) {
			return
		}
		tv, err := types.Eval(token.NewFileSet(), nil, token.NoPos, m[1])
		if err != nil || tv.Value == nil {
			return
		}
		want, ok := new(big.Int).SetString(tv.Value.ExactString(), 10)
		if !ok {
			return
		}
		if m[2] != "" {
			mod, _ := new(big.Int).SetString(m[2], 10)
			want.Mod(want, mod)
		}
		require.Equal(t, want.String(), strconv.FormatInt(got, 10), q)
	})
}

func TestSchemas(t *testing.T) {
	sc := debate.New()
	p := params(t, nil)
	for role, schema := range map[string]string{debate.RoleSolver: debate.SolverSchema, debate.RoleCritic: debate.CriticSchema} {
		assert.Equal(t, schema, sc.ActionSchema(p, role))
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(schema), &v), role)
	}
	assert.Empty(t, sc.ActionSchema(p, "judge"))
	var critic struct {
		OneOf []struct {
			Properties struct {
				Verdict struct {
					Const string `json:"const"`
				} `json:"verdict"`
			} `json:"properties"`
			Required []string `json:"required"`
		} `json:"oneOf"`
	}
	require.NoError(t, json.Unmarshal([]byte(debate.CriticSchema), &critic))
	require.Len(t, critic.OneOf, 2)
	assert.Equal(t, debate.Accept, critic.OneOf[0].Properties.Verdict.Const)
	assert.Equal(t, debate.Object, critic.OneOf[1].Properties.Verdict.Const)
	assert.Equal(t, []string{"verdict", "message"}, critic.OneOf[1].Required)
}

// TestScriptedSuccessRate: with a perfect checker, the scripted pair
// succeeds with probability 1 - (1 - skill)^rounds. Over 2,000 episodes
// the rate stays within 5 standard deviations of that.
func TestScriptedSuccessRate(t *testing.T) {
	const n = 2000
	for _, tc := range []struct {
		skill  float64
		rounds int
	}{{0.6, 3}, {0.3, 2}, {0.5, 1}, {0, 3}, {1, 1}} {
		given := map[string]string{"skill": strconv.FormatFloat(tc.skill, 'g', -1, 64), "rounds": strconv.Itoa(tc.rounds)}
		sc := debate.New()
		p := params(t, given)
		policy, err := scenariotest.NamedPolicy(sc, p, "scripted")
		require.NoError(t, err)
		sum, err := play.Run(context.Background(), play.Config{
			Play:        env.Play{Scenario: sc, Params: p, Policy: policy},
			Episodes:    n,
			Concurrency: 4,
			Seed:        77,
			FailFast:    true,
		}, &trajectories.Output{Sink: trajectories.Discard})
		require.NoError(t, err)
		want := 1 - math.Pow(1-tc.skill, float64(tc.rounds))
		sd := math.Sqrt(want * (1 - want) / n)
		assert.InDelta(t, want, sum.MeanTeamReward(), 5*sd+1e-9, "skill %v rounds %d", tc.skill, tc.rounds)
	}
}

func TestCounterfactuals(t *testing.T) {
	ctx := context.Background()
	differs := 0
	for seed := range uint64(40) {
		ep := playEpisode(t, map[string]string{"skill": "0.3"}, seed, debate.ScriptedSolver(0.3), debate.Checker())
		lenient, err := ep.Replay.Replay(ctx, episode.Counterfactual{Replace: map[int]string{1: debate.NullVerdict}, Resimulate: true})
		require.NoError(t, err)
		absent, err := ep.Replay.Replay(ctx, episode.Counterfactual{Absent: []int{1}, Resimulate: true})
		require.NoError(t, err)
		assert.Equal(t, lenient, absent, "seed %d: a critic that accepts everything is an absent one", seed)
		first := playEpisode(t, map[string]string{"rounds": "1"}, seed, debate.ScriptedSolver(0.3), debate.Checker())
		assert.Equal(t, first.Score, lenient, "seed %d: the solver's first answer is final", seed)
		if lenient.Team != ep.Score.Team {
			differs++
		}
		noSolver, err := ep.Replay.Replay(ctx, episode.Counterfactual{Absent: []int{0}})
		require.NoError(t, err)
		assert.Equal(t, env.Score{Team: 0, Agents: []float64{0, 0}}, noSolver)
	}
	assert.Greater(t, differs, 5, "the checking critic matters in some episodes")
}

func TestViews(t *testing.T) {
	var views []string
	spy := func(p agents.Policy) agents.Policy {
		return agents.PolicyFunc(func(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
			views = append(views, obs.Role+": "+obs.View)
			assert.Nil(t, obs.Legal, "answers are free-form JSON")
			return p.Act(ctx, obs)
		})
	}
	ep := playEpisode(t, map[string]string{"rounds": "2"}, 3, spy(agents.Replay(answer(1), answer(2))), spy(agents.Replay(`{"verdict":"object","message":"no"}`)))
	q := question(t, ep)
	require.Len(t, views, 3)
	for _, v := range views {
		assert.Contains(t, v, "Puzzle: "+q)
	}
	assert.Contains(t, views[0], "This is your answer 1 of 2; the critic may accept it")
	assert.Contains(t, views[1], "critic: ")
	assert.Contains(t, views[1], "The solver's answer 1 of 2: 1.")
	assert.Contains(t, views[2], "This is your answer 2 of 2: it is final.")
}

func TestPolicyErrors(t *testing.T) {
	ctx := context.Background()
	for _, pol := range []agents.Policy{debate.ScriptedSolver(1), debate.Checker()} {
		_, err := pol.Act(ctx, &agents.Observation{Agent: "x"})
		require.ErrorIs(t, err, debate.ErrNoPuzzle)
		_, err = pol.Act(ctx, &agents.Observation{Agent: "x", Seen: []protocol.Message{
			{From: protocol.EnvSender, To: protocol.Broadcast, Kind: debate.KindPuzzle, Payload: "What is love?"},
		}})
		require.ErrorIs(t, err, debate.ErrNoPuzzle)
	}
	for _, name := range []string{"scripted", "random"} {
		_, err := debate.New().Info().Policies[name](env.PolicyRequest{Params: params(t, nil), Role: "judge"})
		require.ErrorContains(t, err, `role "judge"`)
	}
}

func TestCheckAnswer(t *testing.T) {
	solver := &agents.Observation{Role: debate.RoleSolver}
	critic := &agents.Observation{Role: debate.RoleCritic}
	require.NoError(t, debate.CheckAnswer(solver, `{"answer":3}`))
	require.ErrorIs(t, debate.CheckAnswer(solver, `{"verdict":"accept"}`), debate.ErrSyntax)
	require.NoError(t, debate.CheckAnswer(critic, `{"verdict":"accept"}`))
	require.ErrorIs(t, debate.CheckAnswer(critic, `{"answer":3}`), debate.ErrSyntax)
	require.ErrorContains(t, debate.CheckAnswer(&agents.Observation{Role: "judge"}, `{}`), `"judge"`)
}

// TestScenarioInterfaces: what a command line that holds only an
// env.Scenario discovers by type assertion to wire an LLM policy.
func TestScenarioInterfaces(t *testing.T) {
	var sc env.Scenario = debate.New()
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
