package agents

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/protocol"
)

// Observation is everything an agent may see when it is asked to act. The
// environment owns it: a Policy must not change it, nor keep it or any
// slice in it after Act returns (the engine records the turn from it).
type Observation struct {
	Agent string // the acting agent's id
	Role  string // its role
	State State  // its FSM state: one its role acts in
	Turn  int    // its own turn number, from 0
	Step  int    // the episode's logical time

	// View is the scenario's rendering of the state as this agent may see it
	// (a board, its private valuation, the rules).
	View string
	// Inbox holds the messages delivered to this agent since its previous
	// turn; Seen holds every message delivered to it in this episode, Inbox
	// being its tail. Both are in delivery order.
	Inbox []protocol.Message
	Seen  []protocol.Message
	// Legal lists the legal actions when the action space is finite, in the
	// scenario's order; nil when actions are free-form text.
	Legal []string
	// Seed is this turn's private random seed, derived from the episode's
	// policy seed, the agent and the turn: a policy that draws from it alone
	// makes the same choice whenever the same episode is replayed.
	Seed uint64
	// Session names the agent's conversation in this episode: the same at
	// every turn of the agent, different for its other seats and (but for
	// a 2^-64 chance) other episodes, derived from the episode's policy
	// seed and the seat. An LLM policy sends it to servers that route by a
	// key (SGLang's router), so that one agent's turns, which extend one
	// prompt, reach the worker whose prefix cache holds it.
	Session uint64
	// History is the agent's own earlier turns in this episode, oldest
	// first: History[k] is its turn k, what it observed then and what it
	// played. It is the agent's memory: a policy that holds no state (as
	// troupe's own do) rebuilds the agent's conversation from it, and a
	// forked or replayed episode hands it the same. Its elements share
	// their slices and Generation with the episode: read them, never
	// change them or keep them after Act returns.
	//
	// The engine keeps it only for a policy that reads it (Remembers):
	// for the others, and for every policy a stepped episode's driver
	// does not ask itself, it is empty.
	History []Turn
	// Features is the agent's numeric observation at this turn, what its
	// scenario's game writes for its seat (env.FeatureGame's
	// ObserveFeatures, in the space env.Features declares for its role):
	// the input of a learner that reads numbers rather than text. The
	// engine writes it only for a policy that reads it (ReadsFeatures) in
	// a scenario that declares features; otherwise it is nil. It is the
	// engine's buffer, rewritten at the seat's next turn: read it, never
	// change it or keep it after Act returns.
	Features []float32
}

// Turn is one of an agent's earlier turns, as its later observations carry
// it (Observation.History): what it observed, and the action it played,
// with the Generation of a model policy (the chat it sent, what it wrote,
// its tokens) and the policy's notes.
type Turn struct {
	Step   int
	State  State
	View   string
	Inbox  []protocol.Message // the messages delivered since its previous turn
	Legal  []string
	Action Action
}

// Observation returns the observation the agent had at turn t, as far as
// the history keeps it: everything but Seen (nil), Seed (0) and the
// History before it (h[:turn]).
func (t *Turn) Observation(agent, role string, turn int, h []Turn) Observation {
	return Observation{Agent: agent, Role: role, State: t.State, Turn: turn, Step: t.Step, View: t.View, Inbox: t.Inbox, Legal: t.Legal, History: h[:turn:turn]}
}

// Intn returns a uniform integer in [0, n) drawn from the turn's seed and the
// stream number k, so one turn can draw several independent numbers.
func (o *Observation) Intn(k uint64, n int) int {
	return seeds.Intn(seeds.MixKeyed(o.Seed, seeds.Key(k)), n) // seeds.Mix1, inline
}

// Float64 returns a uniform float in [0, 1) drawn from the turn's seed and the
// stream number k.
func (o *Observation) Float64(k uint64) float64 {
	return seeds.Float64(seeds.MixKeyed(o.Seed, seeds.Key(k))) // seeds.Mix1, inline
}

