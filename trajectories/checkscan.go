package trajectories

import (
	"bytes"
	"encoding/json"

	"github.com/troupe-rl/troupe/internal/jsonscan"

	"github.com/troupe-rl/troupe/protocol"
)

// fastScan reads one JSON line strictly in one pass without building it:
// troupe check's fast path, in the manner of the viewer's index (which
// skips what it does not need by finding where each value ends), but
// checking everything encoding/json and protocol.Sample.Validate would
// refuse: the syntax of every value (control characters and escapes in
// strings included), the types of the keys troupe writes, and the sample's
// invariants. It does not say why a line fails: on any failure, and on
// anything unusual (an escaped key, a key that differs from troupe's only
// in case, a repeated key, a null inside a reward dict), the caller
// decodes the line with the strict decoder, which names the problem. So a
// line the fast path accepts is one the decoder accepts with the same
// identity, and a line it refuses costs a full decode.
type fastScan struct {
	jsonscan.Scanner // strict, escaped keys fail, MaxDepth maxDepth

	// the sample being read
	rolloutID, groupIndex, index int64
	hasID, hasStatus             bool
	status                       []byte
	tokens                       int // -1: null
	responseLength               int // response_length
	lossMask                     []int
	hasMask, hasLogProbs         bool // not null
	logProbs                     []float64
	textOnly                     bool
	placeholder                  bool
}

// reset starts reading b, keeping the slices' storage.
func (s *fastScan) reset(b []byte) {
	*s = fastScan{Scanner: jsonscan.Scanner{B: b, MaxDepth: maxDepth}, lossMask: s.lossMask[:0], logProbs: s.logProbs[:0]}
}

// fail marks the line as one for the decoder and ends the scan.
func (s *fastScan) fail() { s.Fail("left to the decoder") }

// int reads an integer as encoding/json reads one into an int64; null is
// 0.
func (s *fastScan) int() int64 {
	if s.Null() {
		return 0
	}
	v, frac, ok := s.Int()
	if !s.Failed() && (frac || !ok) {
		s.fail()
	}
	return v
}

// uint reads an unsigned integer (a seed); null is 0.
func (s *fastScan) uint() {
	if s.Null() {
		return
	}
	if _, ok := s.Uint(); !ok {
		s.fail()
	}
}

// float reads a number as encoding/json reads one into a float64 (out of
// range is an error); null is 0.
func (s *fastScan) float() float64 {
	if s.Null() {
		return 0
	}
	return s.Float()
}

// checkFloat reads a number into a float64 that is only checked.
func (s *fastScan) checkFloat() {
	if s.Null() {
		return
	}
	if raw, _ := s.Number(); !s.Failed() && !jsonscan.InFloatRange(raw) {
		s.fail()
	}
}

// string reads a string or null.
func (s *fastScan) string() {
	if !s.Null() {
		s.String()
	}
}

// maxDepth bounds nesting below encoding/json's 10000, so that the decoder
// decides about a line nested near its bound.
const maxDepth = 9000

// Top-level keys of a sample, as bits of a set.
const (
	kGroupIndex = 1 << iota
	kIndex
	kRolloutID
	kPrompt
	kTokens
	kResponse
	kResponseLength
	kLabel
	kReward
	kLossMask
	kLogProbs
	kRemoveSample
	kStatus
	kMetadata
)

var sampleKeys = map[string]int{
	"group_index": kGroupIndex, "index": kIndex, "rollout_id": kRolloutID, "prompt": kPrompt,
	"tokens": kTokens, "response": kResponse, "response_length": kResponseLength, "label": kLabel,
	"reward": kReward, "loss_mask": kLossMask, "rollout_log_probs": kLogProbs,
	"remove_sample": kRemoveSample, "status": kStatus, "metadata": kMetadata,
}

// metadataKinds are the types of Metadata's typed keys.
const (
	mString = iota
	mUint
	mInt
	mFloat
	mBool
)

type metadataKind struct{ kind, bit int }

