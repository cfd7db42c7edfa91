package envclient

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Paths of the vector environments (docs/vector.md): POST PathVectors
// creates one (VectorRequest, answered VectorAnswer); under
// PathVector+"{vector_id}/" POST "reset" (a JSON VectorReset) and "step" (an
// actions frame, AppendActions) answer a batch frame (DecodeBatch), and
// POST "close" ends it.
const (
	PathVectors = "/vectors"
	PathVector  = "/vector/"
	// ContentBinary is the media type of actions and batch frames.
	ContentBinary = "application/octet-stream"
)

// VectorRequest creates a vector environment: NumEnvs episodes of one
// scenario, stepped together, the open seats of each held by the caller, each
// finished episode replaced by a fresh one in the same step (autoreset).
// The fields it shares with ResetRequest mean what they mean there, for
// every episode of the vector.
type VectorRequest struct {
	Scenario string            `json:"scenario"`
	Params   map[string]string `json:"params,omitempty"`
	// NumEnvs is the number of episodes stepped at once (the batch).
	NumEnvs int `json:"num_envs"`
	// Open lists the agents the caller plays; empty: every agent. The
	// others are the house's: troupe policies (Policies, by role: the
	// scenario's own, "random", or its default) play them on the server,
	// within the step, and they never act in a batch (their masks are
	// zeros), as a ResetRequest's closed seats are played.
	Open     []string          `json:"open,omitempty"`
	Policies map[string]string `json:"policies,omitempty"`
	// Seed roots the episodes' run seeds: the vector's n-th episode (in
	// the order they start: env by env at a reset, then as they end)
	// plays run seed seeds.Mix(Seed, n), the episode that a ResetRequest
	// with that seed plays. nil: the server's seed counter's next value.
	Seed *uint64 `json:"seed,omitempty"`
	// RolloutID is the rollout_id of the vector's episode 0; episode n
	// has RolloutID+n. nil: the server hands out NumEnvs ids at a time.
	RolloutID   *int64   `json:"rollout_id,omitempty"`
	PassIllegal bool     `json:"pass_illegal,omitempty"`
	Limits      *Limits  `json:"limits,omitempty"`
	OnInvalid   *Invalid `json:"on_invalid,omitempty"`
	Emit        []string `json:"emit,omitempty"`
	// Allocators are the run spec's: the credit of the samples the
	// server writes, and, named here, what each ended episode of a batch
	// carries (Ended.Credit) and what Reward may name.
	Allocators []string `json:"allocators,omitempty"`
	// RewardFormat is the run spec's, for the samples the server writes.
	RewardFormat string `json:"reward_format,omitempty"`
	// Reward is what the batch's rewards carry, at the step an episode
	// ends: "score" (default), each agent's own score; "team", the reward
	// of its team (of its side, in a game of sides); or an allocator's
	// spec ("difference"; it joins Allocators when they lack it, as a
	// ResetRequest's Reward does), its credit of the agent (the value
	// `troupe run` gives the agent's last sample: every built-in
	// allocator reads the score, given at the end).
	Reward string `json:"reward,omitempty"`
	// ViewBytes is the length of the observation of a scenario that
	// declares no numeric observation (env.Features): the view's UTF-8
	// bytes, zero-padded or cut. 0: 1024.
	ViewBytes int `json:"view_bytes,omitempty"`
	// FinalObservations adds to each ended episode of a batch its last
	// observations and state (Gymnasium's final_obs), which a learner
	// that bootstraps a truncated episode's value needs.
	FinalObservations bool `json:"final_observations,omitempty"`
}

// VectorReset is the body of a vector's reset: every episode of the
// vector is stopped (aborted, end "reset") and a fresh one starts. Seed,
// when set, roots the fresh episodes' run seeds as VectorRequest.Seed does,
// their count starting again at 0.
type VectorReset struct {
	Seed *uint64 `json:"seed,omitempty"`
}

// Space is a numeric observation's space (env.Space): float32 values of
// Shape, within [Low, High].
type Space struct {
	Shape []int   `json:"shape"`
	Low   float32 `json:"low"`
	High  float32 `json:"high"`
}

