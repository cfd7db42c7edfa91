// Package trajectories turns episode records into training data: the Episode
// (a record with its slime samples), the one projection that makes those
// samples (Samples), the Allocator that splits the team reward among them,
// the sinks that store samples (JSONL, nested JSONL, in memory) and read
// them back, and Output, the output stage of a run (an play.Output): play.Run
// hands it the records it played, group by group, and it allocates their
// credit, projects and numbers their samples and writes them to a sink.
//
// It does not import env: the environment depends on the shared game types
// of package episode only, and on trajectories not at all.
package trajectories

import (
	"maps"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// Episode is one finished episode: its record, and the samples projected
// from its emitted turns.
type Episode struct {
	episode.Record

	// Samples are the emitted turns, in order of play (Samples of the
	// record). Their Reward is set by the allocators; Output sets Index
	// when the episode is written.
	Samples []protocol.Sample
	// Credit is what the allocators gave the episode (Allocate); nil
	// before, or when the run has no allocators.
	Credit *Credit

	prepared *prepared // set by JSONLWriter.Prepare
}

// NewEpisode returns rec with its samples projected (Samples).
func NewEpisode(rec *episode.Record) *Episode {
	return &Episode{Record: *rec, Samples: Samples(rec)}
}

// RecordOnly returns rec as an episode whose samples are not projected:
// what a run whose sinks need no samples (NeedsSamples) works with.
// Allocate gives it its Credit all the same.
func RecordOnly(rec *episode.Record) *Episode {
	return &Episode{Record: *rec}
}

// SampleCount returns the number of ep's samples, projected or not: its
// emitted turns.
func (ep *Episode) SampleCount() int {
	if ep.Samples != nil {
		return len(ep.Samples)
	}
	return ep.Record.Emitted()
}

// Samples projects the emitted turns of rec into slime samples, in order of
// play: the one place a sample is assembled from a record. Each sample's
// prompt is the chat the policy recorded or else the turn's rendered
// observation (episode.Record.TextPrompt); its response the model's
// completion or else the action; its tokens, loss mask and log-probs the
// policy's; its status, label and metadata the episode's and the turn's.
// Rewards and indexes are left for Allocate and Output.
func Samples(rec *episode.Record) []protocol.Sample {
	return samplesInto(nil, rec)
}

// samplesInto is Samples, into buf's array when it is large enough; buf's
// elements must be zero.
func samplesInto(buf []protocol.Sample, rec *episode.Record) []protocol.Sample {
	n := rec.Emitted()
	if n == 0 {
		return nil
	}
	out := buf[:0]
	if cap(out) < n {
		out = make([]protocol.Sample, 0, n)
	}
	label := protocol.TextLabel(rec.Label)
	if len(rec.Candidates) > 0 {
		return treeSamples(out, rec, label)
	}
	for k := range rec.Turns {
		t := &rec.Turns[k]
		if !t.Emit {
			continue
		}
		// Built in place: copying a Sample, mostly pointers, costs write
		// barriers.
		out = append(out, protocol.Sample{})
		projectTurn(&out[len(out)-1], rec, t, label)
	}
	return out
}

// treeSamples appends the samples of a tree-sampled record to out: one per
// candidate of a tree-sampled turn, in the order of SampleRefs. A
// candidate's sample is its turn's with the candidate's answer, seed and
// notes, and the facts of the tree in its metadata: tree_candidate (its
// Index), tree_chosen, tree_reward, tree_team and tree_local.
func treeSamples(out []protocol.Sample, rec *episode.Record, label protocol.Label) []protocol.Sample {
	for _, ref := range rec.SampleRefs(nil) {
		t := &rec.Turns[ref.Turn]
		out = append(out, protocol.Sample{})
		s := &out[len(out)-1]
		if ref.Candidate < 0 {
			projectTurn(s, rec, t, label)
			continue
		}
		c := &rec.Candidates[ref.Candidate]
		ct := *t
		ct.Seed, ct.Action, ct.Generation, ct.Invalid, ct.Notes = c.Seed, c.Action, c.Generation, c.Invalid, c.Notes
		projectTurn(s, rec, &ct, label)
		extra := make(map[string]any, len(s.Metadata.Extra)+5)
		maps.Copy(extra, s.Metadata.Extra)
		extra["tree_candidate"] = c.Index
		extra["tree_chosen"] = c.Chosen
		extra["tree_reward"] = c.Reward
		extra["tree_team"] = c.Team
		extra["tree_local"] = c.Local
		s.Metadata.Extra = extra
	}
	return out
}

// projectTurn makes s the sample of turn t of rec.
func projectTurn(s *protocol.Sample, rec *episode.Record, t *episode.Turn, label protocol.Label) {
	s.RolloutID, s.GroupIndex = rec.RolloutID, rec.GroupIndex
	s.Response, s.Label, s.Status = t.Action, label, rec.Status
	md := &s.Metadata
	md.Scenario, md.Seed, md.Episode = rec.Scenario, rec.Seed, rec.Index
	md.Turn, md.Step, md.State = t.Turn, t.Step, string(t.State)
	md.End, md.Error, md.TeamReward = rec.End, rec.Err, rec.Score.Team
	if t.Seat >= 0 && t.Seat < len(rec.Seats) {
		s.Metadata.Agent, s.Metadata.Role = rec.Seats[t.Seat].ID, rec.Seats[t.Seat].Role
		if rec.Teams != nil {
			// The agent's side, and the reward its credit is made of.
			md.Team, md.TeamReward = rec.TeamName(rec.Seats[t.Seat].Team), rec.SeatReward(t.Seat)
		}
	}
	if t.Seat >= 0 && t.Seat < len(rec.Score.Agents) {
		s.Metadata.AgentScore = &rec.Score.Agents[t.Seat]
	}
	if t.Invalid != "" {
		s.Metadata.Extra = make(map[string]any, len(t.Notes)+1)
		s.Metadata.Extra["invalid"] = t.Invalid
		maps.Copy(s.Metadata.Extra, t.Notes)
	} else if len(t.Notes) > 0 {
		// Shared with the record: nothing changes a sample's Extra in
		// place (Allocate merges its notes into a copy).
		s.Metadata.Extra = t.Notes
	}
	g := t.Generated()
	if g.Completion != "" {
		// The response is what the model wrote; the move the game read
		// from it is kept beside it.
		s.Response = g.Completion
		s.Metadata.Action = t.Action
	}
	if g.Prompt != nil {
		s.Prompt = *g.Prompt
	} else {
		s.Prompt = protocol.TextPrompt(rec.TextPrompt(t))
	}
	if tk := g.Tokens; tk != nil && len(tk.Response) > 0 {
		s.Tokens = make([]int, 0, len(tk.Prompt)+len(tk.Response))
		s.Tokens = append(append(s.Tokens, tk.Prompt...), tk.Response...)
		s.ResponseLength = len(tk.Response)
		s.LossMask = tk.LossMask
		if s.LossMask == nil {
			s.LossMask = make([]int, len(tk.Response))
			for j := range s.LossMask {
				s.LossMask[j] = 1
			}
		}
		s.RolloutLogProbs = tk.LogProbs
	} else {
		s.Metadata.TextOnly = true
	}
}
