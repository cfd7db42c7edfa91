package llm

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/troupe-rl/troupe/internal/jsonscan"
	"github.com/troupe-rl/troupe/protocol"
)

// The token path's JSON, by hand. A token-in turn on llama.cpp sends the
// chat to /apply-template, reads its rendering back, and sends and reads
// token ids (/tokenize, /detokenize, /completion): at turn 40 of a
// conversation that is some 20 KB of chat and 7,000 ids a turn.
// encoding/json's reflection (and go-openai's MarshalJSON of every message,
// which json.Marshal then compacts and checks again) cost more CPU than the
// calls themselves, so these write the bodies as json.Marshal would but for
// strings, which protocol.AppendString writes as every string troupe writes
// (no HTML escapes: a rendered prompt's "<|im_start|>" goes as it is, not
// as "\u003c|im_start|\u003e", and llama-server reads both the same), and
// read the answers in one pass with jsonscan, as the chat path's answer
// scanner does (scan.go). FuzzLlamaJSON holds them to encoding/json: what
// they write decodes to what json.Marshal's bytes decode to.

// appendInts appends ids as a JSON array, as json.Marshal writes an []int.
func appendInts(b []byte, ids []int) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInt(b, id)
	}
	return append(b, ']')
}

// appendInt appends v in decimal: token ids are small, and writing their
// digits straight costs a fifth of strconv.AppendInt's general path.
func appendInt(b []byte, v int) []byte {
	if v < 0 || v >= 1e9 {
		return strconv.AppendInt(b, int64(v), 10)
	}
	var d [9]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + v%10)
		if v /= 10; v == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}

// appendChatBody appends the body of a chat to be rendered: the model, the
// messages as go-openai writes a text message (role, then content unless
// it is empty), then fields: json.Marshal's bytes of {model, messages:
// toOpenAI(chat)} with fields spliced in, but for strings' escapes
// (protocol.AppendString's), so it decodes to the same value.
func appendChatBody(b []byte, model string, chat []protocol.ChatMessage, fields []byte) []byte {
	b = append(b, `{"model":`...)
	b = protocol.AppendString(b, model)
	b = append(b, `,"messages":[`...)
	for i := range chat {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"role":`...)
		b = protocol.AppendString(b, chat[i].Role)
		if chat[i].Content != "" {
			b = append(b, `,"content":`...)
			b = protocol.AppendString(b, chat[i].Content)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	return append(appendFields(b, fields), '}')
}

// chatBodySize is a bound of appendChatBody's length for chat, but for
// escapes, to size its buffer once.
func chatBodySize(model string, chat []protocol.ChatMessage, fields []byte) int {
	n := len(model) + len(fields) + 32
	for i := range chat {
		n += len(chat[i].Role) + len(chat[i].Content) + 32
	}
	return n + n/16
}

// str reads a JSON string as encoding/json decodes one into a string.
func (s *scanner) str() string {
	raw, escaped := s.String()
	switch {
	case s.Failed():
		return ""
	case !escaped && utf8.Valid(raw):
		return string(raw)
	}
	out, ok := unquote(raw)
	if !ok {
		s.Fail("bad string")
	}
	return out
}

// unquote decodes the escapes of raw, a JSON string's bytes between its
// quotes that jsonscan has checked, as encoding/json does: a lone or
// reversed surrogate and invalid UTF-8 become U+FFFD.
func unquote(raw []byte) (string, bool) {
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		switch c := raw[i]; {
		case c == '\\':
			if i+1 >= len(raw) {
				return "", false
			}
			switch e := raw[i+1]; e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, ok := hex4(raw, i+2)
				if !ok {
					return "", false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if r2, ok := hex4(raw, i+2); ok && i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							b = utf8.AppendRune(b, dec)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				b = utf8.AppendRune(b, r)
				continue
			default:
				return "", false
			}
			i += 2
		case c < utf8.RuneSelf:
			// A run of plain bytes at once.
			j := i + 1
			for j < len(raw) && raw[j] != '\\' && raw[j] < utf8.RuneSelf {
				j++
			}
			b = append(b, raw[i:j]...)
			i = j
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, raw[i:i+size]...)
			}
			i += size
		}
	}
	return string(b), true
}

// hex4 reads the four hex digits of a \u escape at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// ints reads an array of integers, or null (nil), as encoding/json decodes
// one into an []int; a null element fails (encoding/json would read 0, a
// token id troupe would be guessing).
func (s *scanner) ints() []int {
	var spans [][2]int
	return s.intsSpan(&spans)
}

// readObject reads the JSON object b, handing each key to fn, which must
// consume its value; a failed scan is an error naming the byte.
func readObject(b []byte, fn func(s *scanner, key []byte)) error {
	// Keys decoded, as encoding/json matches them.
	s := &scanner{jsonscan.Scanner{B: b, Keys: jsonscan.KeysDecode, FloatRange: true}}
	if !s.Null() {
		s.Object(func(key []byte) { fn(s, key) })
	}
	s.End()
	if why, at := s.Why(); s.Failed() {
		return fmt.Errorf("byte %d: %s", at, why)
	}
	return nil
}

// readStringKey reads the string at key of the JSON object b: nil when it
// is absent or null, as encoding/json leaves a *string.
func readStringKey(b []byte, key string) (*string, error) {
	var out *string
	err := readObject(b, func(s *scanner, k []byte) {
		switch {
		case string(k) != key:
			s.Skip()
		case s.Null():
			out = nil
		default:
			v := s.str()
			out = &v
		}
	})
	return out, err
}

// readStringOrNull reads the string at key of the JSON object b, as
// encoding/json reads the object into a map of raw values and that value
// into a string: null is "", and present says whether the key is there.
func readStringOrNull(b []byte, key string) (v string, present bool, err error) {
	err = readObject(b, func(s *scanner, k []byte) {
		if string(k) != key {
			s.Skip()
			return
		}
		present = true
		if s.Null() {
			v = ""
			return
		}
		v = s.str()
	})
	return v, present, err
}

// readTokensKey reads the "tokens" array of ids of the JSON object b
// (/tokenize's answer): nil when it is absent or null.
func readTokensKey(b []byte) ([]int, error) {
	var ids []int
	err := readObject(b, func(s *scanner, k []byte) {
		if string(k) != "tokens" {
			s.Skip()
			return
		}
		ids = s.ints()
	})
	return ids, err
}

// readLlamaCompletion reads a /completion answer into a, as
// json.Unmarshal would.
func readLlamaCompletion(b []byte, a *llamaCompletion) error {
	return readObject(b, func(s *scanner, k []byte) {
		switch string(k) {
		case "content":
			if !s.Null() {
				a.Content = s.str()
			}
		case "tokens":
			a.Tokens = s.ints()
		case "stop_type":
			if !s.Null() {
				a.StopType = s.str()
			}
		case "tokens_evaluated":
			if !s.Null() {
				a.TokensEvaluated = s.integer()
			}
		case "truncated":
			if !s.Null() {
				a.Truncated = s.Bool()
			}
		case "completion_probabilities":
			if s.Null() {
				a.Probs = nil
				return
			}
			a.Probs = make([]llamaProb, 0, 16)
			s.Array(func(int) {
				var p llamaProb
				if !s.Null() {
					s.Object(func(k []byte) {
						switch string(k) {
						case "id":
							if !s.Null() {
								p.ID = s.integer()
							}
						case "logprob":
							if !s.Null() {
								p.LogProb = s.Float()
							}
						default:
							s.Skip()
						}
					})
				}
				a.Probs = append(a.Probs, p)
			})
		default:
			s.Skip()
		}
	})
}
