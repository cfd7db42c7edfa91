package verifiers

import (
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
)

// traceVersion is verifiers' TRACE_VERSION, the trace schema written.
const traceVersion = 1

// taskType is the task type the traces record (TraceTask.type).
const taskType = "TroupeTask"

// episodeOf is one troupe episode (a rollout of one episode) as verifiers'
// episode: the head (the episode without its traces) and one trace per
// seat, each as the delta that opens and fills it in one frame.
//
// A trace is one agent's run, as verifiers' trainer reads it: its message
// graph holds the agent's turns, each an input node (the prompt tokens the
// turn adds) and an assistant node (the sampled tokens, mask and
// log-probs), so that a root-to-leaf branch concatenates to exactly the
// ids of one troupe sample. A turn whose prompt extends the agent's
// previous turn (LLM memory) continues that branch; one that does not
// starts a new root, so a memoryless agent's trace has one branch per turn
// and a remembering one a single branch of all its turns, as
// trajectories.MergeTurns would merge them. Either way a branch is one
// sample prime-rl trains on, and its tokens are the model server's.
func episodeOf(ro *rollout.Rollout, req *RunRequest, plan *runPlan) (head map[string]any, traces []map[string]any, sums []traceSummary) {
	id := fmt.Sprintf("troupe-%s-seed%d-rollout%d", plan.scenario, ro.Seed, ro.RolloutID)
	ok := ro.Status == protocol.StatusCompleted || ro.Status == protocol.StatusTruncated
	var errs []any
	if ro.Error != "" {
		errs = append(errs, map[string]any{"type": "TroupeEpisode" + titled(string(ro.Status)), "message": ro.Error})
	}
	task := map[string]any{"type": taskType, "data": req.TaskData}
	head = map[string]any{
		"id":         id,
		"env":        map[string]any{"id": "troupe/" + plan.scenario},
		"task":       task,
		"ok":         ok,
		"is_timeout": ro.End == "deadline",
		"errors":     nonNil(errs),
	}
	stamp := map[string]any{
		"episode": id, "scenario": plan.scenario, "seed": ro.Seed, "policy_seed": ro.PolicySeed,
		"rollout_id": ro.RolloutID, "group_index": ro.GroupIndex, "status": string(ro.Status), "end": ro.End,
		"team_reward": ro.TeamReward,
	}
	for k, seat := range ro.Seats {
		var samples []*protocol.Sample
		for i := range ro.Samples {
			if ro.Samples[i].Metadata.Agent == seat.ID {
				samples = append(samples, &ro.Samples[i])
			}
		}
		frozen := plan.frozen[seat.Role]
		tr := newTraceBuilder()
		model := req.Model
		if rs, ok := plan.roles[seat.Role]; ok && rs.Model != "" {
			model = rs.Model
		}
		textOnly := false
		for _, s := range samples {
			if m, ok := s.Metadata.Extra["llm_model"].(string); ok && m != "" {
				model = m
			}
			textOnly = textOnly || s.Metadata.TextOnly
			tr.add(s, model)
		}
		// A seat is trainable when it played the request's model and
		// every turn of it carries the server's tokens: a frozen role, a
		// scripted policy or a turn without ids never becomes a sample.
		trainable := !frozen && plan.llm[seat.Role] && !textOnly && len(samples) > 0
		info := map[string]any{"troupe": withSeat(stamp, seat, frozen)}
		metrics := map[string]any{"team_reward": ro.TeamReward}
		if k < len(ro.AgentScores) {
			metrics["agent_score"] = ro.AgentScores[k]
		}
		rewards := map[string]any{}
		if trainable {
			rewards, info["turn_rewards"] = rewardsOf(samples, plan.allocators)
		}
		traceID := id + "/" + seat.ID
		var terrs []any
		if ro.Error != "" {
			terrs = errs
		}
		set := map[string]any{
			"agent":          map[string]any{"config": map[string]any{"model": model}, "name": seat.Role, "trainable": trainable},
			"rewards":        rewards,
			"metrics":        metrics,
			"info":           info,
			"is_completed":   true,
			"ok":             ok,
			"stop_condition": ro.End,
			"is_timeout":     ro.End == "deadline",
		}
		traces = append(traces, map[string]any{
			"trace": traceID,
			"open": map[string]any{
				"version":   traceVersion,
				"id":        traceID,
				"verifiers": map[string]any{"version": "troupe"},
				"task":      task,
			},
			"nodes":  nonNil(tr.nodes),
			"calls":  nonNil(tr.calls),
			"errors": nonNil(terrs),
			"set":    set,
		})
		sums = append(sums, traceSummary{ID: traceID, Nodes: len(tr.nodes), Calls: len(tr.calls)})
	}
	return head, traces, sums
}

// withSeat is the episode stamp with the seat's own identity.
func withSeat(stamp map[string]any, seat rollout.Seat, frozen bool) map[string]any {
	out := make(map[string]any, len(stamp)+4)
	for k, v := range stamp {
		out[k] = v
	}
	out["seat"], out["role"], out["frozen"] = seat.ID, seat.Role, frozen
	if seat.Team != "" {
		out["team"] = seat.Team
	}
	return out
}

