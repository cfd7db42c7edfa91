package env

// ActionSets is implemented by scenarios whose roles choose among a finite
// set of moves known before play: a board's cells, El Farol's nights, the
// proposals a negotiation's grammar can write for its parameters. ActionSet
// lists role's moves under p in a fixed order, every turn's legal actions
// (or, for a StructuredActions scenario, every answer its CheckAnswer may
// accept) being among them; nil when the role has none, or too many to
// list. Learners that need fixed action spaces (PettingZoo's Discrete
// spaces and action masks, through the environment server) read it; the
// engine never does. The slice may be shared: callers must not change it.
type ActionSets interface {
	ActionSet(p Params, role string) []string
}
