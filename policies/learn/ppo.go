package learn

import (
	"fmt"
	"math"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/finite"
	"github.com/troupe-rl/troupe/trajectories"
)

// Learn implements Learner: it reads the episode's emitted turns, in
// order, each with its advantage, and takes the configured steps of
// ascent on them (see Softmax). A turn it did not act for is an error,
// and the turns before it are learned, as the Learner contract says.
func (l *Softmax) Learn(rec *episode.Record, credit *trajectories.Credit) error {
	if !rec.Finished() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.forget(rec)
		return nil
	}
	rewards, err := l.cfg.rewards(credit)
	if err != nil {
		if rec.Emitted() == 0 {
			return nil
		}
		return fmt.Errorf("episode %d: %w", rec.Index, err)
	}
	for k, v := range rewards {
		if !finite.Is(v) {
			return fmt.Errorf("episode %d emitted turn %d: %w: the reward is %v", rec.Index, k, ErrNoReward, v)
		}
	}
	if n := rec.Emitted(); n != len(rewards) {
		return fmt.Errorf("episode %d: %w: the credit has %d values for %d emitted turns", rec.Index, ErrNoReward, len(rewards), n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	batch, err := l.read(rec, rewards)
	l.update(batch)
	l.forget(rec)
	return err
}

// read makes the batch of rec's emitted turns, each with its advantage,
// updating the baselines as it goes: a turn's baseline is the mean of the
// credit before it, so that no turn judges itself. It stops at the first
// turn it did not act for, with an error.
func (l *Softmax) read(rec *episode.Record, rewards []float64) ([]pgSample, error) {
	l.batch = l.batch[:0]
	n := 0
	for i := range rec.Turns {
		rt := &rec.Turns[i]
		if !rt.Emit {
			continue
		}
		r := rewards[n]
		n++
		t := l.pending[rt.Seed]
		if err := l.check(rec, rt, t); err != nil {
			return l.batch, fmt.Errorf("episode %d turn %d (seat %d turn %d): %w", rec.Index, i, rt.Seat, rt.Turn, err)
		}
		adv := r
		if l.cfg.Baseline == MeanBaseline {
			b, count := &t.agent.baseline, &t.agent.updates
			if t.row != nil {
				b, count = &t.row.baseline, &t.row.updates
			}
			adv = r - *b
			*count++
			*b += (r - *b) / float64(*count)
		}
		l.batch = append(l.batch, pgSample{turn: t, advantage: adv})
	}
	return l.batch, nil
}

// check reports whether t, the turn Act kept under rt's seed, is rt's:
// the same agent and the action it played.
func (l *Softmax) check(rec *episode.Record, rt *episode.Turn, t *pgTurn) error {
	if rt.Seat < 0 || rt.Seat >= len(rec.Seats) {
		return fmt.Errorf("%w: the turn names seat %d of %d", ErrUnknownTurn, rt.Seat, len(rec.Seats))
	}
	id := rec.Seats[rt.Seat].ID
	switch {
	case t == nil:
		return fmt.Errorf("%w: agent %q, whose turn of seed %#x it never played (or played over %d episodes ago)", ErrUnknownTurn, id, rt.Seed, staleAfter)
	case t.agent.id != id:
		return fmt.Errorf("%w: it played the turn of seed %#x for agent %q, not %q", ErrUnknownTurn, rt.Seed, t.agent.id, id)
	case t.legal[t.action] != rt.Action:
		return fmt.Errorf("%w: agent %q played %q, the record says %q", ErrUnknownTurn, id, t.legal[t.action], rt.Action)
	}
	return nil
}

// forget drops the turns of rec that Act kept, learned or not, and every
// 1024th episode the turns kept for over staleAfter episodes, which no
// Learn will read.
func (l *Softmax) forget(rec *episode.Record) {
	for i := range rec.Turns {
		delete(l.pending, rec.Turns[i].Seed)
	}
	l.learns++
	if l.learns%staleAfter == 0 {
		for seed, t := range l.pending {
			if t.stamp < l.learns-staleAfter {
				delete(l.pending, seed)
			}
		}
	}
}

// update takes the configured steps of ascent on batch: each epoch sums
// every turn's gradient with the parameters as the previous epoch left
// them, then steps.
func (l *Softmax) update(batch []pgSample) {
	if len(batch) == 0 {
		return
	}
	for range l.cfg.Epochs {
		for i := range batch {
			l.accumulate(&batch[i])
		}
		l.step()
	}
}

// logitGradient writes into l.dz the gradient, with respect to the turn's
// logits z, of its objective (see Softmax), from its policy probs:
//
//	∂/∂z_b A log π(a) = A (1[b = a] − π_b)
//	PPO: ρ A (1[b = a] − π_b), or 0 where the clip binds: ρ > 1+ε with
//	     A > 0, ρ < 1−ε with A < 0 (the clipped term is constant there)
//	∂/∂z_b β H = −β π_b (log π_b + H)
func (l *Softmax) logitGradient(s *pgSample, probs []float64) []float64 {
	t := s.turn
	coef := s.advantage
	if eps := l.cfg.Clip; eps > 0 {
		rho := probs[t.action] / t.old
		if (s.advantage > 0 && rho > 1+eps) || (s.advantage < 0 && rho < 1-eps) {
			coef = 0
		} else {
			coef *= rho
		}
	}
	l.dz = resizeFloats(l.dz, len(probs))
	dz := l.dz
	for b, p := range probs {
		dz[b] = -coef * p
	}
	dz[t.action] += coef
	if beta := l.cfg.Entropy; beta > 0 {
		h := 0.0
		for _, p := range probs {
			if p > 0 {
				h -= p * math.Log(p)
			}
		}
		for b, p := range probs {
			if p > 0 {
				dz[b] -= beta * p * (math.Log(p) + h)
			}
		}
	}
	return dz
}

// accumulate adds the gradient of sample s's objective to its
// parameters' gradients.
func (l *Softmax) accumulate(s *pgSample) {
	t := s.turn
	probs := l.policy(t) // also l.logits, and l.hidden for an mlp
	dz := l.logitGradient(s, probs)
	if t.row != nil {
		if !t.row.touched {
			t.row.touched = true
			l.rows = append(l.rows, t.row)
		}
		for b, g := range dz {
			t.row.grad[b] += g
		}
		return
	}
	ag := t.agent
	if !ag.touched {
		ag.touched = true
		l.touched = append(l.touched, ag)
	}
	in := t.features
	if l.cfg.Model == MLPModel {
		in = l.hidden
	}
	for b, o := range t.outs {
		g := ag.gout[o]
		for j, x := range in {
			g[j] += dz[b] * x
		}
		g[len(in)] += dz[b]
	}
	if l.cfg.Model != MLPModel {
		return
	}
	// Back through tanh: ∂z_b/∂pre_j = w_b[j] (1 − h_j²).
	for j, h := range l.hidden {
		d := 0.0
		for b, o := range t.outs {
			d += dz[b] * ag.out[o][j]
		}
		d *= 1 - h*h
		g := ag.gw1[j*(ag.inputs+1) : (j+1)*(ag.inputs+1)]
		for i, x := range t.features {
			g[i] += d * x
		}
		g[ag.inputs] += d
	}
}

// step moves every parameter an accumulated gradient touched by η times
// it, and clears the gradient.
func (l *Softmax) step() {
	eta := l.cfg.Rate
	for _, r := range l.rows {
		for b, g := range r.grad {
			r.logits[b] += eta * g
		}
		clear(r.grad)
		r.touched = false
	}
	for _, ag := range l.touched {
		for o, g := range ag.gout {
			w := ag.out[o]
			for j, x := range g {
				w[j] += eta * x
			}
			clear(g)
		}
		for k, x := range ag.gw1 {
			ag.w1[k] += eta * x
		}
		clear(ag.gw1)
		ag.touched = false
	}
	l.rows, l.touched = l.rows[:0], l.touched[:0]
}