// VectorAgent is one seat of the vector's episodes, which every episode
// has, in this order.
type VectorAgent struct {
	Agent string `json:"agent"`
	Role  string `json:"role"`
	// House says that troupe's policy plays the agent (it is not among
	// VectorRequest.Open): it never acts in a batch.
	House bool `json:"house,omitempty"`
	// Actions is the role's action set: action i of the agent is the move
	// Actions[i].
	Actions []string `json:"actions"`
	// Observation is the agent's numeric observation's space, nil when
	// the scenario declares none (the observation is then the view's
	// bytes).
	Observation *Space `json:"observation,omitempty"`
}

// VectorAnswer describes a vector environment: the layout of its batch
// frames.
type VectorAnswer struct {
	VectorID string            `json:"vector_id"`
	Scenario string            `json:"scenario"`
	Params   map[string]string `json:"params"`
	NumEnvs  int               `json:"num_envs"`
	Agents   []VectorAgent     `json:"agents"`
	// ObsDim is the length of an agent's observation row (the largest of
	// the agents' observations, the others zero-padded), ObsDType its
	// element type on the wire: "float32" (features) or "uint8" (view
	// bytes).
	ObsDim   int    `json:"obs_dim"`
	ObsDType string `json:"obs_dtype"`
	// NumActions is the length of an agent's mask row: the largest
	// action set.
	NumActions int `json:"num_actions"`
	// State is the global state's space, nil when the scenario declares
	// none.
	State *Space `json:"state,omitempty"`
	Seed  uint64 `json:"seed"`
	// Allocators are the allocators whose credit each ended episode
	// carries (Ended.Credit), as the run spec resolved them; none when
	// the request named none.
	Allocators []string `json:"allocators,omitempty"`
	// RewardAllocator is, among them, the one whose credit is the reward
	// (VectorRequest.Reward); "" for the scores or the team's reward.
	RewardAllocator string `json:"reward_allocator,omitempty"`
}

// Frame magics: "TVA1" (actions) and "TVB1" (batch), little-endian
// version 1 frames.
const (
	magicActions = "TVA1"
	magicBatch   = "TVB1"
)

// Observation element types of a batch frame.
const (
	DTypeFloat32 = 1
	DTypeUint8   = 2
)

// NoAction is the action of an agent that does not act: any value outside
// the agent's action set is ignored for it, -1 by convention.
const NoAction = -1

// ErrFrame is wrapped by the errors of a frame that cannot be decoded.
var ErrFrame = errors.New("malformed frame")

// ActionsHeader is the length of an actions frame's header.
const ActionsHeader = 16

// Actions is a decoded actions frame: one action per env and agent,
// row-major (Actions[e*NumAgents+a]).
type Actions struct {
	NumEnvs, NumAgents int
	Actions            []int32
}

// AppendActions appends the actions frame of a to dst: "TVA1", u32
// num_envs, u32 num_agents, u32 flags (0), then i32 actions[num_envs ×
// num_agents], little-endian.
func AppendActions(dst []byte, a Actions) []byte {
	dst = append(dst, magicActions...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(a.NumEnvs))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(a.NumAgents))
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	for _, x := range a.Actions {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(x))
	}
	return dst
}

// DecodeActions decodes an actions frame into a, reusing a.Actions'
// array. It refuses a frame whose magic, flags or length are wrong, naming
// what was wrong; what the counts must be is the caller's to check.
func DecodeActions(data []byte, a *Actions) error {
	if len(data) < ActionsHeader {
		return fmt.Errorf("%w: an actions frame of %d bytes (its header alone is %d)", ErrFrame, len(data), ActionsHeader)
	}
	if string(data[:4]) != magicActions {
		return fmt.Errorf("%w: the actions frame starts %q, not %q", ErrFrame, data[:4], magicActions)
	}
	ne, na, flags := binary.LittleEndian.Uint32(data[4:]), binary.LittleEndian.Uint32(data[8:]), binary.LittleEndian.Uint32(data[12:])
	if flags != 0 {
		return fmt.Errorf("%w: actions frame flags %#x (none are defined)", ErrFrame, flags)
	}
	n := uint64(ne) * uint64(na)
	if uint64(len(data)-ActionsHeader) != 4*n {
		return fmt.Errorf("%w: an actions frame of %d envs × %d agents holds %d bytes of actions, not %d", ErrFrame, ne, na, len(data)-ActionsHeader, 4*n)
	}
	a.NumEnvs, a.NumAgents = int(ne), int(na)
	if cap(a.Actions) < int(n) {
		a.Actions = make([]int32, n)
	}
	a.Actions = a.Actions[:n]
	body := data[ActionsHeader:]
	for i := range a.Actions {
		a.Actions[i] = int32(binary.LittleEndian.Uint32(body[4*i:]))
	}
	return nil
}

