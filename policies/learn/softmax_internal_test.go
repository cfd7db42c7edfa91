package learn

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// The tests of this file compute every update of the Softmax learner by
// hand, from the formulas of its documentation, and compare to 1e-12.

const handTol = 1e-12

// handSoftmax is π = exp z / Σ exp z, written out.
func handSoftmax(z []float64) []float64 {
	total := 0.0
	for _, v := range z {
		total += math.Exp(v)
	}
	p := make([]float64, len(z))
	for i, v := range z {
		p[i] = math.Exp(v) / total
	}
	return p
}

// handEntropyGrad is ∂H/∂z_b = −π_b (log π_b + H).
func handEntropyGrad(p []float64) []float64 {
	h := 0.0
	for _, q := range p {
		h -= q * math.Log(q)
	}
	g := make([]float64, len(p))
	for b, q := range p {
		g[b] = -q * (math.Log(q) + h)
	}
	return g
}

// handPPOCoef is the factor c of ∂/∂z_b min(ρA, clip(ρ)A) = c (1[b=a] − π_b):
// ρA where the unclipped term is the minimum, 0 where the clip binds.
func handPPOCoef(rho, adv, eps float64) float64 {
	unclipped := rho * adv
	clipped := math.Min(math.Max(rho, 1-eps), 1+eps) * adv
	if clipped < unclipped {
		return 0 // the minimum is the constant clipped term
	}
	return unclipped
}

// oneHot is 1[b = a] − π_b.
func oneHot(p []float64, a int) []float64 {
	g := make([]float64, len(p))
	for b, q := range p {
		g[b] = -q
	}
	g[a]++
	return g
}

// actAndRecord has l act for agent p0 on each observation, in turn, and
// returns the record of an episode in which those were its emitted turns,
// with the actions chosen.
func actAndRecord(t *testing.T, l *Softmax, obs ...agents.Observation) (*episode.Record, []int) {
	t.Helper()
	rec := &episode.Record{Status: protocol.StatusCompleted, Seats: []episode.Seat{{ID: "p0", Role: "player"}}}
	var chosen []int
	for k := range obs {
		o := obs[k]
		o.Agent, o.Role, o.Turn = "p0", "player", k
		a, err := l.Act(context.Background(), &o)
		require.NoError(t, err)
		i := -1
		for j, s := range o.Legal {
			if s == a.Text {
				i = j
			}
		}
		require.GreaterOrEqual(t, i, 0)
		chosen = append(chosen, i)
		rec.Turns = append(rec.Turns, episode.Turn{Seat: 0, Turn: k, Seed: o.Seed, View: o.View, Legal: o.Legal, Action: a.Text, Emit: true})
	}
	return rec, chosen
}

func creditOf(values ...float64) *trajectories.Credit {
	return &trajectories.Credit{Allocators: []string{"test"}, Values: [][]float64{values}}
}

func newTabular(t *testing.T, cfg SoftmaxConfig, legal []string, z []float64) (*Softmax, *pgRow) {
	t.Helper()
	cfg.Model = TabularModel
	l, err := NewSoftmax(cfg)
	require.NoError(t, err)
	r := &pgRow{legal: legal, logits: append([]float64(nil), z...), grad: make([]float64, len(z))}
	l.agents["p0"] = &pgAgent{id: "p0", rows: map[string]*pgRow{"s": r}}
	return l, r
}

func assertClose(t *testing.T, want, got []float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		assert.InDelta(t, want[i], got[i], handTol, "%s[%d]", what, i)
	}
}

// Act samples from π by the turn's seed: the first action whose
// cumulative probability exceeds the seed's uniform draw on stream 1.
func TestSoftmaxActSamplesTheSoftmax(t *testing.T) {
	legal := []string{"a", "b", "c"}
	z := []float64{0.2, -0.1, 0.5}
	p := handSoftmax(z)
	counts := make([]int, 3)
	for seed := range uint64(300) {
		l, _ := newTabular(t, SoftmaxConfig{Rate: 1, Epochs: 1}, legal, z)
		obs := agents.Observation{Agent: "p0", View: "s", Legal: legal, Seed: seed}
		got, err := l.Probabilities(&obs)
		require.NoError(t, err)
		assertClose(t, p, got, "π")
		a, err := l.Act(context.Background(), &obs)
		require.NoError(t, err)
		u, acc, want := obs.Float64(streamExplore), 0.0, -1
		for i, q := range p {
			acc += q
			if want < 0 && u < acc {
				want = i
			}
		}
		assert.Equal(t, legal[want], a.Text, "seed %d", seed)
		counts[want]++
	}
	for i := range counts {
		assert.Positive(t, counts[i], "action %d is played", i)
	}
}

