package experiment

import (
	"context"
	"sync/atomic"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
)

// An experiment's cost is counted in logical environment steps (what
// Record.Steps counts), so that allocators that buy their credit with
// simulation can be compared with those that do not at equal cost. An
// episode costs:
//
//   - its main line's steps (Record.Steps);
//   - every counterfactual the allocators ask of it (difference rewards,
//     leave-one-out, Shapley's coalitions, COMA's alternatives: every
//     episode.Replayer call, and each answer of a OneOutReplayer), at the
//     steps of the counterfactual episode (episode.StepReplayer): the
//     steps an environment plays to score it, whether or not the
//     scenario rescored it without playing;
//   - with tree sampling, every candidate continuation: the steps its
//     fork played from the candidate's step to its end (a joint
//     candidate's fork once), and the counterfactuals the allocators ask
//     of the forks.
//
// The counts are sums of integers fixed by the seeds, whatever order
// concurrent replays take: the same on every run and at every
// Config.Parallel. The credit diagnostics (Diagnose) measure, and are
// not counted.

// costReplay is an episode's Replayer that counts the steps of the
// counterfactuals asked of it.
type costReplay struct {
	inner episode.Replayer
	// recorded is the episode's recorded steps, what a frozen
	// counterfactual costs when inner does not say
	// (episode.RecordedSteps).
	recorded int
	steps    atomic.Int64
}

// countReplays wraps rec's Replayer in a costReplay, unless it is one
// already or rec has none.
func countReplays(rec *episode.Record) {
	if rec.Replay == nil {
		return
	}
	if _, ok := rec.Replay.(*costReplay); ok {
		return
	}
	rec.Replay = &costReplay{inner: rec.Replay, recorded: episode.RecordedSteps(rec.Turns)}
}

// Replay implements episode.Replayer.
func (c *costReplay) Replay(ctx context.Context, cf episode.Counterfactual) (episode.Score, error) {
	if sr, ok := c.inner.(episode.StepReplayer); ok {
		score, steps, err := sr.ReplaySteps(ctx, cf)
		c.steps.Add(int64(steps))
		return score, err
	}
	c.steps.Add(int64(c.recorded))
	return c.inner.Replay(ctx, cf)
}

// ReplayOneOut implements episode.OneOutReplayer: each of the seats'
// counterfactuals is a frozen one, which costs the recorded steps.
func (c *costReplay) ReplayOneOut(null bool, seats []int, team []float64) bool {
	o, ok := c.inner.(episode.OneOutReplayer)
	if !ok || !o.ReplayOneOut(null, seats, team) {
		return false // the caller replays them one by one, through Replay
	}
	c.steps.Add(int64(len(seats) * c.recorded))
	return true
}

// replaySteps is what the counterfactuals asked of rec cost, 0 when its
// Replayer does not count (countReplays).
func replaySteps(rec *episode.Record) int64 {
	if c, ok := rec.Replay.(*costReplay); ok {
		return c.steps.Load()
	}
	return 0
}

// EpisodeCost is the cost of one episode in logical environment steps:
// Steps, its main line; Replays, the counterfactuals the allocators asked
// of it and of its candidates' continuations; Tree, the continuations
// that valued its tree-sampled candidates.
type EpisodeCost struct {
	Steps, Replays, Tree int64
}

// Total is the episode's whole cost.
func (c EpisodeCost) Total() int64 { return c.Steps + c.Replays + c.Tree }

// costOf is what rec cost (see EpisodeCost). A candidate's continuation
// is counted from its step: its fork's steps less those before it.
func costOf(rec *episode.Record) EpisodeCost {
	c := EpisodeCost{Steps: int64(rec.Steps), Replays: replaySteps(rec)}
	seen := map[*episode.Record]bool{}
	for i := range rec.Candidates {
		cand := &rec.Candidates[i]
		f := cand.Fork
		if f == nil || seen[f] || cand.Turn < 0 || cand.Turn >= len(rec.Turns) {
			continue
		}
		seen[f] = true // a joint candidate's seats share one fork
		c.Tree += int64(f.Steps - (rec.Turns[cand.Turn].Step - 1))
		c.Replays += replaySteps(f)
	}
	return c
}

// costOutput counts what each group's counterfactuals cost: before the
// allocators see the group, every record's Replayer (and its candidates'
// continuations') is wrapped in a costReplay, which the cell's observer
// reads (costOf) when the episode is learned; the records get their own
// Replayers back once the group is written, before the run recycles them.
type costOutput struct {
	play.RecyclingOutput
}

// Finish implements play.Output.
func (o costOutput) Finish(ctx context.Context, group []*episode.Record) (func(k int) (int, error), error) {
	saved := make([]episode.Replayer, len(group))
	for i, rec := range group {
		saved[i] = rec.Replay
		countReplays(rec)
		for j := range rec.Candidates {
			if f := rec.Candidates[j].Fork; f != nil {
				countReplays(f)
			}
		}
	}
	restore := func() {
		for i, rec := range group {
			rec.Replay = saved[i]
		}
	}
	write, err := o.RecyclingOutput.Finish(ctx, group)
	if err != nil {
		restore()
		return nil, err
	}
	last := len(group) - 1
	return func(k int) (int, error) {
		n, err := write(k)
		if err != nil || k == last {
			restore()
		}
		return n, err
	}, nil
}
