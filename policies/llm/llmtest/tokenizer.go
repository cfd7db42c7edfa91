package llmtest

import (
	"strconv"
	"strings"
)

// The fake tokenizer packs ordinary text into tokens of up to three bytes
// (about as many tokens per word as a real BPE vocabulary gives), and has
// three special tokens in the style of a ChatML model, single tokens
// wherever they appear (a server's parse_special behaviour). It is
// deterministic and exactly invertible, so a test can compute the ids a
// request must produce. A token of n bytes b0, b1, b2 is
// FirstByte + (n-1)<<24 + b0 + b1<<8 + b2<<16.
const (
	EndOfText = 0 // <|endoftext|>
	ImStart   = 1 // <|im_start|>
	ImEnd     = 2 // <|im_end|>: also the end of every completion
	FirstByte = 100

	chunk = 3 // bytes per token, at most
)

var specials = [...]string{EndOfText: "<|endoftext|>", ImStart: "<|im_start|>", ImEnd: "<|im_end|>"}

// Tokenize returns the fake tokenizer's ids for text.
func Tokenize(text string) []int {
	ids := make([]int, 0, len(text)/chunk+4)
	for i := 0; i < len(text); {
		if id, n := special(text[i:]); n > 0 {
			ids = append(ids, id)
			i += n
			continue
		}
		n := 1
		for n < chunk && i+n < len(text) {
			if _, sp := special(text[i+n:]); sp > 0 {
				break
			}
			n++
		}
		ids = append(ids, Bytes(text[i:i+n]))
		i += n
	}
	return ids
}

// Bytes returns the id of the ordinary token made of the one to three
// bytes of b, without looking for special tokens.
func Bytes(b string) int {
	id := FirstByte + (len(b)-1)<<24
	for k := range len(b) {
		id += int(b[k]) << (8 * k)
	}
	return id
}

func special(s string) (id, n int) {
	if len(s) == 0 || s[0] != '<' {
		return 0, 0
	}
	for id, sp := range specials {
		if strings.HasPrefix(s, sp) {
			return id, len(sp)
		}
	}
	return 0, 0
}

// Piece returns the text of one token: a special token's name, or its
// bytes (which may cut a UTF-8 sequence, as real byte-level tokenizers
// do).
func Piece(id int) string {
	if id >= 0 && id < len(specials) {
		return specials[id]
	}
	v := id - FirstByte
	if v < 0 || v >= chunk<<24 {
		return "<|unk:" + strconv.Itoa(id) + "|>"
	}
	n := v>>24 + 1
	b := make([]byte, n)
	for k := range n {
		b[k] = byte(v >> (8 * k))
	}
	return string(b)
}

// Detokenize is the inverse of Tokenize.
func Detokenize(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(Piece(id))
	}
	return b.String()
}

// Message is one chat message as the server reads it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ApplyTemplate renders a chat in the fake model's ChatML template, with the
// generation prompt for the assistant's reply at the end. The server's
// prompt token ids are Tokenize(ApplyTemplate(messages)).
func ApplyTemplate(msgs []Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(specials[ImStart])
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Content)
		b.WriteString(specials[ImEnd])
		b.WriteByte('\n')
	}
	b.WriteString(specials[ImStart])
	b.WriteString("assistant\n")
	return b.String()
}

// ReadTemplate reads a chat back from its rendering by ApplyTemplate (the
// generation prompt at its end left out): what a llama.cpp-shaped server's
// /completion shows its brain of a token-id prompt.
func ReadTemplate(text string) []Message {
	var msgs []Message
	for _, part := range strings.Split(text, specials[ImStart])[1:] {
		role, content, ok := strings.Cut(part, "\n")
		if !ok {
			continue
		}
		content, done := strings.CutSuffix(content, specials[ImEnd]+"\n")
		if !done {
			content, done = strings.CutSuffix(content, specials[ImEnd])
		}
		if !done && content == "" {
			continue // the generation prompt
		}
		msgs = append(msgs, Message{Role: role, Content: content})
	}
	return msgs
}

// PromptIDs returns the prompt token ids the server computes for msgs.
func PromptIDs(msgs []Message) []int { return Tokenize(ApplyTemplate(msgs)) }

// CompletionIDs returns the token ids of a completion whose text is text and
// that stopped by itself: the text's tokens, then ImEnd.
func CompletionIDs(text string) []int { return append(Tokenize(text), ImEnd) }

// LogProb is the log-probability the fake model gives token id at position
// pos of a completion: a deterministic value in [-1, 0).
func LogProb(id, pos int) float64 {
	h := uint64(id)*0x9e3779b97f4a7c15 ^ uint64(pos)*0xbf58476d1ce4e5b9
	h ^= h >> 29
	return -float64(h%1000+1) / 1000
}