// REINFORCE on the table: z ← z + η (A (1[b=a] − π_b) + β ∂H/∂z_b), A the
// credit (no baseline), then with the running-mean baseline A = r − b.
func TestSoftmaxTabularReinforceByHand(t *testing.T) {
	legal := []string{"a", "b", "c"}
	z := []float64{0.2, -0.1, 0.5}
	const eta, beta = 0.3, 0.05
	for _, baseline := range []Baseline{NoBaseline, MeanBaseline} {
		l, row := newTabular(t, SoftmaxConfig{Rate: eta, Epochs: 1, Entropy: beta, Baseline: baseline}, legal, z)
		want := append([]float64(nil), z...)
		b, n := 0.0, 0
		for ep, r := range []float64{1.5, -0.25, 2} {
			obs := agents.Observation{View: "s", Legal: legal, Seed: uint64(7 + ep)}
			rec, chosen := actAndRecord(t, l, obs)
			p := handSoftmax(want)
			adv := r
			if baseline == MeanBaseline {
				adv = r - b
				n++
				b += (r - b) / float64(n)
			}
			g, h := oneHot(p, chosen[0]), handEntropyGrad(p)
			for k := range want {
				want[k] += eta * (adv*g[k] + beta*h[k])
			}
			require.NoError(t, l.Learn(rec, creditOf(r)))
			assertClose(t, want, row.logits, "logits")
		}
		assert.Empty(t, l.pending, "learned turns are dropped")
	}
}

// PPO-clip on the table, two epochs over one turn: each epoch's gradient
// is c (1[b=a] − π_b) with c = ρA, or 0 where the clip binds, ρ the
// current π(a) over the one Act played with. The logits are moved between
// Act and Learn so that ρ starts in each branch: inside [1−ε, 1+ε],
// above with A > 0 (clipped), below with A < 0 (clipped), above with
// A < 0 (unclipped: the pessimistic minimum keeps the gradient).
func TestSoftmaxPPOClipByHand(t *testing.T) {
	legal := []string{"a", "b", "c"}
	z0 := []float64{0.2, -0.1, 0.5}
	const eta, eps = 0.4, 0.2
	for _, c := range []struct {
		name        string
		shift, adv  float64
		wantClipped bool
	}{
		{"inside", 0.1, 1, false},
		{"above, A>0", 1, 1, true},
		{"below, A<0", -1, -1, true},
		{"above, A<0", 1, -1, false},
		{"below, A>0", -1, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, row := newTabular(t, SoftmaxConfig{Rate: eta, Clip: eps, Epochs: 2}, legal, z0)
			rec, chosen := actAndRecord(t, l, agents.Observation{View: "s", Legal: legal, Seed: 11})
			a := chosen[0]
			old := handSoftmax(z0)[a]
			row.logits[a] += c.shift // the policy moved since Act
			want := append([]float64(nil), row.logits...)
			clipped := false
			for range 2 {
				p := handSoftmax(want)
				rho := p[a] / old
				coef := handPPOCoef(rho, c.adv, eps)
				clipped = clipped || coef == 0
				g := oneHot(p, a)
				for k := range want {
					want[k] += eta * coef * g[k]
				}
			}
			first := handSoftmax(row.logits)[a] / old
			assert.Equal(t, c.wantClipped, handPPOCoef(first, c.adv, eps) == 0, "the case's first ρ = %v", first)
			require.NoError(t, l.Learn(rec, creditOf(c.adv)))
			assertClose(t, want, row.logits, "logits")
			if c.wantClipped {
				assert.True(t, clipped)
			}
		})
	}
}

// newFeatureLearner is a learner of model m whose agent p0 has weights
// out for the actions "x", "y" (and w1 for an mlp) over 2 features.
func newFeatureLearner(t *testing.T, cfg SoftmaxConfig, out [][]float64, w1 []float64) (*Softmax, *pgAgent) {
	t.Helper()
	l, err := NewSoftmax(cfg)
	require.NoError(t, err)
	ag := &pgAgent{id: "p0"}
	l.initAgent(ag, 2)
	ag.action("x")
	ag.action("y")
	for o := range out {
		copy(ag.out[o], out[o])
	}
	copy(ag.w1, w1)
	l.agents["p0"] = ag
	return l, ag
}

