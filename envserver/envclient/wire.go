// Package envclient is the client of troupe's environment server (package
// envserver, `troupe env-serve`) and the types of its wire protocol.
//
// The protocol follows OpenEnv's conventions (GET /health, /metadata,
// /schema; POST /reset, /step; GET /state; a WebSocket session at /ws whose
// messages are {"type": "reset"|"step"|"state"|"close", "data": {...}}) and
// adds what OpenEnv lacks: multi-agent episodes. A session holds one seat
// of an episode or several: a controller of every seat (PettingZoo's AEC
// and Parallel APIs), or one player among several sessions that share the
// episode (each joins it with ResetRequest.Join); the seats no session
// holds are played by troupe policies on the server.
//
// Over HTTP a session is named by the session_id its reset answered; over
// a WebSocket the connection is the session. A step answers once the
// session must act again (or the episode is over): the observation then
// holds the session's seats that must act, each with its view, legal
// actions and inbox.
//
// # Vector environments
//
// A vector environment (POST PathVectors, VectorRequest) holds NumEnvs
// episodes of one scenario, every seat the caller's, stepped together:
// POST /vector/{id}/step takes an actions frame (AppendActions: "TVA1",
// u32 num_envs, num_agents, flags, then i32 actions [env][agent]) and
// answers a batch frame (DecodeBatch: "TVB1", a 48-byte header of counts,
// then f32 rewards and state, the observations (f32 features or u8 view
// bytes), u8 masks, acting, terminated and truncated flags, then the
// episodes that started (run seed, rollout id) and ended (status, team
// reward, final observations, credit)), little-endian, every array at an
// aligned offset that numpy reads in place. A finished episode is
// replaced in the same step (autoreset); each episode of a batch writes
// the record and samples of the same episode played alone. docs/vector.md
// draws the frames byte by byte; Client.Vector is the Go client.
package envclient

import (
	"encoding/json"

	"github.com/troupe-rl/troupe/protocol"
)

// The server's paths.
const (
	PathHealth   = "/health"
	PathMetadata = "/metadata"
	PathSchema   = "/schema"
	PathReset    = "/reset"
	PathStep     = "/step"
	PathState    = "/state"
	PathClose    = "/close"
	PathRecord   = "/record"
	PathWS       = "/ws"
	PathSeats    = "/seats"
	// PathOpenAPI is the server's OpenAPI document; PathMCP its MCP
	// endpoint (OpenEnv's JSON-RPC, and MCP's streamable HTTP).
	PathOpenAPI = "/openapi.json"
	PathMCP     = "/mcp"
	// PathEpisodes prefixes the harness seats' endpoints:
	// /episodes/{episode_id}/seats/{agent}/ (see HarnessURLs).
	PathEpisodes = "/episodes/"
)

// SeatsRequest asks for the seats of a scenario under parameters, and
// their action sets, without playing an episode (POST /seats): what a
// learner needs to size its spaces before its first reset.
type SeatsRequest struct {
	Scenario string            `json:"scenario"`
	Params   map[string]string `json:"params,omitempty"`
}

// SeatsAnswer is the answer of POST /seats.
type SeatsAnswer struct {
	Scenario string            `json:"scenario"`
	Params   map[string]string `json:"params"`
	Seats    []Seat            `json:"seats"`
	// State is the space of the global state, for a scenario that
	// declares one (env.Features).
	State *Space `json:"state,omitempty"`
}

