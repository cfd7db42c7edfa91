package learn

import (
	"github.com/troupe-rl/troupe/episode"
)

// Learning from the candidates of tree-sampled episodes (episode.Tree,
// env.PlayTree): at each turn of a tree-sampled seat its policy was asked
// K times from one history, and each answer was valued by its own
// continuation. AT-GRPO and MAGRPO (trajectories/credit) give each
// candidate its advantage within the turn's group; a learner learns from
// every candidate, not from the main line's answer alone.

// Candidates returns the record a learner learns a tree-sampled episode
// from: rec with each tree-sampled turn repeated once per candidate, in
// the candidates' order, each copy holding the candidate's answer, seed
// and notes, so that its emitted turns are the episode's samples
// (episode.Record.SampleRefs) and the credit's values, one per sample,
// fall on them in order. A record without candidates is returned as it
// is. The copies share the turn's prompt (view, inbox, state): a learner
// finds the turn's row for each and updates the candidate's action in
// it. The result shares rec's arrays where it can and is read only. A
// learner learns a tree-sampled episode as l.Learn(Candidates(rec),
// credit), with the credit the allocators gave each candidate's sample: a
// group allocator's (at-grpo, magrpo) group-relative advantage, or what an
// allocator gives the candidate's own continuation (trajectories.TreeCredit).
func Candidates(rec *episode.Record) *episode.Record {
	if len(rec.Candidates) == 0 {
		return rec
	}
	out := *rec
	out.Candidates, out.Tree = nil, nil
	out.Turns = make([]episode.Turn, 0, rec.Emitted()+len(rec.Turns))
	c := 0
	for k := range rec.Turns {
		t := &rec.Turns[k]
		for c < len(rec.Candidates) && rec.Candidates[c].Turn < k {
			c++
		}
		if !t.Emit || c >= len(rec.Candidates) || rec.Candidates[c].Turn != k {
			out.Turns = append(out.Turns, *t)
			continue
		}
		for ; c < len(rec.Candidates) && rec.Candidates[c].Turn == k; c++ {
			cand := &rec.Candidates[c]
			ct := *t
			ct.Seed, ct.Action, ct.Generation, ct.Invalid, ct.Notes = cand.Seed, cand.Action, cand.Generation, cand.Invalid, cand.Notes
			out.Turns = append(out.Turns, ct)
		}
	}
	return &out
}