// The linear model's REINFORCE and PPO steps, by hand:
// z_b = w_b·φ + bias_b, w_b ← w_b + η c (1[b=a] − π_b) φ, bias likewise
// with 1 for φ, c = A (REINFORCE) or ρA / 0 (PPO).
func TestSoftmaxLinearByHand(t *testing.T) {
	phi := []float64{1, -0.5}
	out := [][]float64{{0.1, 0.2, 0.05}, {-0.3, 0.4, 0}}
	const eta, eps = 0.25, 0.2
	for _, c := range []struct {
		name       string
		clip       float64
		shift, adv float64
	}{
		{"reinforce", 0, 0, 1.5},
		{"ppo inside", eps, 0.05, -0.7},
		{"ppo clipped", eps, 2, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, ag := newFeatureLearner(t, SoftmaxConfig{Model: LinearModel, Rate: eta, Clip: c.clip, Epochs: 1}, out, nil)
			obs := agents.Observation{View: "s", Legal: []string{"x", "y"}, Seed: 5, Features: []float32{float32(phi[0]), float32(phi[1])}}
			rec, chosen := actAndRecord(t, l, obs)
			a := chosen[0]
			logits := func(w [][]float64) []float64 {
				z := make([]float64, 2)
				for b := range z {
					z[b] = w[b][0]*phi[0] + w[b][1]*phi[1] + w[b][2]
				}
				return z
			}
			old := handSoftmax(logits(out))[a]
			ag.out[a][2] += c.shift // the bias of the action played moved since Act
			w := [][]float64{append([]float64(nil), ag.out[0]...), append([]float64(nil), ag.out[1]...)}
			p := handSoftmax(logits(w))
			coef := c.adv
			if c.clip > 0 {
				coef = handPPOCoef(p[a]/old, c.adv, eps)
			}
			g := oneHot(p, a)
			for b := range w {
				w[b][0] += eta * coef * g[b] * phi[0]
				w[b][1] += eta * coef * g[b] * phi[1]
				w[b][2] += eta * coef * g[b]
			}
			require.NoError(t, l.Learn(rec, creditOf(c.adv)))
			assertClose(t, w[0], ag.out[0], "w_x")
			assertClose(t, w[1], ag.out[1], "w_y")
			if c.name == "ppo clipped" {
				assert.Zero(t, coef, "the case is clipped")
			}
		})
	}
}

// The MLP's step, by hand: h = tanh(W φ + c), z_b = w_b·h + bias_b, and
// with d_b = c (1[b=a] − π_b) (+ the entropy term):
// w_b ← w_b + η d_b h, bias_b ← bias_b + η d_b,
// δ_j = Σ_b d_b w_b[j] (1 − h_j²), W_j ← W_j + η δ_j φ, c_j ← c_j + η δ_j.
func TestSoftmaxMLPByHand(t *testing.T) {
	phi := []float64{1, -1}
	out := [][]float64{{0.2, -0.4, 0.1}, {-0.3, 0.6, 0}}
	w1 := []float64{0.3, -0.2, 0.1, 0.5, 0.4, -0.3} // rows (W_j1, W_j2, c_j)
	const eta, beta, eps = 0.5, 0.1, 0.2
	for _, c := range []struct {
		name string
		clip float64
		adv  float64
	}{
		{"reinforce", 0, 0.8},
		{"ppo", eps, -1.2},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, ag := newFeatureLearner(t, SoftmaxConfig{Model: MLPModel, Hidden: 2, Rate: eta, Clip: c.clip, Epochs: 1, Entropy: beta}, out, w1)
			obs := agents.Observation{View: "s", Legal: []string{"x", "y"}, Seed: 9, Features: []float32{1, -1}}
			rec, chosen := actAndRecord(t, l, obs)
			a := chosen[0]
			forward := func(w1 []float64, out [][]float64) (h, z []float64) {
				h = make([]float64, 2)
				for j := range h {
					h[j] = math.Tanh(w1[3*j]*phi[0] + w1[3*j+1]*phi[1] + w1[3*j+2])
				}
				z = make([]float64, 2)
				for b := range z {
					z[b] = out[b][0]*h[0] + out[b][1]*h[1] + out[b][2]
				}
				return h, z
			}
			_, z0 := forward(w1, out)
			old := handSoftmax(z0)[a]
			// The first layer moved since Act, so that ρ ≠ 1.
			ag.w1[0] += 0.05
			W := append([]float64(nil), ag.w1...)
			O := [][]float64{append([]float64(nil), out[0]...), append([]float64(nil), out[1]...)}
			h, z := forward(W, O)
			p := handSoftmax(z)
			coef := c.adv
			if c.clip > 0 {
				rho := p[a] / old
				require.InDelta(t, 1, rho, eps, "the case is meant unclipped")
				coef = handPPOCoef(rho, c.adv, eps)
			}
			g, hg := oneHot(p, a), handEntropyGrad(p)
			d := []float64{coef*g[0] + beta*hg[0], coef*g[1] + beta*hg[1]}
			delta := make([]float64, 2)
			for j := range delta {
				delta[j] = (d[0]*O[0][j] + d[1]*O[1][j]) * (1 - h[j]*h[j])
			}
			for b := range O {
				O[b][0] += eta * d[b] * h[0]
				O[b][1] += eta * d[b] * h[1]
				O[b][2] += eta * d[b]
			}
			for j := range delta {
				W[3*j] += eta * delta[j] * phi[0]
				W[3*j+1] += eta * delta[j] * phi[1]
				W[3*j+2] += eta * delta[j]
			}
			require.NoError(t, l.Learn(rec, creditOf(c.adv)))
			assertClose(t, O[0], ag.out[0], "w_x")
			assertClose(t, O[1], ag.out[1], "w_y")
			assertClose(t, W, ag.w1, "W")
		})
	}
}