// ResetRequest starts a session: it creates an episode (Scenario and what
// follows), or joins one another session created (Join), taking Seats.
type ResetRequest struct {
	// Seed is the run seed of the episode: its scenario and policy seeds
	// derive from it as those of a one-episode `troupe run --seed`.
	// nil: the server's seed counter's next value.
	Seed *uint64 `json:"seed,omitempty"`
	// EpisodeID names a new episode (the server's own id otherwise); a
	// name already in use is refused.
	EpisodeID string `json:"episode_id,omitempty"`

	// Join is the id of an episode to join, taking Seats among its open
	// seats; the fields below are then not allowed.
	Join string `json:"join,omitempty"`

	Scenario string            `json:"scenario,omitempty"`
	Params   map[string]string `json:"params,omitempty"`
	// Policies name the troupe policy of each role's seats that no
	// session holds (and, with fallback "policy", of seats whose session
	// left): one of the scenario's own, or "random". A role left out
	// plays the scenario's default policy.
	Policies map[string]string `json:"policies,omitempty"`
	// Open lists the seats (agent ids) sessions may take; empty: every
	// seat.
	Open []string `json:"open,omitempty"`
	// Fallback is what becomes of a seat whose session leaves or goes
	// idle: "policy" (default: the role's policy plays it, and its turns
	// say so) or "forfeit" (the episode ends aborted).
	Fallback string `json:"fallback,omitempty"`
	// PassIllegal hands illegal moves to the game, marked invalid, where
	// they are otherwise refused with an error.
	PassIllegal bool `json:"pass_illegal,omitempty"`
	// Limits, OnInvalid, Emit, Allocators and RewardFormat are the run
	// spec's (troupe.runspec/v1): how the episode is bounded and judged
	// and how its record becomes samples.
	Limits       *Limits  `json:"limits,omitempty"`
	OnInvalid    *Invalid `json:"on_invalid,omitempty"`
	Emit         []string `json:"emit,omitempty"`
	Allocators   []string `json:"allocators,omitempty"`
	RewardFormat string   `json:"reward_format,omitempty"`
	RolloutID    *int64   `json:"rollout_id,omitempty"`
	// Reward names the allocator (a spec, as in Allocators) whose credit
	// is each seat's reward (SeatCredit.Reward, and so Result.Reward); it
	// joins Allocators when they do not hold it. "": the seat's own score
	// from the scenario, else its side's reward.
	Reward string `json:"reward,omitempty"`

	// Seats are the seats (agent ids) this session takes; empty: every
	// open seat no session holds yet (but the Harness seats).
	Seats []string `json:"seats,omitempty"`
	// Features asks that every answer carry the numeric observation of
	// each of the session's seats (Observation.Features) and, to a
	// session that holds every seat, the game's global state
	// (Observation.State), for a scenario that declares them
	// (env.Features; refused for one that does not).
	Features bool `json:"features,omitempty"`

	// Harness lists the seats (agent ids) an outside agent harness plays
	// (the OpenAI Agents SDK, ...): the server seats each at its own
	// endpoints, an OpenAI-compatible chat endpoint forwarding to the
	// server's model server, whose calls become the seat's samples, and
	// the tools observe and act (MCP and function tools); the answer's
	// Seats tell their URLs (Seat.Harness). A reset that names only
	// harness seats, none left to its session, answers no session: the
	// caller follows the episode by its id (GET /state, /record).
	Harness []string `json:"harness,omitempty"`
}

// Limits bound an episode; zero means none.
type Limits struct {
	MaxSteps    int `json:"max_steps,omitempty"`
	MaxTurns    int `json:"max_turns,omitempty"`
	MaxMessages int `json:"max_messages,omitempty"`
}

// Invalid is the rule for invalid answers: mode "pass" or "end".
type Invalid struct {
	Mode    string  `json:"mode"`
	Penalty float64 `json:"penalty"`
	Bonus   float64 `json:"bonus"`
}

// Action is what a step gives: one seat's move (Move, and Seat when the
// session holds several seats that act now), or several (Moves, by
// agent id: a simultaneous step of a controller).
type Action struct {
	Seat  string            `json:"seat,omitempty"`
	Move  *string           `json:"move,omitempty"`
	Moves map[string]string `json:"moves,omitempty"`
	// Generation, with Move, is how the learner's model produced the
	// move: the turn's sample then holds the learner's own token ids
	// (tokens, response_length, rollout_log_probs) where it is otherwise
	// text-only. nil: a text-only sample.
	Generation *Generation `json:"generation,omitempty"`
}

// Generation is a learner's record of how its model wrote a move: what a
// trainer (TRL's GRPO, ...) trains on, kept in troupe's sample so that
// troupe's samples and the trainer's batch hold the same ids.
type Generation struct {
	// PromptIDs are the prompt's token ids, CompletionIDs the sampled
	// ones (at least one); LogProbs, when given, one per completion id.
	PromptIDs     []int     `json:"prompt_ids"`
	CompletionIDs []int     `json:"completion_ids"`
	LogProbs      []float64 `json:"logprobs,omitempty"`
	// Prompt is the text the model was given (the sample's prompt; empty:
	// the seat's observation); Completion what it wrote, when the move was
	// read from it (the sample's response; empty: the move).
	Prompt     string `json:"prompt,omitempty"`
	Completion string `json:"completion,omitempty"`
}

// StepRequest is the body of POST /step: OpenEnv's, with the session.
// Without SessionID, the step is the session's of the latest HTTP reset
// while its episode is in play, else a new episode's of the server's
// default reset: OpenEnv's HTTP client names no session.
type StepRequest struct {
	SessionID string `json:"session_id,omitempty"`
	Action    Action `json:"action"`
	// TimeoutS and RequestID are OpenEnv's, accepted so that its
	// requests are: a step waits MaxWait at most (the answer then says
	// "not yet"), and the request id is not echoed.
	TimeoutS  *float64 `json:"timeout_s,omitempty"`
	RequestID string   `json:"request_id,omitempty"`
}