// Tokens is what an LLM policy knows about the tokens behind its answer.
// Prompt then Response make up the sample's tokens. LogProbs, when non-nil,
// has one entry per response token. LossMask, when nil, means every response
// token was sampled (all ones).
type Tokens struct {
	Prompt   []int
	Response []int
	LogProbs []float64
	LossMask []int
}

// Action is a policy's answer.
type Action struct {
	// Text is the action as the scenario reads it (a legal action's name, an
	// utterance, a JSON object), and the sample's response unless the
	// Generation has a Completion.
	Text string
	// Invalid, when non-empty, says why the answer is not a valid action
	// (unparseable output, a schema violation, an illegal choice) after
	// whatever retries the policy made. The environment records it in the
	// sample's metadata under "invalid" and applies the run's rule for
	// invalid answers (env.InvalidRule).
	Invalid string
	// Notes are facts about how the answer came about (an LLM policy's
	// attempts, finish reason, token counts). The engine merges them into
	// the sample's metadata; keys must not be troupe's own metadata keys.
	Notes map[string]any
	// Generation is what a model policy knows of how it generated the
	// answer: the chat it sent, what it wrote, its tokens. nil for a policy
	// that chooses without a model (scripted, random, learned), whose sample
	// is text-only, its prompt the rendered observation and its response
	// Text. The episode's record keeps the pointer: neither the policy nor
	// the game may change what it points to once Act has returned.
	Generation *Generation
}

// Generation is how a model produced an answer.
type Generation struct {
	// Completion is what the model wrote, decoded from the tokens it
	// sampled, when that differs from the Action's Text (an LLM's fenced
	// JSON object around the move it names, a tool call). It becomes the
	// sample's response, which reward models, filters and logs read, and
	// Text moves to the sample's metadata under "action". Empty means the
	// response is Text.
	Completion string
	// Prompt, when set, replaces the rendered observation as the sample's
	// prompt: the chat the policy actually sent.
	Prompt *protocol.Prompt
	// Tokens are the token ids behind the prompt and the response; nil
	// makes the sample text-only.
	Tokens *Tokens
}

// Policy chooses an agent's action. Act is called with the environment's
// context and must honour its cancellation. Implementations used by several
// agents or episodes at once must be safe for concurrent use; the built-in
// ones are stateless.
type Policy interface {
	Act(ctx context.Context, obs *Observation) (Action, error)
}

// BatchPolicy is a Policy that can also answer several observations in
// one call. The engine calls ActBatch for the actors of a step that share
// the policy (consecutive seats given the same value, such as one learner
// for El Farol's hundred patrons) when it asks them one after the other,
// which spares a call per agent and, for a policy that locks (the
// learners of policies/learn), a lock per agent. It still calls Act for a
// lone actor, for policies asked in parallel (Setup.ParallelPolicies) and
// in counterfactual replays. A policy with nothing to share between the
// answers gains little: the random policy, which has no lock, is not one.
//
// Only a comparable BatchPolicy (a pointer, say) is asked in batches:
// comparing is how the engine finds the seats that share it.
type BatchPolicy interface {
	Policy
	// ActBatch answers every observation as Act would, in order: it sets
	// acts[k] and errs[k] (nil when Act would succeed) to what
	// Act(ctx, &obs[k]) returns after Act was called for obs[0] to
	// obs[k-1], errs[k] once obs[k] is answered. The episodes must not
	// depend on which of the two the engine calls: when ActBatch panics,
	// the engine blames the first observation whose errs slot it had not
	// set, as if Act had panicked there, and asks the ones after it with
	// Act. The three slices have the same length.
	ActBatch(ctx context.Context, obs []Observation, acts []Action, errs []error)
}

// Remembering is implemented by a policy that reads Observation.History.
// The engine keeps an agent's history only when the policy of its seat
// remembers: copying every turn, and keeping what it points to alive until
// the episode ends, costs a policy that decides from the present alone (a
// scripted, random or learned one) about a seventh of an El Farol turn.
type Remembering interface {
	Remembers() bool
}

// Remembers reports whether p reads Observation.History: whether it
// implements Remembering and says so.
func Remembers(p Policy) bool {
	r, ok := p.(Remembering)
	return ok && r.Remembers()
}