var metadataKinds = func() map[string]metadataKind {
	m := map[string]metadataKind{}
	for i, k := range []struct {
		name string
		kind int
	}{
		{"scenario", mString}, {"seed", mUint}, {"episode", mInt}, {"agent", mString}, {"role", mString},
		{"turn", mInt}, {"step", mInt}, {"state", mString}, {"team", mString}, {"team_reward", mFloat}, {"raw_reward", mFloat},
		{"agent_score", mFloat}, {"allocator", mString}, {"text_only", mBool}, {"end", mString},
		{"error", mString}, {"action", mString},
	} {
		m[k.name] = metadataKind{k.kind, 1 << i}
	}
	return m
}()

// knownFold reports whether k is not one of keys but matches one of them
// but for case, which encoding/json would take for it.
func knownFold(k []byte) bool {
	for name := range sampleKeys {
		if len(name) == len(k) && bytes.EqualFold(k, []byte(name)) {
			return true
		}
	}
	return false
}

// sample reads the sample object at the cursor, and reports whether it is
// a valid sample (else the decoder must tell why, or that it is one).
func (s *fastScan) sample() bool {
	s.hasID, s.hasStatus, s.status = false, false, nil
	s.rolloutID, s.groupIndex, s.index = 0, 0, 0
	s.tokens, s.responseLength = -1, 0
	s.hasMask, s.hasLogProbs, s.textOnly, s.placeholder = false, false, false, false
	s.lossMask, s.logProbs = s.lossMask[:0], s.logProbs[:0]
	if s.Peek() != '{' {
		s.fail()
		return false
	}
	seen := 0
	s.Object(func(k []byte) {
		bit, ok := sampleKeys[string(k)]
		if !ok {
			if knownFold(k) {
				s.fail()
				return
			}
			s.Skip()
			return
		}
		if seen&bit != 0 {
			s.fail() // a repeated key: the decoder takes the last
			return
		}
		seen |= bit
		switch bit {
		case kGroupIndex:
			s.groupIndex = s.int()
		case kIndex:
			s.index = s.int()
		case kRolloutID:
			if !s.Null() {
				s.hasID = true
				s.rolloutID = s.int()
			}
		case kPrompt:
			s.prompt()
		case kTokens:
			if s.Null() {
				return
			}
			s.tokens = 0
			s.Array(func(int) {
				s.intValue()
				s.tokens++
			})
		case kResponse:
			s.string()
		case kResponseLength:
			s.responseLength = int(s.int())
		case kLabel:
			s.Skip()
		case kReward:
			switch s.Peek() {
			case 'n':
				s.Literal("null")
			case '{':
				s.Object(func([]byte) {
					if s.Peek() == 'n' {
						s.fail() // null in a dict: the decoder's business
						return
					}
					s.checkFloat()
				})
			default:
				s.checkFloat()
			}
		case kLossMask:
			if s.Null() {
				return
			}
			s.hasMask = true
			s.Array(func(int) { s.lossMask = append(s.lossMask, int(s.intValue())) })
		case kLogProbs:
			if s.Null() {
				return
			}
			s.hasLogProbs = true
			s.Array(func(int) {
				if s.Peek() == 'n' {
					s.fail()
					return
				}
				s.logProbs = append(s.logProbs, s.float())
			})
		case kRemoveSample:
			s.Bool()
		case kStatus:
			if s.Null() {
				return
			}
			st, escaped := s.String()
			if escaped {
				s.fail()
			}
			s.hasStatus, s.status = true, st
		case kMetadata:
			if !s.Null() {
				s.metadata()
			}
		}
	})
	if s.Failed() || !s.hasID || !s.hasStatus || !protocol.Status(s.status).Valid() {
		s.fail()
		return false
	}
	return s.valid()
}

// intValue reads an array element into an int: a null is left to the
// decoder.
func (s *fastScan) intValue() int64 {
	if s.Peek() == 'n' {
		s.fail()
		return 0
	}
	return s.int()
}