// SessionRequest names a session (POST /close; GET /state and /record
// take it as the query parameter session_id, or episode_id).
type SessionRequest struct {
	SessionID string `json:"session_id"`
}

// Result is the answer of a reset and of a step: OpenEnv's StepResult.
type Result struct {
	Observation Observation `json:"observation"`
	// Reward is, once the episode is over, the sum of the session's
	// seats' rewards (SeatCredit.Reward: the reward allocator's credit,
	// else their agent scores, else their sides'); 0 before, and null in
	// a reset's answer.
	Reward *float64 `json:"reward"`
	Done   bool     `json:"done"`
}

// Observation is what a session sees after a reset or a step.
type Observation struct {
	EpisodeID string `json:"episode_id"`
	SessionID string `json:"session_id"`
	// Step is the episode's logical time.
	Step int `json:"step"`
	// Seats are the episode's seats, with which this session holds: in a
	// reset's answer only (and in State).
	Seats []Seat `json:"seats,omitempty"`
	// Pending are the session's seats that must act now, in seat order:
	// several at a simultaneous step of a session that holds several.
	// Empty once the episode is over.
	Pending []SeatObservation `json:"pending"`
	// Waiting are the seats the episode waits for (agent ids), the
	// session's and others'.
	Waiting []string `json:"waiting"`
	Done    bool     `json:"done"`
	// Status, End and Error are the record's once the episode is over:
	// "completed", "truncated", "aborted" or "failed"; why it ended
	// ("terminated", "forfeit", ...); the error of an aborted or failed
	// episode.
	Status string `json:"status,omitempty"`
	End    string `json:"end,omitempty"`
	Error  string `json:"error,omitempty"`
	// Scores are, once the episode is over and scored, every seat's score
	// by agent id (the team's for every seat when the scenario gives no
	// agent scores); Team is the team reward.
	Scores map[string]float64 `json:"scores,omitempty"`
	Team   *float64           `json:"team,omitempty"`
	// Sides are, once the episode is over and scored, the rewards of the
	// scenario's declared sides by name (werewolf's village and wolves);
	// absent in a scenario with one team, whose reward is Team.
	Sides map[string]float64 `json:"sides,omitempty"`
	// Credit is, once the episode is over and credited, every seat's
	// credit by agent id: its reward and the credit each of the
	// episode's allocators gave it, the values `troupe run
	// --episodes-out` writes for the same seeds and moves. Absent when
	// the episode is not over, or its credit failed (CreditError).
	Credit map[string]SeatCredit `json:"credit,omitempty"`
	// RewardAllocator is the allocator whose credit is each seat's
	// reward (ResetRequest.Reward, by its name); "" for the scenario's
	// score.
	RewardAllocator string `json:"reward_allocator,omitempty"`
	// CreditError says why an episode over has no Credit (an allocator
	// failed, or its sink refused the episode).
	CreditError string `json:"credit_error,omitempty"`
	// Features are, for a session that asked (ResetRequest.Features),
	// the numeric observation of each of its seats now, by agent id: what
	// the seat may know, in its role's space (Seat.Observation).
	Features map[string][]float32 `json:"features,omitempty"`
	// State is, for a session that asked and holds every seat, the
	// game's global state now (SeatsAnswer.State's space): the true
	// state, hidden parts included, for a centralised critic.
	State []float32 `json:"state,omitempty"`
}

// SeatCredit is one seat's credit in an episode over: the reward a learner
// takes, and every allocator's credit.
type SeatCredit struct {
	// Reward is what the environment rewards the seat with: the reward
	// allocator's credit (Credit[RewardAllocator]), or, without one, its
	// own score from the scenario, else its side's reward.
	Reward float64 `json:"reward"`
	// Side is the seat's side ("" in a scenario with one team) and
	// SideReward its reward, G_T: the team reward G with one team.
	Side       string  `json:"side,omitempty"`
	SideReward float64 `json:"side_reward"`
	// Score is the seat's own score from the scenario, when it gives
	// per-agent scores.
	Score *float64 `json:"score,omitempty"`
	// Credit is each allocator's credit of the seat, by the allocator's
	// name (as --episodes-out writes it): its last turn's value, which
	// is every turn's for an allocator that values an agent's turns
	// alike (all but discount, at-grpo, a group key with turn, and MAGRPO
	// on tree-sampled turns). Turns lists every turn's, and Steps those
	// turns' steps. Empty for a seat with no emitted turn.
	Credit map[string]float64   `json:"credit"`
	Turns  map[string][]float64 `json:"turns"`
	Steps  []int                `json:"steps"`
}