// Batch is a decoded batch frame: what a reset or a step of a vector
// environment answers. Arrays are row-major, env first.
type Batch struct {
	NumEnvs, NumAgents int
	ObsDim, StateDim   int
	NumActions         int
	// ObsDType is DTypeFloat32 (Obs) or DTypeUint8 (ObsBytes).
	ObsDType int
	// Rewards [env][agent]: the reward of the step that led here.
	Rewards []float32
	// State [env][StateDim]: each episode's global state.
	State []float32
	// Obs or ObsBytes [env][agent][ObsDim]: each agent's observation.
	Obs      []float32
	ObsBytes []byte
	// Masks [env][agent][NumActions]: 1 for the actions the rules allow
	// the agent now (zeros for one that does not act).
	Masks []byte
	// Acting [env][agent]: 1 for the agents that must act now.
	Acting []byte
	// Terminated and Truncated [env]: the episode of the previous step
	// ended by its rules, or was cut (a limit, a failure, an abort); the
	// row then already holds the next episode's first observation.
	Terminated, Truncated []byte
	// Started are the episodes that started in this answer.
	Started []Started
	// Ended are the episodes that ended in this step.
	Ended []Ended
	// Final says that each Ended holds its final observations.
	Final bool
	// NumCredit is the number of allocators whose credit each Ended holds
	// (Ended.Credit), 0 for none.
	NumCredit int
}

// Started is an episode that started in a batch's env.
type Started struct {
	Env       int
	Seed      uint64 // its run seed (ResetRequest.Seed)
	RolloutID int64
}

// Ended is an episode that ended in a batch's env.
type Ended struct {
	Env       int
	Status    Status
	RolloutID int64
	Team      float64 // the team reward (0 for an episode not scored)
	// FinalObs [agent][ObsDim] (float32, or bytes in FinalObsBytes) and
	// FinalState [StateDim], when the batch is Final.
	FinalObs      []float32
	FinalObsBytes []byte
	FinalState    []float32
	// Credit [agent][2+NumCredit], when the batch's NumCredit is not 0:
	// each agent's side reward (the team's, with one team), its own
	// score (else its side reward), then each allocator's credit of it
	// (VectorAnswer.Allocators' order), what `troupe run --episodes-out`
	// writes for its samples.
	Credit []float64
}

// Status is an ended episode's status on the wire.
type Status uint8

// Statuses of an ended episode.
const (
	StatusCompleted Status = 1
	StatusTruncated Status = 2
	StatusAborted   Status = 3
	StatusFailed    Status = 4
)

// batchHeader is the length of a batch frame's header.
const batchHeader = 48

// flagFinal marks a batch whose ended episodes carry final observations.
const flagFinal = 1

// obsSize is the size of one observation element of dtype.
func obsSize(dtype int) int {
	if dtype == DTypeUint8 {
		return 1
	}
	return 4
}

// pad8 is n rounded up to a multiple of 8.
func pad8(n int) int { return (n + 7) &^ 7 }

