package episode

import "github.com/troupe-rl/troupe/agents"

// Tree says how an episode was tree-sampled (Zhao et al., AT-GRPO, arXiv
// 2510.11062, Algorithm 1; Liu et al., MAGRPO, arXiv 2508.04652): at
// each turn of a tree-sampled seat, its policy was asked K times from the
// same history, each candidate was scored by playing a fork of the episode
// on from it, and the best candidate was kept on the main line. Every
// candidate is in Record.Candidates, and every one becomes a sample.
type Tree struct {
	// K is the number of candidates drawn per tree-sampled turn (≥ 2).
	K int
	// Alpha weighs the team reward in a candidate's reward,
	// Reward = Alpha·Team + Local, as AT-GRPO mixes them.
	Alpha float64
	// Joint says that the candidates of one step were drawn jointly
	// (MAGRPO): candidate c of the step is the joint action in which
	// every tree-sampled seat acting at the step plays its c-th answer,
	// and was scored as a whole. Without it (AT-GRPO), the seats of a step
	// were tree-sampled one after the other in seat order, each with the
	// moves already chosen for the seats before it.
	Joint bool
	// Roles are the tree-sampled roles; none means every role whose turns
	// are emitted.
	Roles []string
}

// Candidate is one of the K answers drawn for a tree-sampled turn. Its
// prompt is the turn's (the same history and observation): what differs
// is its policy seed, its answer and the score of its continuation.
type Candidate struct {
	// Turn is the index in Record.Turns of the main-line turn it was
	// drawn for; Index is its number among that turn's candidates, from 0.
	Turn  int
	Index int
	// Seed is the policy seed it was drawn with: the turn's for
	// candidate 0, a seed derived from the turn's and Index for the
	// others.
	Seed uint64
	// Action, Generation, Invalid and Notes are the policy's answer, as a
	// Turn holds them.
	Action     string
	Generation *agents.Generation
	Invalid    string
	Notes      map[string]any
	// Team and Local are the team reward (the seat's team's, Score.Of)
	// and the seat's own score
	// (Score.Agents; 0 when the scenario has none) of the continuation
	// that scored the candidate: a fork of the episode given the
	// candidate, played to its end with the run's policies. Reward is
	// Tree.Alpha·Team + Local, what chose the main line's candidate.
	Team, Local, Reward float64
	// Chosen marks the candidate the main line went on with: its answer
	// is the turn's.
	Chosen bool
	// Fork is the record of that continuation: a fresh episode given the
	// main line's moves before the candidate's step, the step's moves with
	// the candidate's answer, and the policies' first answers after it.
	// Its Score is what Team and Local were read from, and its Replay
	// re-simulates it. An allocator that values an episode by its record
	// alone credits the candidate from its Fork (trajectories.Allocate).
	// It lives in memory only: nil for a candidate read back from an
	// episode file or the wire.
	Fork *Record
}
