package llm

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	"github.com/troupe-rl/troupe/protocol"
)

// What the token path on llama.cpp remembers between an agent's turns.
//
// Turn k's prompt ids extend turn k-1's when the server's rendering of
// turn k's chat begins with its rendering of turn k-1's chat and the text
// of turn k-1's answer (tokenin.go). Asked afresh, that is two calls
// besides the turn's own: /apply-template of turn k-1's chat, which is
// the whole conversation less a turn (at turn 40, 20 KB sent and read
// back), and /detokenize of the answer's ids. Both answers are what turn
// k-1 itself got: it rendered that very chat, and detokenized the
// answer's ids (all of them, or all but an end-of-generation token the
// server writes as no text). So the client keeps each turn's rendering
// and its answer's text for the next turn, which asks only when they are
// not kept (another client's turn, a resumed run, an entry pushed out by
// newer ones): the same text either way, from a server whose rendering is
// a function of the chat, as llama.cpp's is.
//
// The text of all the answer's ids, when turn k-1 left an end token out
// of its own, is that text and the end token's: llama.cpp's /detokenize
// writes each token's piece after the other (tokens_to_str in
// tools/server/server-common.cpp), so the text of ids a, b is the text of
// a followed by the text of b. The client learns an end token's text the
// first time it asks for a whole answer's, and keeps it: a model has a
// handful of end tokens.

// renderingsPerSlot bounds the renderings kept, per request the client
// may have in flight: enough for every conversation in flight and those
// between turns, each of which needs its last. maxRenderingBytes bounds
// their text.
const (
	renderingsPerSlot = 4
	maxRenderingBytes = 64 << 20
)

// maxEndPieces bounds the end tokens whose text is kept.
const maxEndPieces = 64

// rendering is one chat the token path rendered, and its answer.
type rendering struct {
	seq    uint64 // when it was kept
	model  string
	fields []byte
	chat   []protocol.ChatMessage
	text   string // the server's rendering of chat
	// response are the answer's ids, decoded their text less the last
	// when dropped (an end-of-generation token written as no text).
	response []int
	decoded  string
	dropped  bool
}

func (r *rendering) size() int { return len(r.text) + len(r.decoded) }

// renderings keeps the token path's last renderings, at most max of them
// and maxRenderingBytes of text, pushing out the oldest. A rendering is
// kept after it is taken, so that a re-ask that extends the previous turn
// again finds it too.
type renderings struct {
	seed maphash.Seed
	max  int

	mu     sync.Mutex
	byKey  map[uint64]*rendering
	queue  []queued // oldest first; an entry whose key was kept again since is stale
	bytes  int      // the text of byKey's renderings
	seq    uint64
	pieces map[int]string // end tokens' text
}

type queued struct {
	key, seq uint64
}

func newRenderings(max int) *renderings {
	return &renderings{seed: maphash.MakeSeed(), max: max, byKey: map[uint64]*rendering{}, pieces: map[int]string{}}
}

// hash identifies a chat rendered with model and fields.
func (rs *renderings) hash(model string, fields []byte, chat []protocol.ChatMessage) uint64 {
	var h maphash.Hash
	h.SetSeed(rs.seed)
	write := func(s string) {
		// The length first, so that no two chats write the same bytes.
		var n [8]byte
		for i, l := 0, len(s); i < 8; i, l = i+1, l>>8 {
			n[i] = byte(l)
		}
		_, _ = h.Write(n[:])
		_, _ = h.WriteString(s)
	}
	write(model)
	write(string(fields))
	for i := range chat {
		write(chat[i].Role)
		write(chat[i].Content)
	}
	return h.Sum64()
}

// keep keeps r, pushing out the oldest renderings when over the bounds.
func (rs *renderings) keep(r *rendering) {
	if rs == nil {
		return
	}
	// Its own copies: what the chat and the answer were when kept.
	r.chat, r.response = slices.Clone(r.chat), slices.Clone(r.response)
	key := rs.hash(r.model, r.fields, r.chat)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.seq++
	r.seq = rs.seq
	if old, ok := rs.byKey[key]; ok {
		rs.bytes -= old.size()
	}
	rs.byKey[key] = r
	rs.bytes += r.size()
	rs.queue = append(rs.queue, queued{key, r.seq})
	for len(rs.queue) > 0 && (len(rs.byKey) > rs.max || rs.bytes > maxRenderingBytes || len(rs.queue) > 2*rs.max) {
		q := rs.queue[0]
		rs.queue = rs.queue[1:]
		if o, ok := rs.byKey[q.key]; ok && o.seq == q.seq {
			delete(rs.byKey, q.key)
			rs.bytes -= o.size()
		}
	}
}

// take returns the rendering of chat with model and fields; nil when none
// is kept.
func (rs *renderings) take(model string, fields []byte, chat []protocol.ChatMessage) *rendering {
	if rs == nil {
		return nil
	}
	key := rs.hash(model, fields, chat)
	rs.mu.Lock()
	r, ok := rs.byKey[key]
	rs.mu.Unlock()
	if !ok || r.model != model || string(r.fields) != string(fields) || !slices.Equal(r.chat, chat) {
		return nil
	}
	return r
}

// allText returns the text of all of ids, the answer to r's chat, when r
// knows it: r's decoded text, and the dropped end token's when the client
// has learnt it.
func (rs *renderings) allText(r *rendering, ids []int) (string, bool) {
	if rs == nil || r == nil || !slices.Equal(r.response, ids) {
		return "", false
	}
	if !r.dropped {
		return r.decoded, true
	}
	rs.mu.Lock()
	piece, ok := rs.pieces[ids[len(ids)-1]]
	rs.mu.Unlock()
	return r.decoded + piece, ok
}

// learn keeps the text of the end token r's answer dropped, from all, the
// text of all of ids, its answer's ids.
func (rs *renderings) learn(r *rendering, ids []int, all string) {
	if rs == nil || r == nil || !r.dropped || !slices.Equal(r.response, ids) || !strings.HasPrefix(all, r.decoded) {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.pieces) < maxEndPieces {
		rs.pieces[r.response[len(r.response)-1]] = all[len(r.decoded):]
	}
}
