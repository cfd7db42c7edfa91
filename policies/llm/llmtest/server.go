package llmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Kind is the server whose answer shapes the test server reproduces.
type Kind string

// The server kinds: the values of policies/llm's Kind.
const (
	VLLM     Kind = "vllm"
	SGLang   Kind = "sglang"
	LlamaCpp Kind = "llamacpp"
	OpenAI   Kind = "openai"
)

// Options configure a Server. The zero value is a vLLM-shaped server that
// answers at once with DefaultBrain and injects no faults.
type Options struct {
	Kind    Kind
	Latency time.Duration // added before every chat answer, faults included
	Brain   Brain         // nil: DefaultBrain
	Script  Script        // nil: no faults
	// Record keeps every chat request, for Requests. Leave it off in
	// benchmarks: it holds every body.
	Record bool
}

// Stats counts what a server did.
type Stats struct {
	Chat          int            // chat completion requests received
	Answered      int            // of which answered 200 with a choice
	BadRequests   int            // of which rejected with 400
	Faults        map[string]int // injected faults, by Fault.Name
	Tokenize      int            // /tokenize requests
	ApplyTemplate int            // /apply-template requests
	Detokenize    int            // /detokenize requests
	MaxInFlight   int            // most chat requests in progress at once
}

// Server is an OpenAI-compatible chat completion server for tests and
// benchmarks. It answers POST /v1/chat/completions (and /chat/completions)
// in the shape of the configured server kind, with token ids and
// log-probs from the fake tokenizer when the request asks for them in that
// kind's own fields. Each kind also answers its token-in endpoints:
// llama.cpp's /tokenize, /apply-template, /detokenize and /completion;
// vLLM's /tokenize, /detokenize and /v1/completions; SGLang's
// /v1/tokenize, /v1/detokenize and native /generate (tokenin.go). It is
// safe for concurrent use.
//
// Use it over the network (Start: a real listener on 127.0.0.1) or in
// process (Transport: no sockets, so it runs inside a testing/synctest
// bubble, where Latency, hangs and the client's backoff all take virtual
// time).
type Server struct {
	opts Options
	mux  *http.ServeMux
	hs   *httptest.Server
	done chan struct{} // closed by Close: releases hanging requests
	once sync.Once

	mu       sync.Mutex
	calls    int
	repeats  map[uint64]int
	inFlight int
	stats    Stats
	recorded []*Request
}

// NewServer returns a server that is not listening yet: use Start, or
// Transport for in-process requests.
func NewServer(opts Options) *Server {
	if opts.Kind == "" {
		opts.Kind = VLLM
	}
	if opts.Brain == nil {
		opts.Brain = DefaultBrain
	}
	s := &Server{opts: opts, done: make(chan struct{}), repeats: map[uint64]int{}, stats: Stats{Faults: map[string]int{}}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.generation(s.chat))
	mux.HandleFunc("POST /chat/completions", s.generation(s.chat))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	switch opts.Kind {
	case VLLM:
		mux.HandleFunc("POST /tokenize", s.vllmTokenize)
		mux.HandleFunc("POST /detokenize", s.vllmDetokenize)
		mux.HandleFunc("POST /v1/completions", s.generation(s.vllmCompletions))
	case SGLang:
		mux.HandleFunc("POST /v1/tokenize", s.sglangTokenize)
		mux.HandleFunc("POST /v1/detokenize", s.sglangDetokenize)
		mux.HandleFunc("POST /generate", s.generation(s.sglangGenerate))
	case LlamaCpp:
		mux.HandleFunc("POST /tokenize", s.tokenize)
		mux.HandleFunc("POST /apply-template", s.applyTemplate)
		mux.HandleFunc("POST /detokenize", s.detokenize)
		mux.HandleFunc("POST /completion", s.generation(s.completion))
	}
	s.mux = mux
	return s
}

// Start returns a server listening on 127.0.0.1 that closes when tb's test
// ends.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s := NewServer(opts)
	s.Listen()
	tb.Cleanup(s.Close)
	return s
}

// Listen starts serving on a random port of 127.0.0.1 and returns the
// OpenAI base URL (ending in /v1). Call it once.
func (s *Server) Listen() string {
	s.hs = httptest.NewServer(s)
	return s.URL()
}

// URL returns the OpenAI base URL of a listening server, ending in /v1;
// empty before Listen.
func (s *Server) URL() string {
	if s.hs == nil {
		return ""
	}
	return s.hs.URL + "/v1"
}

