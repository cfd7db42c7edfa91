package llm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"golang.org/x/sync/semaphore"

	"github.com/troupe-rl/troupe/internal/seeds"
)

// Errors a Client's calls wrap, for errors.Is.
var (
	// ErrGaveUp: every attempt failed with a retryable error.
	ErrGaveUp = errors.New("gave up")
	// ErrRejected: the server refused the request with a status that
	// retrying cannot fix (400, 401, 404, ...), or it failed before it
	// was sent.
	ErrRejected = errors.New("rejected")
	// ErrRetryAfter: the server asked to retry later than
	// Config.MaxRetryWait allows.
	ErrRetryAfter = errors.New("retry-after too long")
	// ErrMalformed: a 2xx answer that is not a well-formed completion.
	ErrMalformed = errors.New("malformed answer")
	// ErrEmptyChoices: a well-formed completion with no choices.
	ErrEmptyChoices = errors.New("answer has no choices")
)

// CallError is the error of a call that failed: its last attempt's error,
// with how many attempts were made and the last HTTP status. It wraps one
// of ErrGaveUp, ErrRejected, ErrRetryAfter or the context's error, and the
// last attempt's error.
type CallError struct {
	Op       string // the request, e.g. "POST http://127.0.0.1:8000/v1/chat/completions"
	Attempts int
	Status   int   // the last HTTP status; 0 when no answer came
	Err      error // the last attempt's error
	reason   error
}

func (e *CallError) Error() string {
	var b strings.Builder
	b.WriteString("llm: ")
	b.WriteString(e.Op)
	switch e.reason {
	case ErrGaveUp:
		fmt.Fprintf(&b, ": gave up after %d attempts", e.Attempts)
	case ErrRejected:
		fmt.Fprintf(&b, ": rejected at attempt %d, not retried", e.Attempts)
	default: // ErrRetryAfter, or the context's error
		fmt.Fprintf(&b, ": stopped after %d attempts: %v", e.Attempts, e.reason)
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, ": last status %d %s", e.Status, http.StatusText(e.Status))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the failure's kind and the last attempt's error.
func (e *CallError) Unwrap() []error { return []error{e.reason, e.Err} }

// Client is a connection to one OpenAI-compatible server, built on
// go-openai: a pooled HTTP transport sized for MaxInFlight, a fair bound on
// the requests in flight (golang.org/x/sync/semaphore, which serves its
// waiters in arrival order and gives up on a cancelled context), retries
// with backoff, and the body editing and raw-answer capture that token ids
// need. It is safe for concurrent use; every policy and episode that
// shares a Client shares its bound.
type Client struct {
	cfg     Config
	oa      *openai.Client
	hc      *http.Client
	sem     *semaphore.Weighted
	chatURL string
	root    string // the server's root URL: BaseURL without its /v1
	// renders are the token path's renderings kept for the next turn
	// (tokencache.go); llama.cpp only.
	renders *renderings

	calls, attempts, retries, failures atomic.Int64
	inFlight, maxInFlight              atomic.Int64
}

// ClientOption customises a Client.
type ClientOption func(*Client)

// WithRoundTripper makes the client send its requests through rt instead
// of its own pooled transport: an in-process test server
// (llmtest.Server.Transport), or a transport of the caller's.
func WithRoundTripper(rt http.RoundTripper) ClientOption {
	return func(c *Client) { c.hc = &http.Client{Transport: rt} }
}

// NewClient validates cfg and returns a client for its endpoint. Close it
// when done to release idle connections.
func NewClient(cfg Config, opts ...ClientOption) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, sem: semaphore.NewWeighted(int64(cfg.MaxInFlight))}
	if cfg.Kind == KindLlamaCpp {
		c.renders = newRenderings(renderingsPerSlot * cfg.MaxInFlight)
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: newTransport(cfg.MaxInFlight)}
	}
	if cfg.RoutingHeader != "" {
		// Every request the client sends, whichever endpoint, carries the
		// key of the agent it is made for.
		c.hc = &http.Client{Transport: routing{rt: c.hc.Transport, header: http.CanonicalHeaderKey(cfg.RoutingHeader)}}
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	c.chatURL = base + "/chat/completions"
	c.root = strings.TrimSuffix(base, "/v1")
	oc := openai.DefaultConfig(cfg.APIKey)
	oc.BaseURL = base
	oc.HTTPClient = doer{c.hc}
	c.oa = openai.NewClientWithConfig(oc)
	return c, nil
}