// prompt reads a string, null, or a list of chat messages.
func (s *fastScan) prompt() {
	switch s.Peek() {
	case '"':
		s.String()
	case 'n':
		s.Literal("null")
	case '[':
		s.Array(func(int) {
			if s.Null() {
				return
			}
			if s.Peek() != '{' {
				s.fail()
				return
			}
			s.Object(func(k []byte) {
				switch string(k) {
				case "role", "content":
					s.string()
				default:
					if bytes.EqualFold(k, []byte("role")) || bytes.EqualFold(k, []byte("content")) {
						s.fail()
						return
					}
					s.Skip()
				}
			})
		})
	default:
		s.fail()
	}
}

// metadata reads the metadata object.
func (s *fastScan) metadata() {
	if s.Peek() != '{' {
		s.fail()
		return
	}
	seen, placeholderSeen := 0, false
	s.Object(func(k []byte) {
		m, typed := metadataKinds[string(k)]
		if !typed {
			if string(k) == PlaceholderKey {
				if placeholderSeen {
					s.fail() // repeated: the decoder's map keeps the last
					return
				}
				placeholderSeen = true
				s.placeholder = s.Peek() == 't'
			}
			// Extras decode into any: their numbers must fit a float64.
			s.FloatRange = true
			s.Skip()
			s.FloatRange = false
			return
		}
		if seen&m.bit != 0 {
			s.fail() // repeated: the decoder's map keeps the last
			return
		}
		seen |= m.bit
		switch m.kind {
		case mString:
			s.string()
		case mUint:
			s.uint()
		case mInt:
			s.int()
		case mFloat:
			s.checkFloat()
		case mBool:
			v := s.Bool()
			if string(k) == "text_only" {
				s.textOnly = v
			}
		}
	})
}

// valid checks what protocol.Sample.Validate checks of the sample read.
func (s *fastScan) valid() bool {
	if s.tokens <= 0 {
		return s.responseLength == 0 && !s.hasMask && !s.hasLogProbs && s.textOnly
	}
	rl := s.responseLength
	if s.textOnly || rl < 1 || s.tokens < rl+1 ||
		s.hasMask && len(s.lossMask) != rl || s.hasLogProbs && len(s.logProbs) != rl {
		return false
	}
	for _, m := range s.lossMask {
		if m != 0 && m != 1 {
			return false
		}
	}
	for i, lp := range s.logProbs {
		if lp > 0 || s.hasMask && s.lossMask[i] == 0 && lp != 0 {
			return false
		}
	}
	return true
}

// Line kinds, as the fast path and the decoder found them.
const (
	lineBlank  = iota // only spaces: skipped, as the readers skip it
	lineFlat          // one valid sample (fast path)
	lineNested        // a list of valid samples of one rollout, indexes consecutive (fast path)
	lineSlow          // decoded by the decoder: samples holds them
	lineBad           // the decoder refused it: err
	lineCut           // the last line, without its newline
	lineLong          // longer than maxLine
)

// lineFacts is what check keeps of one line of samples: its identity
// when the fast path read it, its decoded samples when the decoder had to.
type lineFacts struct {
	no                    int   // line number, from 1 (in a chunk: from the chunk's start)
	end                   int64 // the offset after the line
	kind                  uint8
	nested                bool // lineSlow: the line is a list
	rollout, group, index int64
	count                 int32 // lineNested: samples
	placeholders          int32
	samples               []protocol.Sample // lineSlow
	err                   error             // lineBad
}

// scanLine reads one line (its newline included or not) into lf.
func (fs *fastScan) scanLine(line []byte, lf *lineFacts) {
	b := bytes.TrimRight(line, " \t\r\n")
	start := 0
	for start < len(b) && (b[start] == ' ' || b[start] == '\t' || b[start] == '\r' || b[start] == '\n') {
		start++
	}
	b = b[start:]
	if len(b) == 0 {
		lf.kind = lineBlank
		return
	}
	if b[0] < 0x80 && b[len(b)-1] < 0x80 {
		fs.reset(b)
		switch b[0] {
		case '{':
			if fs.sample() {
				if fs.Space(); fs.I == len(b) {
					lf.kind, lf.rollout, lf.group, lf.index = lineFlat, fs.rolloutID, fs.groupIndex, fs.index
					if fs.placeholder {
						lf.placeholders = 1
					}
					return
				}
			}
		case '[':
			if fs.nestedLine(lf) {
				return
			}
		}
	}
	slowLine(line, lf)
}