// Close releases hanging requests, closes client connections and stops
// listening. It is safe to call more than once.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.done)
		if s.hs != nil {
			s.hs.CloseClientConnections()
			s.hs.Close()
		}
	})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Faults = maps.Clone(s.stats.Faults)
	return st
}

// Requests returns the chat requests received so far, in arrival order,
// when Options.Record is set.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.recorded...)
}

// admit counts a parsed chat request and picks its fault.
func (s *Server) admit(req *Request) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.Record {
		s.recorded = append(s.recorded, req)
	}
	c := Call{N: s.calls}
	s.calls++
	var f Fault
	if s.opts.Script != nil {
		h := hashBody(req.Body)
		c.Repeat = s.repeats[h]
		s.repeats[h]++
		f = s.opts.Script(req, c)
	}
	if f.Kind != None {
		s.stats.Faults[f.Name()]++
	}
	return f
}

func (s *Server) enter() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Chat++
	s.inFlight++
	s.stats.MaxInFlight = max(s.stats.MaxInFlight, s.inFlight)
}

func (s *Server) leave(answered, bad bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	if answered {
		s.stats.Answered++
	}
	if bad {
		s.stats.BadRequests++
	}
}

// wait blocks for d, or until the request is cancelled or the server
// closes; it reports whether the full time passed.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.done:
	}
	return false
}

// generation serves a request that the brain answers: it counts the
// request in flight, reads its body (the client went away when that
// fails) and hands it to h, which reports whether it answered 200, or
// returns the error that rejects the request with 400.
func (s *Server) generation(h func(w http.ResponseWriter, r *http.Request, body []byte) (bool, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.enter()
		answered, bad := false, false
		defer func() { s.leave(answered, bad) }()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // the client went away
		}
		if answered, err = h(w, r, body); err != nil {
			bad = true
			writeError(w, http.StatusBadRequest, err.Error())
		}
	}
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request, body []byte) (bool, error) {
	req, err := parseRequest(body)
	if err != nil {
		return false, err
	}
	reply, fault, ok := s.think(w, r, req, req.Model)
	if !ok {
		return false, nil
	}
	resp := s.answer(req, reply, fault.Kind != NoTokenIDs)
	if fault.Kind == Truncated {
		b, _ := json.Marshal(resp)
		truncate(w, b)
		return false, nil
	}
	writeJSON(w, http.StatusOK, resp)
	return true, nil
}

// think admits a parsed request, waits the latency, answers a fault that
// replaces the answer (and reports false), and otherwise returns the
// brain's reply (a Content fault's instead) and the fault.
func (s *Server) think(w http.ResponseWriter, r *http.Request, req *Request, model string) (Reply, Fault, bool) {
	fault := s.admit(req)
	if !s.wait(r.Context(), s.opts.Latency) || s.injected(w, r, fault, model) {
		return Reply{}, fault, false
	}
	if fault.Kind == Content {
		return Reply{Text: fault.Body}, fault, true
	}
	return s.opts.Brain(req), fault, true
}