// Remember returns p as a policy that Remembers: for a PolicyFunc or a
// Scripted policy that reads Observation.History. It returns p itself when
// p remembers already. The result answers one observation at a time: a
// BatchPolicy given to it is asked with Act only.
func Remember(p Policy) Policy {
	if Remembers(p) {
		return p
	}
	return remembering{p}
}

type remembering struct{ Policy }

func (remembering) Remembers() bool { return true }

// Wrap returns outer, a policy that asks inner, as one that remembers when
// inner does: a wrapper (one that counts turns, or picks a policy per
// agent) must pass on what the policy it asks reads.
func Wrap(inner, outer Policy) Policy {
	if Remembers(inner) {
		return Remember(outer)
	}
	return outer
}

// FeatureReader is implemented by a policy that reads
// Observation.Features. Writing them costs a game call and a buffer per
// seat at every turn, which a policy that decides from the text alone
// does not pay.
type FeatureReader interface {
	ReadsFeatures() bool
}

// ReadsFeatures reports whether p reads Observation.Features: whether it
// implements FeatureReader and says so.
func ReadsFeatures(p Policy) bool {
	r, ok := p.(FeatureReader)
	return ok && r.ReadsFeatures()
}

// PolicyFunc adapts a function to Policy.
type PolicyFunc func(ctx context.Context, obs *Observation) (Action, error)

// Act calls f.
func (f PolicyFunc) Act(ctx context.Context, obs *Observation) (Action, error) { return f(ctx, obs) }

// Scripted returns a policy that answers with choose(obs): a deterministic Go
// function of the observation.
func Scripted(choose func(obs *Observation) string) Policy {
	return PolicyFunc(func(_ context.Context, obs *Observation) (Action, error) {
		return Action{Text: choose(obs)}, nil
	})
}

// ErrNoLegalActions is returned by Random when the observation lists no legal
// action to choose from.
var ErrNoLegalActions = errors.New("no legal actions to choose from")

// Random returns the uniform random policy: it picks one of obs.Legal using
// the turn's seed, so its choices are reproducible.
func Random() Policy { return &random{} }

// random is Random's policy: a type of its own rather than a PolicyFunc,
// which would cost every turn a second indirect call (and a pointer
// receiver, which spares it the wrapper a value in an interface needs).
type random struct{}

func (*random) Act(_ context.Context, obs *Observation) (Action, error) {
	if len(obs.Legal) == 0 {
		return Action{}, fmt.Errorf("agent %q turn %d: %w", obs.Agent, obs.Turn, ErrNoLegalActions)
	}
	return Action{Text: obs.Legal[obs.Intn(0, len(obs.Legal))]}, nil
}

// Probabilities is 1/len(obs.Legal) for each legal action: what an exact
// search (league.NashConv) takes the expectation over, where Act draws one.
func (*random) Probabilities(obs *Observation) ([]float64, error) {
	if len(obs.Legal) == 0 {
		return nil, fmt.Errorf("agent %q turn %d: %w", obs.Agent, obs.Turn, ErrNoLegalActions)
	}
	probs := make([]float64, len(obs.Legal))
	for i := range probs {
		probs[i] = 1 / float64(len(probs))
	}
	return probs, nil
}

// ErrReplayExhausted is returned by Replay when asked for a turn beyond its
// list.
var ErrReplayExhausted = errors.New("replay: no recorded action for this turn")

// Replay returns a policy that plays actions[obs.Turn]: a fixed action list,
// indexed by the agent's own turn number. It holds no state, so one Replay may
// serve one agent in many episodes at once.
func Replay(actions ...string) Policy {
	actions = slices.Clone(actions)
	return PolicyFunc(func(_ context.Context, obs *Observation) (Action, error) {
		if obs.Turn >= len(actions) {
			return Action{}, fmt.Errorf("agent %q turn %d of %d recorded: %w", obs.Agent, obs.Turn, len(actions), ErrReplayExhausted)
		}
		return Action{Text: actions[obs.Turn]}, nil
	})
}