// newTransport returns an HTTP transport for n concurrent requests to one
// host: the default transport keeps only 2 idle connections per host, so
// hundreds of episodes would open and close a connection per call. Timeouts
// are left to each call's context.
func newTransport(n int) *http.Transport {
	idle := n + 16 // llama.cpp's tokenize calls borrow connections too
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          idle,
		MaxIdleConnsPerHost:   idle,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Config returns the client's configuration.
func (c *Client) Config() Config { return c.cfg }

// Close closes the client's idle connections. Calls still in flight
// finish; the client stays usable.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// ClientStats counts a client's work.
type ClientStats struct {
	Calls       int64 // calls made (a call is all the attempts of one request)
	Attempts    int64 // HTTP attempts
	Retries     int64 // attempts after a retryable failure
	Failures    int64 // calls that failed
	InFlight    int64 // HTTP requests in flight now
	MaxInFlight int64 // most HTTP requests in flight at once
}

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats {
	return ClientStats{
		Calls: c.calls.Load(), Attempts: c.attempts.Load(), Retries: c.retries.Load(), Failures: c.failures.Load(),
		InFlight: c.inFlight.Load(), MaxInFlight: c.maxInFlight.Load(),
	}
}

// callState is one HTTP attempt's view of the wire, shared between the
// caller and the doer through the request's context: what was sent, and
// the raw answer that go-openai's typed structs only partly decode.
type callState struct {
	suffix  []byte // body fields to add to the request ("k":v,...)
	scan    bool   // a chat answer: read its token fields
	tokens  answerTokens
	sent    []byte // the body as sent
	reached bool   // the request got as far as the transport
	status  int
	header  http.Header
	raw     []byte // the body of a 2xx answer
}

type stateKey struct{}

// maxAnswerBytes bounds the answer bodies a client reads.
const maxAnswerBytes = 64 << 20

// doer is the HTTPDoer go-openai sends through. It adds troupe's body
// fields to the JSON request, which go-openai cannot express (temperature
// 0 vanishes under omitempty; vendor fields have no struct field), and it
// keeps the raw answer, whose token id fields go-openai drops.
type doer struct{ hc *http.Client }

func (d doer) Do(req *http.Request) (*http.Response, error) {
	st, _ := req.Context().Value(stateKey{}).(*callState)
	if st == nil {
		return d.hc.Do(req)
	}
	st.reached = true
	var body []byte
	if req.Body != nil {
		b, err := readBody(req.Body, req.ContentLength, len(st.suffix)+1)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		body = b
	}
	if len(st.suffix) > 0 {
		b, err := splice(body, st.suffix)
		if err != nil {
			st.reached = false // troupe's own bug: retrying cannot help
			return nil, err
		}
		body = b
	}
	st.sent = body
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.ContentLength = int64(len(body))
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, err
	}
	st.status, st.header = resp.StatusCode, resp.Header
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, nil // go-openai reads the error body
	}
	raw, err := readBody(resp.Body, resp.ContentLength, 0)
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read answer body: %w", err)
	}
	st.raw = raw
	if st.scan {
		st.tokens = scanAnswer(raw)
		st.tokens.blank(raw)
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	return resp, nil
}