// injected answers with the fault when it is one that replaces the answer
// (a status, a hang, a malformed body, no choices), and reports whether it
// did.
func (s *Server) injected(w http.ResponseWriter, r *http.Request, fault Fault, model string) bool {
	switch fault.Kind {
	case StatusCode:
		if fault.RetryAfter != "" {
			w.Header().Set("Retry-After", fault.RetryAfter)
		}
		if fault.Body != "" {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(fault.Status)
			_, _ = io.WriteString(w, fault.Body)
			return true
		}
		writeError(w, fault.Status, "injected fault: "+http.StatusText(fault.Status))
		return true
	case Hang:
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return true
	case Malformed:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-malformed","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`)
		return true
	case EmptyChoices:
		writeJSON(w, http.StatusOK, completion{ID: "chatcmpl-empty", Object: "chat.completion", Created: created, Model: model, Choices: []choice{}})
		return true
	}
	return false
}

// llamaCompletion is llama.cpp's POST /completion answer, as much of it as
// troupe reads.
type llamaCompletion struct {
	Content         string      `json:"content"`
	Tokens          []int       `json:"tokens,omitempty"`
	Stop            bool        `json:"stop"`
	StopType        string      `json:"stop_type"`
	TokensEvaluated int         `json:"tokens_evaluated"`
	TokensPredicted int         `json:"tokens_predicted"`
	Truncated       bool        `json:"truncated"`
	Probs           []llamaProb `json:"completion_probabilities,omitempty"`
}

type llamaProb struct {
	ID      int     `json:"id"`
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
}

// completion answers llama.cpp's POST /completion with a token-id prompt
// (token in, token out). The brain sees the chat the ids stand for: the
// fake template read back (ReadTemplate). n_predict bounds the answer
// ("limit"); a finished answer ends with ImEnd ("eos"). Faults apply as to
// chat requests; NoTokenIDs leaves out the ids and log-probs.
func (s *Server) completion(w http.ResponseWriter, r *http.Request, body []byte) (bool, error) {
	var in struct {
		Prompt      []int           `json:"prompt"`
		NPredict    int             `json:"n_predict"`
		Seed        *int64          `json:"seed"`
		Temperature *float64        `json:"temperature"`
		Schema      json.RawMessage `json:"json_schema"`
		NProbs      int             `json:"n_probs"`
	}
	if err := json.Unmarshal(body, &in); err != nil || len(in.Prompt) == 0 {
		return false, errors.New("completion needs a prompt of token ids")
	}
	req := &Request{Body: body, Messages: ReadTemplate(Detokenize(in.Prompt)), Seed: in.Seed, Temperature: in.Temperature,
		MaxTokens: in.NPredict, Logprobs: in.NProbs > 0, Schema: in.Schema}
	reply, fault, ok := s.think(w, r, req, "")
	if !ok {
		return false, nil
	}
	comp := Tokenize(reply.Text)
	out := llamaCompletion{Stop: true, StopType: "eos", TokensEvaluated: len(in.Prompt)}
	if reply.Finish == "" {
		comp = append(comp, ImEnd)
	} else {
		out.StopType = "limit"
	}
	if in.NPredict > 0 && len(comp) > in.NPredict {
		comp, out.StopType = comp[:in.NPredict], "limit"
	}
	out.TokensPredicted = len(comp)
	text := comp
	if n := len(comp); n > 0 && comp[n-1] == ImEnd {
		text = comp[:n-1]
	}
	out.Content = Detokenize(text)
	if fault.Kind != NoTokenIDs {
		out.Tokens = comp
		if in.NProbs > 0 {
			out.Probs = make([]llamaProb, len(comp))
			for i, id := range comp {
				piece := Piece(id)
				if id < FirstByte {
					piece = ""
				}
				out.Probs[i] = llamaProb{ID: id, Token: piece, Logprob: LogProb(id, i)}
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
	return true, nil
}

// created is the fixed creation time of every completion: answers depend
// on requests only.
const created = 1700000000

// The answer shapes. One set of structs covers every kind: each kind fills
// the fields its server writes, and omitempty leaves the others out.
type (
	completion struct {
		ID                string   `json:"id"`
		Object            string   `json:"object"`
		Created           int64    `json:"created"`
		Model             string   `json:"model"`
		Choices           []choice `json:"choices"`
		Usage             usage    `json:"usage"`
		SystemFingerprint string   `json:"system_fingerprint,omitempty"`
		// vLLM: the prompt's token ids, at the top level.
		PromptTokenIDs []int `json:"prompt_token_ids,omitempty"`
		// llama.cpp: timings.
		Timings *timings `json:"timings,omitempty"`
		// SGLang: metadata.
		Metadata map[string]string `json:"metadata,omitempty"`
	}
	choice struct {
		Index        int       `json:"index"`
		Message      message   `json:"message"`
		Logprobs     *logprobs `json:"logprobs"`
		FinishReason string    `json:"finish_reason"`
		// vLLM and SGLang: the completion's token ids.
		TokenIDs []int `json:"token_ids,omitempty"`
		// SGLang: the prompt's token ids, per choice.
		PromptTokenIDs []int `json:"prompt_token_ids,omitempty"`
		// SGLang: the stop token that ended the completion.
		MatchedStop *int `json:"matched_stop,omitempty"`
	}
	message struct {
		Role      string     `json:"role"`
		Content   *string    `json:"content"`
		ToolCalls []toolCall `json:"tool_calls,omitempty"`
	}
	toolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	logprobs struct {
		Content []tokenLogprob `json:"content"`
	}
	tokenLogprob struct {
		ID      *int         `json:"id,omitempty"` // llama.cpp only
		Token   string       `json:"token"`
		Bytes   []int        `json:"bytes"`
		Logprob float64      `json:"logprob"`
		Top     []topLogprob `json:"top_logprobs"`
	}
	topLogprob struct {
		ID      *int    `json:"id,omitempty"`
		Token   string  `json:"token"`
		Bytes   []int   `json:"bytes"`
		Logprob float64 `json:"logprob"`
	}
	usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	timings struct {
		PromptN    int     `json:"prompt_n"`
		PredictedN int     `json:"predicted_n"`
		PromptMS   float64 `json:"prompt_ms"`
	}
)

// answer builds the completion of reply in the server kind's shape. ids
// false leaves out every token id field (the NoTokenIDs fault).
func (s *Server) answer(req *Request, reply Reply, ids bool) *completion {
	kind := s.opts.Kind
	prompt := PromptIDs(req.Messages)
	comp := Tokenize(reply.Text)
	finish := reply.Finish
	if finish == "" {
		comp = append(comp, ImEnd)
		finish = "stop"
		if req.Tool != "" {
			finish = "tool_calls"
		}
	}
	if req.MaxTokens > 0 && len(comp) > req.MaxTokens {
		comp, finish = comp[:req.MaxTokens], "length"
	}
	text := Detokenize(comp)
	if n := len(comp); n > 0 && comp[n-1] == ImEnd {
		text = Detokenize(comp[:n-1])
	}
	msg := message{Role: "assistant"}
	if req.Tool != "" {
		tc := toolCall{ID: "call_0", Type: "function"}
		tc.Function.Name, tc.Function.Arguments = req.Tool, text
		msg.ToolCalls = []toolCall{tc}
	} else {
		msg.Content = &text
	}
	ch := choice{Message: msg, FinishReason: finish}
	if req.Logprobs {
		ch.Logprobs = s.logprobs(req, comp, ids)
	}
	out := &completion{
		ID: "chatcmpl-troupe", Object: "chat.completion", Created: created, Model: req.Model,
		Usage: usage{PromptTokens: len(prompt), CompletionTokens: len(comp), TotalTokens: len(prompt) + len(comp)},
	}
	switch kind {
	case VLLM:
		if ids && req.Flag("return_token_ids") {
			ch.TokenIDs = comp
			out.PromptTokenIDs = prompt
		}
	case SGLang:
		if ids && req.Flag("return_token_ids") {
			ch.TokenIDs = comp
		}
		if ids && req.Flag("return_prompt_token_ids") {
			ch.PromptTokenIDs = prompt
		}
		if finish != "length" {
			stop := ImEnd
			ch.MatchedStop = &stop
		}
		out.Metadata = map[string]string{"weight_version": "default"}
	case LlamaCpp:
		out.SystemFingerprint = "b0-troupe-llmtest"
		out.Timings = &timings{PromptN: len(prompt), PredictedN: len(comp)}
	case OpenAI:
		out.SystemFingerprint = "fp_troupe"
	}
	out.Choices = []choice{ch}
	return out
}

// logprobs returns the per-token log-probs of comp as the server kind
// writes them: vLLM names tokens "token_id:N" under
// return_tokens_as_token_ids, llama.cpp gives each entry its id, and
// top_logprobs holds at most the sampled token itself.
func (s *Server) logprobs(req *Request, comp []int, ids bool) *logprobs {
	top := 0
	if req.TopLogprobs != nil {
		top = *req.TopLogprobs
	} else if s.opts.Kind == LlamaCpp {
		top = 20 // llama.cpp's default n_probs for chat
	}
	asIDs := ids && s.opts.Kind == VLLM && req.Flag("return_tokens_as_token_ids")
	lp := &logprobs{Content: make([]tokenLogprob, len(comp))}
	for i, id := range comp {
		piece := Piece(id)
		if s.opts.Kind == LlamaCpp && id < FirstByte {
			// llama.cpp writes no text for control tokens (the end token
			// among them) in an answer.
			piece = ""
		}
		e := tokenLogprob{Token: piece, Logprob: LogProb(id, i), Top: []topLogprob{}, Bytes: []int{}}
		if asIDs {
			e.Token = "token_id:" + strconv.Itoa(id)
		}
		for _, c := range []byte(piece) {
			e.Bytes = append(e.Bytes, int(c))
		}
		if ids && s.opts.Kind == LlamaCpp {
			e.ID = &comp[i]
		}
		if top > 0 {
			e.Top = append(e.Top, topLogprob{ID: e.ID, Token: e.Token, Bytes: e.Bytes, Logprob: e.Logprob})
		}
		lp.Content[i] = e
	}
	return lp
}

// tokenize answers llama.cpp's POST /tokenize.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.Tokenize++ })
	var req struct {
		Content      *string `json:"content"`
		AddSpecial   bool    `json:"add_special"`
		ParseSpecial *bool   `json:"parse_special"`
		WithPieces   bool    `json:"with_pieces"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Content == nil {
		writeError(w, http.StatusBadRequest, "tokenize needs a content string")
		return
	}
	var ids []int
	if req.ParseSpecial == nil || *req.ParseSpecial {
		ids = Tokenize(*req.Content)
	} else {
		for c := *req.Content; len(c) > 0; {
			n := min(len(c), chunk)
			ids = append(ids, Bytes(c[:n]))
			c = c[n:]
		}
	}
	if ids == nil {
		ids = []int{}
	}
	if !req.WithPieces {
		writeJSON(w, http.StatusOK, map[string][]int{"tokens": ids})
		return
	}
	type piece struct {
		ID    int    `json:"id"`
		Piece string `json:"piece"`
	}
	pieces := make([]piece, len(ids))
	for i, id := range ids {
		pieces[i] = piece{id, Piece(id)}
	}
	writeJSON(w, http.StatusOK, map[string][]piece{"tokens": pieces})
}

// detokenize answers llama.cpp's POST /detokenize: every token's text,
// special tokens included.
func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.Detokenize++ })
	var req struct {
		Tokens []int `json:"tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "detokenize needs a token list")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"content": Detokenize(req.Tokens)})
}

// applyTemplate answers llama.cpp's POST /apply-template: the chat request
// body in, the rendered prompt out.
func (s *Server) applyTemplate(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.ApplyTemplate++ })
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	req, err := parseRequest(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": ApplyTemplate(req.Messages)})
}

func (s *Server) count(f func(*Stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.stats)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError writes an OpenAI-style error body.
func writeError(w http.ResponseWriter, status int, msg string) {
	type apiError struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	}
	typ := "server_error"
	if status < 500 {
		typ = "invalid_request_error"
	}
	b, _ := json.Marshal(map[string]apiError{"error": {Message: msg, Type: typ, Code: status}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// truncate sends the headers of a 200 answer with body's full length, then
// half the body, then drops the connection.
func truncate(w http.ResponseWriter, body []byte) {
	if mw, ok := w.(*memWriter); ok {
		mw.Header().Set("Content-Type", "application/json")
		mw.truncated = len(body)
		_, _ = mw.Write(body[:len(body)/2])
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		writeError(w, http.StatusInternalServerError, "cannot truncate: the connection cannot be hijacked")
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	_, _ = buf.Write(body[:len(body)/2])
	_ = buf.Flush()
}

// Transport returns a RoundTripper that serves requests by calling the
// server's handler in the calling goroutine, with no sockets: a client
// built on it can run inside a testing/synctest bubble. Cancelling a
// request's context ends it as a real transport would.
func (s *Server) Transport() http.RoundTripper { return memTransport{s} }

type memTransport struct{ s *Server }

func (t memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.RequestURI = req.URL.RequestURI()
	r.RemoteAddr = "in-process"
	w := &memWriter{header: http.Header{}}
	t.s.ServeHTTP(w, r)
	if w.code == 0 {
		if err := req.Context().Err(); err != nil {
			return nil, err
		}
		w.code = http.StatusOK
	}
	resp := &http.Response{
		Status:        strconv.Itoa(w.code) + " " + http.StatusText(w.code),
		StatusCode:    w.code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.header,
		ContentLength: int64(w.buf.Len()),
		Request:       req,
	}
	var rd io.Reader = bytes.NewReader(w.buf.Bytes())
	if w.truncated > 0 {
		resp.ContentLength = int64(w.truncated)
		rd = io.MultiReader(rd, errReader{io.ErrUnexpectedEOF})
	}
	resp.Body = io.NopCloser(rd)
	return resp, nil
}

// memWriter is the in-process ResponseWriter.
type memWriter struct {
	header    http.Header
	code      int
	buf       bytes.Buffer
	truncated int // the announced length of a truncated body
}

func (w *memWriter) Header() http.Header { return w.header }

func (w *memWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *memWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.buf.Write(b)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