// Seat is one seat of an episode.
type Seat struct {
	Agent string `json:"agent"`
	Role  string `json:"role"`
	// Mine says that the session holds it; House that troupe's policy
	// plays it (a closed seat, or one whose session left).
	Mine  bool `json:"mine"`
	House bool `json:"house"`
	// Actions is the role's action set when the scenario declares one
	// (env.ActionSets): every move the seat may ever make, in a fixed
	// order, of which each turn's Choices are a subset. nil: free-form.
	Actions []string `json:"actions"`
	// Harness is, for a seat an outside harness plays, where it plays.
	Harness *HarnessURLs `json:"harness,omitempty"`
	// Observation is the space of the seat's numeric observation, for a
	// scenario that declares one (env.Features): in POST /seats's answer.
	Observation *Space `json:"observation,omitempty"`
}

// HarnessURLs are a harness seat's endpoints, all under
// /episodes/{episode_id}/seats/{agent}/ and guarded by the server's bearer
// token (an OpenAI SDK sends its API key as the bearer: give it the
// token). The URLs are absolute, with the host the request reached.
type HarnessURLs struct {
	// OpenAIBaseURL is the base URL of the seat's model (an OpenAI
	// client's baseURL): POST {it}/chat/completions, POST
	// {it}/responses (streamed or not), GET {it}/models.
	OpenAIBaseURL string `json:"openai_base_url"`
	// MCPURL is the MCP server of the tools observe and act (streamable
	// HTTP).
	MCPURL string `json:"mcp_url"`
	// ToolsURL lists the tools as OpenAI function tools (GET); a call is
	// POST {it}/{name} with the arguments' JSON object.
	ToolsURL string `json:"tools_url"`
}

// SeatObservation is one seat's observation: what a troupe policy sees.
type SeatObservation struct {
	Agent string `json:"agent"`
	Role  string `json:"role"`
	State string `json:"state"`
	Turn  int    `json:"turn"`
	Step  int    `json:"step"`
	View  string `json:"view"`
	// Legal are the legal actions when the scenario lists them; nil for
	// free-form answers (JSON moves the rules judge).
	Legal []string `json:"legal"`
	// Choices are the moves of the seat's action set (Seat.Actions) the
	// rules allow now: Legal, or for free-form answers those the
	// scenario's rules accept. nil when the role has no action set.
	Choices []string `json:"choices"`
	// Inbox are the messages delivered to the seat since its previous
	// turn, in delivery order.
	Inbox []protocol.Message `json:"inbox"`
	// Seed is the turn's policy seed: a player that draws from it alone
	// plays the same whenever the episode is replayed.
	Seed uint64 `json:"seed"`
}

// State is the answer of GET /state and of a WebSocket "state" message:
// OpenEnv's State (episode_id, step_count) with the episode's seats and
// whether it is over.
type State struct {
	EpisodeID string            `json:"episode_id"`
	StepCount int               `json:"step_count"`
	Scenario  string            `json:"scenario"`
	Params    map[string]string `json:"params"`
	Seats     []Seat            `json:"seats"`
	Waiting   []string          `json:"waiting"`
	Done      bool              `json:"done"`
	Status    string            `json:"status,omitempty"`
	End       string            `json:"end,omitempty"`
}

// Health is the answer of GET /health.
type Health struct {
	Status string `json:"status"`
}

// Error is an error answer: {"error": {...}} over HTTP, the data of a
// {"type": "error"} WebSocket message.
type Error struct {
	// Code is a stable word (CodeIllegal, ...); Message says what was
	// wrong, naming the field or the move.
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ErrorBody is an HTTP error answer.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Error codes.
const (
	CodeBadRequest   = "bad_request" // malformed JSON, a bad field
	CodeUnknown      = "not_found"   // no such session, episode or endpoint
	CodeIllegal      = "illegal_action"
	CodeNotYourTurn  = "not_your_turn" // a seat that does not act now
	CodeNotYours     = "not_your_seat"
	CodeEpisodeOver  = "episode_over"
	CodeTaken        = "seat_taken"
	CodeTooMany      = "too_many_sessions"
	CodeUnauthorized = "unauthorized"
	CodeMethod       = "method_not_allowed"
	CodeDraining     = "shutting_down"
	CodeTooLarge     = "too_large"
	CodeMedia        = "unsupported_media_type"
	CodeInternal     = "internal"
)

// WSMessage is a WebSocket message, both ways: OpenEnv's {"type", "data"}.
// The client sends "reset", "step", "state" and "close"; the server
// answers "observation" (data: a Result), "state" (data: a State) or
// "error" (data: an Error).
type WSMessage struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data,omitempty"`
}
