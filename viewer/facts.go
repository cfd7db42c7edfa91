package viewer

import (
	"errors"
	"fmt"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// interner keeps one copy of the strings that repeat from line to line
// (statuses, roles, agent ids, allocator names), so that the index of a
// large file holds each once.
type interner map[string]string

func (in interner) bytes(b []byte) string {
	if s, ok := in[string(b)]; ok {
		return s
	}
	s := string(b)
	in[s] = s
	return s
}

func (in interner) string(s string) string {
	if t, ok := in[s]; ok {
		return t
	}
	in[s] = s
	return s
}

// istr reads a string value, interned.
func (s *scanner) istr(in interner) string {
	raw, escaped := s.String()
	if s.Failed() {
		return ""
	}
	if !escaped {
		return in.bytes(raw)
	}
	return in.string(s.unquote(raw))
}

// sampleFacts is what the index keeps of one sample: its episode's
// identity and outcome, who played it, and its reward.
type sampleFacts struct {
	RolloutID, GroupIndex, Episode, Turn int64
	Seed                                 uint64
	Status, Scenario, Agent, Role, End   string
	Allocator                            string // metadata.allocator
	TeamReward, AgentScore               float64
	HasScore                             bool
	Invalid                              bool // metadata.invalid is set
	Record                               bool // the line has a "format" key: it is an episode line
	Reward                               protocol.RewardKind
	Value                                float64   // a scalar reward
	DictNames                            []string  // a dict reward's keys, in line order
	DictValues                           []float64 // and values
}

// ErrSampleLine is wrapped by the errors of sample lines the index cannot
// use.
var ErrSampleLine = errors.New("not a slime sample")

// scanSample reads the sample object at the cursor into f.
func (s *scanner) scanSample(f *sampleFacts, in interner) {
	*f = sampleFacts{DictNames: f.DictNames[:0], DictValues: f.DictValues[:0]}
	var hasID, hasStatus bool
	s.object(func(k []byte) {
		switch string(k) {
		case "rollout_id":
			hasID = !s.Null()
			if hasID {
				f.RolloutID = s.int()
			}
		case "group_index":
			f.GroupIndex = s.int()
		case "status":
			hasStatus = !s.Null()
			if hasStatus {
				f.Status = s.istr(in)
			}
		case "reward":
			switch s.Peek() {
			case 'n':
				s.Literal("null")
				f.Reward = protocol.RewardNull
			case '{':
				f.Reward = protocol.RewardDict
				f.DictNames, f.DictValues = f.DictNames[:0], f.DictValues[:0]
				s.object(func(name []byte) {
					v, _ := s.float()
					f.DictNames = append(f.DictNames, in.bytes(name))
					f.DictValues = append(f.DictValues, v)
				})
			default:
				f.Reward = protocol.RewardScalar
				f.Value, _ = s.float()
			}
		case "format":
			f.Record = true
			s.Skip()
		case "metadata":
			s.object(func(k []byte) {
				switch string(k) {
				case "scenario":
					f.Scenario = s.nstr(in)
				case "seed":
					f.Seed = s.uint()
				case "episode":
					f.Episode = s.int()
				case "agent":
					f.Agent = s.nstr(in)
				case "role":
					f.Role = s.nstr(in)
				case "turn":
					f.Turn = s.int()
				case "team_reward":
					f.TeamReward, _ = s.float()
				case "agent_score":
					f.AgentScore, f.HasScore = s.float()
				case "allocator":
					f.Allocator = s.nstr(in)
				case "end":
					f.End = s.nstr(in)
				case "invalid":
					f.Invalid = s.nonEmptyString()
				default:
					s.Skip()
				}
			})
		default:
			s.Skip()
		}
	})
	if s.Failed() || f.Record {
		return
	}
	switch {
	case !hasID:
		s.failWith(fmt.Errorf("%w: rollout_id is missing or null", ErrSampleLine))
	case !hasStatus:
		s.failWith(fmt.Errorf("%w: status is missing", ErrSampleLine))
	case !protocol.Status(f.Status).Valid():
		s.failWith(fmt.Errorf("%w: status %q is not a slime status", ErrSampleLine, f.Status))
	}
}

// nstr reads a string or null (the empty string), interned.
func (s *scanner) nstr(in interner) string {
	if s.Null() {
		return ""
	}
	return s.istr(in)
}

// episodeFacts is what the index keeps of one troupe.episode/v2 line.
type episodeFacts struct {
	Scenario                     string
	Seed                         uint64
	Index, RolloutID, GroupIndex int64
	Status, End                  string
	Steps                        int64
	SeatRoles                    []string // the role of every seat
	EmitSeats                    []int    // the seat of every emitted turn, in order
	Turns, Messages, Invalid     int
	Team                         float64
	Agents                       []float64 // per seat; nil when the scenario has none
	Allocators                   []string
	Values                       [][]float64

	turnSeats []int // every turn's seat, -1 for those not emitted
}

// episodeKeys are the keys of an episode line, which DecodeEpisode
// requires to be exactly these.
func validEpisodeKey(k string) bool {
	switch k {
	case "format", "scenario", "params", "seed", "policy_seed", "index", "rollout_id", "group_index",
		"status", "end", "error", "stack", "steps", "label", "teams", "seats", "turns", "messages", "transitions", "score", "credit",
		"tree", "candidates":
		return true
	}
	return false
}

// scanEpisode reads the episode object at the cursor into f.
func (s *scanner) scanEpisode(f *episodeFacts, in interner) {
	*f = episodeFacts{SeatRoles: f.SeatRoles[:0], EmitSeats: f.EmitSeats[:0], turnSeats: f.turnSeats[:0]}
	format := ""
	// cands counts each turn's candidates, for a tree-sampled episode
	// only.
	var cands []int
	s.object(func(k []byte) {
		switch string(k) {
		case "format":
			format = s.nstr(in)
		case "scenario":
			f.Scenario = s.nstr(in)
		case "seed":
			f.Seed = s.uint()
		case "index":
			f.Index = s.int()
		case "rollout_id":
			f.RolloutID = s.int()
		case "group_index":
			f.GroupIndex = s.int()
		case "status":
			f.Status = s.nstr(in)
		case "end":
			f.End = s.nstr(in)
		case "steps":
			f.Steps = s.int()
		case "seats":
			s.scanSeatRoles(f, in)
		case "turns":
			s.scanTurns(f)
		case "candidates":
			cands = s.scanCandidates(f, cands)
		case "messages":
			s.array(func(int) {
				f.Messages++
				s.Skip()
			})
		case "score":
			s.scanScore(f)
		case "credit":
			s.scanCredit(f, in)
		default:
			if !validEpisodeKey(string(k)) {
				s.fail("unknown key %q", k)
				return
			}
			s.Skip()
		}
	})
	if s.Failed() {
		return
	}
	if cands != nil {
		f.emitCandidates(cands)
	}
	if err := f.check(format); err != nil {
		s.failWith(err)
	}
}

// scanSeatRoles reads the "seats" list, keeping each seat's role.
func (s *scanner) scanSeatRoles(f *episodeFacts, in interner) {
	s.array(func(int) {
		role := ""
		s.object(func(k []byte) {
			switch string(k) {
			case "role":
				role = s.nstr(in)
			case "id", "team":
				s.Skip()
			default:
				s.fail("unknown seat key %q", k)
			}
		})
		f.SeatRoles = append(f.SeatRoles, role)
	})
}

// scanTurns reads the "turns" list: it counts the turns and the invalid
// ones, and keeps the seat of each emitted turn (turnSeats too, in case
// candidates follow and make a turn several samples).
func (s *scanner) scanTurns(f *episodeFacts) {
	s.array(func(int) {
		seat, emit := int64(-1), false
		s.object(func(k []byte) {
			switch string(k) {
			case "seat":
				seat = s.int()
			case "emit":
				emit = s.Bool()
			case "invalid":
				if s.nonEmptyString() {
					f.Invalid++
				}
			default:
				s.Skip()
			}
		})
		f.Turns++
		if emit {
			f.turnSeats = append(f.turnSeats, int(seat))
			f.EmitSeats = append(f.EmitSeats, int(seat))
		} else {
			f.turnSeats = append(f.turnSeats, -1)
		}
	})
}

// scanCandidates reads a tree-sampled episode's "candidates" list, where
// a turn is one sample per candidate, and returns cands with each turn's
// count of them added; cands is made, one count per turn read so far,
// at the first candidate of a known turn.
func (s *scanner) scanCandidates(f *episodeFacts, cands []int) []int {
	s.array(func(int) {
		turn := int64(-1)
		s.object(func(k []byte) {
			if string(k) == "turn" {
				turn = s.int()
				return
			}
			s.Skip()
		})
		if turn >= 0 && turn < int64(len(f.turnSeats)) {
			if cands == nil {
				cands = make([]int, len(f.turnSeats))
			}
			cands[turn]++
		}
	})
	return cands
}

// scanScore reads the "score" object: the team's score and each seat's.
func (s *scanner) scanScore(f *episodeFacts) {
	s.object(func(k []byte) {
		switch string(k) {
		case "team":
			f.Team, _ = s.float()
		case "teams":
			s.Skip() // a scenario with teams: the page reads them from the record
		case "agents":
			if s.Null() {
				return
			}
			f.Agents = []float64{}
			s.array(func(int) {
				v, _ := s.float()
				f.Agents = append(f.Agents, v)
			})
		default:
			s.fail("unknown score key %q", k)
		}
	})
}

// scanCredit reads the "credit" object: the allocators and their values.
func (s *scanner) scanCredit(f *episodeFacts, in interner) {
	s.object(func(k []byte) {
		switch string(k) {
		case "allocators":
			s.array(func(int) { f.Allocators = append(f.Allocators, s.istr(in)) })
		case "values":
			s.array(func(int) {
				var vs []float64
				s.array(func(int) {
					v, _ := s.float()
					vs = append(vs, v)
				})
				f.Values = append(f.Values, vs)
			})
		case "notes":
			s.Skip()
		default:
			s.fail("unknown credit key %q", k)
		}
	})
}

// emitCandidates rewrites EmitSeats for a tree-sampled episode: each
// emitted turn is as many samples as it has candidates (one when none
// names it), in the order the samples are written.
func (f *episodeFacts) emitCandidates(cands []int) {
	f.EmitSeats = f.EmitSeats[:0]
	for k, seat := range f.turnSeats {
		for range max(cands[k], 1) {
			if seat >= 0 {
				f.EmitSeats = append(f.EmitSeats, seat)
			}
		}
	}
}

// check returns, wrapping trajectories.ErrEpisodeLine, the first rule of
// the form that f breaks among those DecodeEpisode enforces beyond the
// keys: the format, a slime status, emitted turns on real seats, and one
// credit value per emitted turn for each allocator. It returns nil for
// facts that keep them all.
func (f *episodeFacts) check(format string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", trajectories.ErrEpisodeLine, fmt.Sprintf(format, args...))
	}
	switch {
	case format != trajectories.EpisodeFormat:
		return bad("format %q, this build reads %q", format, trajectories.EpisodeFormat)
	case !protocol.Status(f.Status).Valid():
		return bad("status %q is not a slime status", f.Status)
	case len(f.Values) != len(f.Allocators):
		return bad("credit has %d value lists for %d allocators", len(f.Values), len(f.Allocators))
	}
	for k, seat := range f.EmitSeats {
		if seat < 0 || seat >= len(f.SeatRoles) {
			return bad("emitted turn %d names seat %d of %d", k, seat, len(f.SeatRoles))
		}
	}
	for a, v := range f.Values {
		if len(v) != len(f.EmitSeats) {
			return bad("allocator %q has %d values for %d emitted turns", f.Allocators[a], len(v), len(f.EmitSeats))
		}
	}
	return nil
}

// nonEmptyString consumes a value and reports whether it is a string other
// than "".
func (s *scanner) nonEmptyString() bool {
	if s.Peek() != '"' {
		s.Skip()
		return false
	}
	raw, _ := s.String()
	return len(raw) > 0
}