// nestedLine reads a list of samples on the fast path.
func (fs *fastScan) nestedLine(lf *lineFacts) bool {
	n := int32(0)
	ok := true
	fs.Array(func(int) {
		if !fs.sample() {
			ok = false
			fs.fail()
			return
		}
		if n == 0 {
			lf.rollout, lf.group, lf.index = fs.rolloutID, fs.groupIndex, fs.index
		} else if fs.rolloutID != lf.rollout || fs.index != lf.index+int64(n) {
			ok = false
			fs.fail()
			return
		}
		if fs.placeholder {
			lf.placeholders++
		}
		n++
	})
	if !ok || fs.Failed() || n == 0 {
		lf.placeholders = 0
		return false
	}
	if fs.Space(); fs.I != len(fs.B) {
		lf.placeholders = 0
		return false
	}
	lf.kind, lf.count = lineNested, n
	return true
}

// slowLine decodes line as Reader does.
func slowLine(line []byte, lf *lineFacts) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		lf.kind = lineBlank
		return
	}
	if line[0] == '[' {
		list := []protocol.Sample{}
		if err := json.Unmarshal(line, &list); err != nil {
			lf.kind, lf.err = lineBad, err
			return
		}
		lf.kind, lf.nested, lf.samples = lineSlow, true, list
		return
	}
	var s protocol.Sample
	if err := s.UnmarshalJSON(line); err != nil {
		lf.kind, lf.err = lineBad, err
		return
	}
	lf.kind, lf.samples = lineSlow, []protocol.Sample{s}
}

// recordFacts is what check keeps of one episode record: its identity and
// how many samples it is written as.
type recordFacts struct {
	rollout, group, index int64
	emitted               int
}

// objects reads null or an array of objects, calling f for each key of an
// object and end after each object.
func (fs *fastScan) objects(f func(k []byte), end func()) {
	if fs.Null() {
		return
	}
	fs.Array(func(int) {
		if fs.Peek() != '{' {
			fs.fail()
			return
		}
		fs.Object(f)
		end()
	})
}

// record reads an episode record's identity and its emitted turns.
func (fs *fastScan) record(line []byte) (recordFacts, bool) {
	fs.reset(bytes.TrimSpace(line))
	var r recordFacts
	if fs.Peek() != '{' {
		return r, false
	}
	// emit says which turns are emitted: a tree-sampled turn's candidates
	// other than the chosen one are samples too (episode.Record.Emitted).
	var emit []bool
	fs.Object(func(k []byte) {
		switch string(k) {
		case "rollout_id":
			r.rollout = fs.int()
		case "group_index":
			r.group = fs.int()
		case "index":
			r.index = fs.int()
		case "turns":
			emitted := false
			fs.objects(func(k []byte) {
				if string(k) == "emit" {
					emitted = fs.Bool()
					return
				}
				fs.Skip()
			}, func() {
				if emitted {
					r.emitted++
				}
				emit, emitted = append(emit, emitted), false
			})
		case "candidates":
			// A turn's first candidate is its sample, counted with the
			// turns; the others add one each (episode.Record.Emitted).
			turn, last := int64(-1), int64(-1)
			fs.objects(func(k []byte) {
				if string(k) == "turn" {
					turn = fs.int()
					return
				}
				fs.Skip()
			}, func() {
				if turn >= 0 && turn < int64(len(emit)) && emit[turn] && turn == last {
					r.emitted++
				}
				last, turn = turn, -1
			})
		default:
			fs.Skip()
		}
	})
	fs.Space()
	return r, !fs.Failed() && fs.I == len(fs.B)
}