// readBody reads a body of at most maxAnswerBytes, into one allocation
// when its length is known, with room for spare more bytes.
func readBody(r io.Reader, length int64, spare int) ([]byte, error) {
	if length > maxAnswerBytes {
		return nil, fmt.Errorf("%w: body of %d bytes, more than %d", ErrMalformed, length, maxAnswerBytes)
	}
	if length < 0 {
		b, err := io.ReadAll(io.LimitReader(r, maxAnswerBytes+1))
		if err == nil && len(b) > maxAnswerBytes {
			err = fmt.Errorf("%w: body larger than %d bytes", ErrMalformed, maxAnswerBytes)
		}
		return b, err
	}
	b := make([]byte, length, int(length)+spare)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// splice adds fields (`"k":v,...`, pre-encoded) to the JSON object body,
// after its last field, in place when body has the capacity. The caller
// guarantees that the names are not already in the body: troupe never sets
// them in go-openai's request.
func splice(body, fields []byte) ([]byte, error) {
	b := bytes.TrimRight(body, " \t\r\n")
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("%w: request body is not a JSON object", ErrRejected)
	}
	empty := len(bytes.TrimSpace(b[1:len(b)-1])) == 0
	out := b[:len(b)-1]
	if !empty {
		out = append(out, ',')
	}
	out = append(out, fields...)
	return append(out, '}'), nil
}

// statusError is a non-2xx answer to one of troupe's own requests (the
// llama.cpp endpoints; go-openai reports chat errors itself).
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("status %d: %s", e.code, strings.TrimSpace(e.body))
}

// retryable reports whether an HTTP status is worth retrying: request
// timeouts, rate limits and server errors.
func retryable(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
}

// classify returns the HTTP status behind err (0 when none) and whether
// another attempt could succeed.
func classify(err error, st *callState) (status int, again bool) {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	var se *statusError
	switch {
	case errors.As(err, &apiErr):
		status = apiErr.HTTPStatusCode
	case errors.As(err, &reqErr):
		status = reqErr.HTTPStatusCode
	case errors.As(err, &se):
		status = se.code
	}
	if status != 0 {
		return status, retryable(status)
	}
	// No status: a timeout, a broken connection, a malformed answer...
	// worth another try, unless the request never left (a bad request of
	// troupe's own making).
	return st.status, st.reached
}

// do runs one call: attempts of send, each under Timeout and holding one
// of the client's in-flight slots, with backoff between them. jitter seeds
// the backoff's randomness. chat is set for chat completions: the doer then
// adds its body fields and scans the answer's token fields.
func (c *Client) do(ctx context.Context, op string, jitter uint64, chat *chatRequest, send func(ctx context.Context, st *callState) error) (retries int, err error) {
	c.calls.Add(1)
	for attempt := 0; ; attempt++ {
		st := &callState{}
		if chat != nil {
			st.suffix, st.scan = chat.fields, true
		}
		err := c.attempt(ctx, st, send)
		if err == nil {
			return attempt, nil
		}
		fail := func(reason error) (int, error) {
			c.failures.Add(1)
			n := attempt + 1
			if !st.reached && reason == ctx.Err() {
				n = attempt // cancelled while queued for a slot
			}
			return attempt, &CallError{Op: op, Attempts: n, Status: st.status, Err: err, reason: reason}
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		status, again := classify(err, st)
		st.status = status
		switch {
		case !again:
			return fail(ErrRejected)
		case attempt >= c.cfg.Retries:
			return fail(ErrGaveUp)
		}
		wait := c.backoff(attempt, seeds.Mix(jitter, uint64(attempt)))
		if ra, ok := retryAfter(st.header, time.Now()); ok {
			if ra > c.cfg.MaxRetryWait {
				err = fmt.Errorf("the server asked to retry after %v, more than the %v allowed: %w", ra, c.cfg.MaxRetryWait, err)
				return fail(ErrRetryAfter)
			}
			// Honour the server's wait, plus a little jitter so that the
			// clients it told the same thing do not return all at once.
			wait = ra + time.Duration(seeds.Float64(seeds.Mix(jitter, uint64(attempt), 1))*float64(c.cfg.BackoffBase))
		}
		c.retries.Add(1)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fail(ctx.Err())
		}
	}
}