// AppendBatch appends the batch frame of b to dst (docs/vector.md):
//
//	header  "TVB1", u32 num_envs E, num_agents A, obs_dim D, obs_dtype,
//	        num_actions K, state_dim S, num_started, num_ended, flags,
//	        num_credit C, 0
//	f32     rewards[E·A], state[E·S]
//	        obs[E·A·D] (f32, or u8)
//	u8      masks[E·A·K], acting[E·A], terminated[E], truncated[E]
//	        zeros to a multiple of 8
//	started u32 env, u32 0, u64 seed, i64 rollout_id (24 bytes each)
//	ended   u32 env, u8 status, 3 zeros, i64 rollout_id, f64 team, then
//	        when flags&1: final obs[A·D], f32 final state[S], zeros to a
//	        multiple of 8; then f64 credit[A·(2+C)] when C > 0
//
// little-endian throughout. The arrays' lengths must be the counts'.
func AppendBatch(dst []byte, b *Batch) []byte {
	le := binary.LittleEndian
	flags := uint32(0)
	if b.Final {
		flags = flagFinal
	}
	dst = append(dst, magicBatch...)
	for _, v := range [...]uint32{uint32(b.NumEnvs), uint32(b.NumAgents), uint32(b.ObsDim), uint32(b.ObsDType), uint32(b.NumActions), uint32(b.StateDim), uint32(len(b.Started)), uint32(len(b.Ended)), flags, uint32(b.NumCredit), 0} {
		dst = le.AppendUint32(dst, v)
	}
	dst = appendFloats(dst, b.Rewards)
	dst = appendFloats(dst, b.State)
	if b.ObsDType == DTypeUint8 {
		dst = append(dst, b.ObsBytes...)
	} else {
		dst = appendFloats(dst, b.Obs)
	}
	dst = append(dst, b.Masks...)
	dst = append(dst, b.Acting...)
	dst = append(dst, b.Terminated...)
	dst = append(dst, b.Truncated...)
	dst = append(dst, make([]byte, pad8(len(dst))-len(dst))...)
	for _, s := range b.Started {
		dst = le.AppendUint32(dst, uint32(s.Env))
		dst = le.AppendUint32(dst, 0)
		dst = le.AppendUint64(dst, s.Seed)
		dst = le.AppendUint64(dst, uint64(s.RolloutID))
	}
	for _, e := range b.Ended {
		dst = le.AppendUint32(dst, uint32(e.Env))
		dst = append(dst, byte(e.Status), 0, 0, 0)
		dst = le.AppendUint64(dst, uint64(e.RolloutID))
		dst = le.AppendUint64(dst, math.Float64bits(e.Team))
		if b.Final {
			if b.ObsDType == DTypeUint8 {
				dst = append(dst, e.FinalObsBytes...)
			} else {
				dst = appendFloats(dst, e.FinalObs)
			}
			dst = appendFloats(dst, e.FinalState)
			dst = append(dst, make([]byte, pad8(len(dst))-len(dst))...)
		}
		if b.NumCredit > 0 {
			for _, x := range e.Credit {
				dst = le.AppendUint64(dst, math.Float64bits(x))
			}
		}
	}
	return dst
}

func appendFloats(dst []byte, v []float32) []byte {
	for _, x := range v {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(x))
	}
	return dst
}

// MaxBatchElements bounds the arrays a batch frame's header may announce,
// so that a corrupt header is refused rather than allocated.
const MaxBatchElements = 1 << 30