// An episode's turns are one batch: with two turns in one state, the
// step is the sum of both gradients taken at the same logits, not two
// steps one after the other.
func TestSoftmaxBatchSumsTheEpisodesTurns(t *testing.T) {
	legal := []string{"a", "b"}
	z := []float64{0.4, -0.2}
	const eta = 0.3
	l, row := newTabular(t, SoftmaxConfig{Rate: eta, Epochs: 1}, legal, z)
	rec, chosen := actAndRecord(t, l,
		agents.Observation{View: "s", Legal: legal, Seed: 1},
		agents.Observation{View: "s", Legal: legal, Seed: 2})
	p := handSoftmax(z)
	want := append([]float64(nil), z...)
	for k, r := range []float64{1, -2} {
		g := oneHot(p, chosen[k])
		for b := range want {
			want[b] += eta * r * g[b]
		}
	}
	require.NoError(t, l.Learn(rec, creditOf(1, -2)))
	assertClose(t, want, row.logits, "logits")
}

// A counterfactual replay asks again with the episode's seeds, in another
// state, before the episode is learned (difference rewards that
// resimulate): the turn learned is the episode's, with the features and
// π_old it had, whatever the replay played.
func TestSoftmaxLearnsTheFirstTurnOfASeed(t *testing.T) {
	out := [][]float64{{0.1, 0.2, 0.05}, {-0.3, 0.4, 0}}
	const eta = 0.5
	l, ag := newFeatureLearner(t, SoftmaxConfig{Model: LinearModel, Rate: eta, Epochs: 1}, out, nil)
	phi := []float64{1, -0.5}
	rec, chosen := actAndRecord(t, l, agents.Observation{View: "s", Legal: []string{"x", "y"}, Seed: 5, Features: []float32{1, -0.5}})
	for k := range 20 { // the replays: other features, the same seed
		replay := agents.Observation{Agent: "p0", View: "s", Legal: []string{"x", "y"}, Seed: 5, Features: []float32{float32(k) - 10, 3}}
		_, err := l.Act(context.Background(), &replay)
		require.NoError(t, err)
	}
	a := chosen[0]
	p := handSoftmax([]float64{out[0][0]*phi[0] + out[0][1]*phi[1] + out[0][2], out[1][0]*phi[0] + out[1][1]*phi[1] + out[1][2]})
	g := oneHot(p, a)
	const adv = 2.0
	require.NoError(t, l.Learn(rec, creditOf(adv)))
	for b := range out {
		want := []float64{out[b][0] + eta*adv*g[b]*phi[0], out[b][1] + eta*adv*g[b]*phi[1], out[b][2] + eta*adv*g[b]}
		assertClose(t, want, ag.out[b], "w")
	}
}