// attempt makes one HTTP attempt under Timeout, holding an in-flight slot.
func (c *Client) attempt(ctx context.Context, st *callState, send func(ctx context.Context, st *callState) error) error {
	if err := c.sem.Acquire(ctx, 1); err != nil {
		return err
	}
	defer c.sem.Release(1)
	storeMax(&c.maxInFlight, c.inFlight.Add(1))
	defer c.inFlight.Add(-1)
	c.attempts.Add(1)
	actx, cancel := context.WithTimeout(context.WithValue(ctx, stateKey{}, st), c.cfg.Timeout)
	defer cancel()
	err := send(actx, st)
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("attempt timed out after %v: %w", c.cfg.Timeout, err)
	}
	return err
}

// storeMax raises v to n if n is larger.
func storeMax(v *atomic.Int64, n int64) {
	for m := v.Load(); n > m; m = v.Load() {
		if v.CompareAndSwap(m, n) {
			return
		}
	}
}

// backoff returns the wait before retry attempt+1: full jitter, uniform in
// [0, min(BackoffMax, BackoffBase·2^attempt)), drawn from seed.
func (c *Client) backoff(attempt int, seed uint64) time.Duration {
	ceil := c.cfg.BackoffMax
	if attempt < 32 {
		if d := c.cfg.BackoffBase << attempt; d > 0 && d < ceil {
			ceil = d
		}
	}
	return time.Duration(seeds.Float64(seed) * float64(ceil))
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		if secs > int64(time.Duration(1<<62)/time.Second) {
			return time.Duration(1 << 62), true
		}
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// postJSON posts body to url and returns the 2xx answer's body.
func (c *Client) postJSON(ctx context.Context, st *callState, url string, body []byte) ([]byte, error) {
	st.reached = true
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		st.reached = false
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	st.status, st.header = resp.StatusCode, resp.Header
	b, err := readBody(resp.Body, resp.ContentLength, 0)
	if err != nil {
		return nil, fmt.Errorf("read answer body: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &statusError{code: resp.StatusCode, body: string(b)}
	}
	return b, nil
}

// routingKeyOf is the context key of a call's routing key.
type routingKeyOf struct{}

// withRoutingKey returns ctx carrying the routing key of an agent's
// session (agents.Observation.Session), which the client's requests made
// under it send in Config.RoutingHeader.
func withRoutingKey(ctx context.Context, session uint64) context.Context {
	return context.WithValue(ctx, routingKeyOf{}, session)
}

// routing is the transport that writes a request's routing key, from its
// context, into the routing header.
type routing struct {
	rt     http.RoundTripper // nil: http.DefaultTransport
	header string            // canonical
}

func (r routing) RoundTrip(req *http.Request) (*http.Response, error) {
	rt := r.rt
	if rt == nil {
		rt = http.DefaultTransport
	}
	if session, ok := req.Context().Value(routingKeyOf{}).(uint64); ok {
		// A RoundTripper must not change the request it is given: a
		// shallow copy with its own header map (req.Clone would copy the
		// URL and the rest too, for nothing).
		r2 := *req
		r2.Header = make(http.Header, len(req.Header)+1)
		maps.Copy(r2.Header, req.Header)
		r2.Header[r.header] = []string{routingKey(session)}
		req = &r2
	}
	return rt.RoundTrip(req)
}

// CloseIdleConnections closes the wrapped transport's idle connections.
func (r routing) CloseIdleConnections() {
	if c, ok := r.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// routingKey is the header value of a session: 16 hex digits.
func routingKey(session uint64) string {
	const hex = "0123456789abcdef"
	var b [16]byte
	for i := range b {
		b[15-i] = hex[session>>(4*i)&0xf]
	}
	return string(b[:])
}