// DecodeBatch decodes a batch frame. It refuses a frame whose magic,
// header, length or padding is wrong, naming what was wrong; it never
// allocates more than the frame's length justifies.
func DecodeBatch(data []byte) (*Batch, error) {
	le := binary.LittleEndian
	if len(data) < batchHeader {
		return nil, fmt.Errorf("%w: a batch frame of %d bytes (its header alone is %d)", ErrFrame, len(data), batchHeader)
	}
	if string(data[:4]) != magicBatch {
		return nil, fmt.Errorf("%w: the batch frame starts %q, not %q", ErrFrame, data[:4], magicBatch)
	}
	var h [11]uint64
	for i := range h {
		h[i] = uint64(le.Uint32(data[4+4*i:]))
	}
	ne, na, d, dtype, k, s, nstart, nend, flags, nc := h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]
	if h[10] != 0 {
		return nil, fmt.Errorf("%w: the header's last word is %d, not 0", ErrFrame, h[10])
	}
	if dtype != DTypeFloat32 && dtype != DTypeUint8 {
		return nil, fmt.Errorf("%w: observation dtype %d (1 float32, 2 uint8)", ErrFrame, dtype)
	}
	if flags&^flagFinal != 0 {
		return nil, fmt.Errorf("%w: batch flags %#x", ErrFrame, flags)
	}
	// Every count is below 2^32: a product of two cannot overflow, and
	// one of three is taken only of a product of two under the bound.
	ea, eS, aD := ne*na, ne*s, na*d
	var eaD, eaK uint64
	if ea <= MaxBatchElements {
		eaD, eaK = ea*d, ea*k
	}
	if ea > MaxBatchElements || eaD > MaxBatchElements || eaK > MaxBatchElements || eS > MaxBatchElements || aD > MaxBatchElements {
		return nil, fmt.Errorf("%w: a batch of %d envs × %d agents × %d observations, %d actions, %d state: over %d elements", ErrFrame, ne, na, d, k, s, MaxBatchElements)
	}
	if nstart > uint64(len(data))/24 || nend > uint64(len(data))/24 {
		return nil, fmt.Errorf("%w: %d started and %d ended episodes in a frame of %d bytes", ErrFrame, nstart, nend, len(data))
	}
	es := uint64(obsSize(int(dtype)))
	body := uint64(batchHeader) + 4*ea + 4*eS + es*eaD + eaK + ea + 2*ne
	body = uint64(pad8(int(body)))
	if na*(2+nc) > MaxBatchElements {
		return nil, fmt.Errorf("%w: %d agents × %d credits: over %d elements", ErrFrame, na, nc, MaxBatchElements)
	}
	final := uint64(0)
	if flags&flagFinal != 0 {
		final = uint64(pad8(int(es*aD + 4*s)))
	}
	credits := uint64(0)
	if nc > 0 {
		credits = na * (2 + nc)
	}
	per := 24 + final + 8*credits
	want := body + 24*nstart + per*nend
	if uint64(len(data)) != want {
		return nil, fmt.Errorf("%w: a batch frame of %d envs, %d agents, %d started and %d ended is %d bytes, not %d", ErrFrame, ne, na, nstart, nend, want, len(data))
	}
	b := &Batch{NumEnvs: int(ne), NumAgents: int(na), ObsDim: int(d), ObsDType: int(dtype), NumActions: int(k), StateDim: int(s), Final: flags&flagFinal != 0, NumCredit: int(nc)}
	p := batchHeader
	floats := func(n uint64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(le.Uint32(data[p+4*i:]))
		}
		p += 4 * int(n)
		return v
	}
	bytes := func(n uint64) []byte {
		v := append([]byte(nil), data[p:p+int(n)]...)
		p += int(n)
		return v
	}
	b.Rewards = floats(ea)
	b.State = floats(eS)
	if dtype == DTypeUint8 {
		b.ObsBytes = bytes(eaD)
	} else {
		b.Obs = floats(eaD)
	}
	b.Masks, b.Acting = bytes(eaK), bytes(ea)
	b.Terminated, b.Truncated = bytes(ne), bytes(ne)
	if err := zeros(data[p:body], "the padding after the arrays"); err != nil {
		return nil, err
	}
	p = int(body)
	for range nstart {
		st := Started{Env: int(le.Uint32(data[p:])), Seed: le.Uint64(data[p+8:]), RolloutID: int64(le.Uint64(data[p+16:]))}
		if err := zeros(data[p+4:p+8], "a started episode's padding"); err != nil {
			return nil, err
		}
		if uint64(st.Env) >= ne {
			return nil, fmt.Errorf("%w: a started episode in env %d of %d", ErrFrame, st.Env, ne)
		}
		b.Started = append(b.Started, st)
		p += 24
	}
	for range nend {
		start := p
		e := Ended{Env: int(le.Uint32(data[p:])), Status: Status(data[p+4]), RolloutID: int64(le.Uint64(data[p+8:])), Team: math.Float64frombits(le.Uint64(data[p+16:]))}
		if err := zeros(data[p+5:p+8], "an ended episode's padding"); err != nil {
			return nil, err
		}
		if uint64(e.Env) >= ne {
			return nil, fmt.Errorf("%w: an ended episode in env %d of %d", ErrFrame, e.Env, ne)
		}
		if e.Status < StatusCompleted || e.Status > StatusFailed {
			return nil, fmt.Errorf("%w: an ended episode's status %d (1 to 4)", ErrFrame, e.Status)
		}
		p += 24
		if b.Final {
			if dtype == DTypeUint8 {
				e.FinalObsBytes = bytes(aD)
			} else {
				e.FinalObs = floats(aD)
			}
			e.FinalState = floats(s)
			end := start + 24 + int(final)
			if err := zeros(data[p:end], "an ended episode's padding"); err != nil {
				return nil, err
			}
			p = end
		}
		if credits > 0 {
			e.Credit = make([]float64, credits)
			for i := range e.Credit {
				e.Credit[i] = math.Float64frombits(le.Uint64(data[p+8*i:]))
			}
			p += 8 * int(credits)
		}
		b.Ended = append(b.Ended, e)
	}
	return b, nil
}

// zeros refuses padding that is not zeros: a frame has one encoding.
func zeros(b []byte, what string) error {
	for _, c := range b {
		if c != 0 {
			return fmt.Errorf("%w: %s is not zeros", ErrFrame, what)
		}
	}
	return nil
}