// rewardsOf is a trainable seat's rewards: one per allocator of the
// request (the dict reward's keys), each the mean of the allocator's
// values over the seat's turns, which under an outcome allocator (team,
// individual, zero-sum) is the one value every turn carries, exact. The
// first allocator weighs 1 and the others 0, so that verifiers'
// Trace.reward (the weighted sum) is the first allocator's credit, as a
// scalar troupe sample's reward is, while every allocator's value is
// reported. Per-turn values (a discounted allocator's) are the info's
// turn_rewards, by allocator, in turn order.
func rewardsOf(samples []*protocol.Sample, allocators []string) (map[string]any, map[string]any) {
	names := allocators
	if len(names) == 0 && len(samples) > 0 {
		names = strings.Fields(samples[0].Metadata.Allocator)
	}
	rewards := make(map[string]any, len(names))
	perTurn := make(map[string]any, len(names))
	for a, name := range names {
		vals := make([]float64, 0, len(samples))
		sum := 0.0
		for _, s := range samples {
			v, _ := s.Reward.Get(name)
			vals = append(vals, v)
			sum += v
		}
		weight := 0.0
		if a == 0 {
			weight = 1
		}
		score := 0.0
		if len(vals) > 0 {
			score = sum / float64(len(vals))
		}
		rewards[name] = map[string]any{"score": score, "weight": weight}
		perTurn[name] = vals
	}
	return rewards, perTurn
}

// traceBuilder grows one seat's message graph from its samples.
type traceBuilder struct {
	nodes, calls []any
	prev         []int // the ids of the last branch: its last sample's tokens
	last         int   // the index of the last assistant node; -1 before any
}

func newTraceBuilder() *traceBuilder { return &traceBuilder{last: -1} }

// add appends s's turn: an input node and an assistant node, and the call
// that sampled it.
func (b *traceBuilder) add(s *protocol.Sample, model string) {
	text := promptText(s.Prompt)
	if len(s.Tokens) == 0 {
		// No ids (a scripted policy, or a server that gave none): the turn
		// is recorded as messages, chained, for reading; untrainable.
		b.node(b.parentOrNil(), map[string]any{"role": "user", "content": text}, false, nil, nil, nil)
		b.last = b.node(len(b.nodes)-1, map[string]any{"role": "assistant", "content": s.Response}, true, nil, nil, nil)
		return
	}
	promptLen := len(s.Tokens) - s.ResponseLength
	prompt, response := s.Tokens[:promptLen], s.Tokens[promptLen:]
	parent := -1
	added := prompt
	if b.last >= 0 && len(b.prev) <= len(prompt) && slices.Equal(prompt[:len(b.prev)], b.prev) {
		parent, added = b.last, prompt[len(b.prev):]
	}
	if len(added) > 0 || parent < 0 {
		parent = b.node(parent, map[string]any{"role": "user", "content": text}, false, added, falses(len(added)), nil)
	}
	mask := make([]bool, len(response))
	var logprobs []float64
	for i := range response {
		mask[i] = s.LossMask == nil || s.LossMask[i] == 1
		if mask[i] && s.RolloutLogProbs != nil {
			logprobs = append(logprobs, s.RolloutLogProbs[i])
		}
	}
	b.last = b.node(parent, map[string]any{"role": "assistant", "content": s.Response}, true, response, mask, logprobs)
	b.prev = s.Tokens
	b.calls = append(b.calls, map[string]any{
		"node":  b.last,
		"model": model,
		"usage": map[string]any{"prompt_tokens": promptLen, "completion_tokens": s.ResponseLength},
	})
}

func (b *traceBuilder) parentOrNil() int {
	if len(b.nodes) == 0 {
		return -1
	}
	return len(b.nodes) - 1
}

// node appends a MessageNode and returns its index; parent -1 is a root.
func (b *traceBuilder) node(parent int, msg map[string]any, sampled bool, ids []int, mask []bool, logprobs []float64) int {
	n := map[string]any{
		"parent":           nil,
		"message":          msg,
		"sampled":          sampled,
		"token_ids":        nonNil(ids),
		"mask":             nonNil(mask),
		"logprobs":         nonNil(logprobs),
		"semantic_parents": []any{},
	}
	if parent >= 0 {
		n["parent"] = parent
	}
	b.nodes = append(b.nodes, n)
	return len(b.nodes) - 1
}

// promptText is the text the turn's input node shows: the last message of
// a chat prompt (the observation the turn added), or the text prompt.
func promptText(p protocol.Prompt) string {
	if n := len(p.Messages); n > 0 {
		return p.Messages[n-1].Content
	}
	return p.Text
}

func falses(n int) []bool { return make([]bool, n) }

func titled(s string) string {
	if s == "" {
		return ""
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// nonNil makes an empty list a msgpack array, never nil, which
// verifiers' list fields refuse.
func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}
