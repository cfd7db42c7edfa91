package llmtest

import (
	"net/http"
	"strconv"
)

// FaultKind is a kind of misbehaviour the server can inject.
type FaultKind int

// The faults. Each has a constructor below.
const (
	// None answers normally.
	None FaultKind = iota
	// StatusCode answers with an HTTP error status, a JSON error body
	// (or Fault.Body) and, when set, a Retry-After header.
	StatusCode
	// Hang never answers: the request waits until the client gives up
	// (its deadline or cancellation) or the server closes.
	Hang
	// Malformed answers 200 with a body that is not valid JSON.
	Malformed
	// EmptyChoices answers 200 with a well-formed completion that has no
	// choices.
	EmptyChoices
	// Truncated answers 200 with a Content-Length for the whole completion
	// and then closes the connection half way through the body.
	Truncated
	// Content answers normally, but with Fault.Body as the model's text
	// instead of the brain's: wrong-schema JSON, prose, an illegal move.
	Content
	// NoTokenIDs answers normally but leaves out every token id field, as
	// a server too old to know them would.
	NoTokenIDs
)

var faultNames = [...]string{None: "none", StatusCode: "status", Hang: "hang", Malformed: "malformed", EmptyChoices: "empty_choices", Truncated: "truncated", Content: "content", NoTokenIDs: "no_token_ids"}

func (k FaultKind) String() string {
	if k >= 0 && int(k) < len(faultNames) {
		return faultNames[k]
	}
	return "FaultKind(" + strconv.Itoa(int(k)) + ")"
}

// Fault is one injected misbehaviour.
type Fault struct {
	Kind       FaultKind
	Status     int    // StatusCode: the HTTP status
	RetryAfter string // StatusCode: the Retry-After header; empty for none
	Body       string // StatusCode: the body instead of a JSON error; Content: the model's text
}

// Name describes the fault for statistics: its kind, and its status when
// it has one ("status_503").
func (f Fault) Name() string {
	if f.Kind == StatusCode {
		return "status_" + strconv.Itoa(f.Status)
	}
	return f.Kind.String()
}

// Status returns a fault that answers with the HTTP status code and, when
// retryAfter is not empty, a Retry-After header (seconds, or an HTTP date).
func Status(code int, retryAfter string) Fault {
	return Fault{Kind: StatusCode, Status: code, RetryAfter: retryAfter}
}

// Text returns a fault that answers with text as the model's output.
func Text(text string) Fault { return Fault{Kind: Content, Body: text} }

// Common faults.
var (
	InternalError = Status(http.StatusInternalServerError, "")
	Unavailable   = Status(http.StatusServiceUnavailable, "")
	RateLimited   = Status(http.StatusTooManyRequests, "1")
	HangFault     = Fault{Kind: Hang}
	MalformedJSON = Fault{Kind: Malformed}
	NoChoices     = Fault{Kind: EmptyChoices}
	TruncatedBody = Fault{Kind: Truncated}
	WrongSchema   = Text(`{"move": 42}`)
	MissingIDs    = Fault{Kind: NoTokenIDs}
)

// Call says where a request stands among those the server received.
type Call struct {
	// N is the request's arrival number, from 0, over all chat requests.
	// It depends on timing when requests arrive concurrently.
	N int
	// Repeat counts the earlier arrivals of the same body: 0 the first
	// time a body arrives, 1 when it is sent again (a client retry), and
	// so on. It does not depend on timing, so scripts keyed on it inject
	// the same faults into the same requests at any concurrency.
	Repeat int
}

// Script chooses the fault for each chat request. It is called under the
// server's lock, in arrival order, so it may keep state of its own.
type Script func(r *Request, c Call) Fault

// FailFirst injects f into the first k arrivals of every distinct request
// body: a client that retries k times gets through.
func FailFirst(k int, f Fault) Script {
	return func(_ *Request, c Call) Fault {
		if c.Repeat < k {
			return f
		}
		return Fault{}
	}
}

// FailCalls injects f into the first k chat requests the server receives.
func FailCalls(k int, f Fault) Script {
	return func(_ *Request, c Call) Fault {
		if c.N < k {
			return f
		}
		return Fault{}
	}
}

// Always injects f into every chat request.
func Always(f Fault) Script { return func(*Request, Call) Fault { return f } }

// Sometimes applies s only to requests whose body hashes into one bucket
// of every: about one request body in every, chosen by content, so the same
// requests are picked at any concurrency.
func Sometimes(every int, s Script) Script {
	return func(r *Request, c Call) Fault {
		if every > 0 && hashBody(r.Body)%uint64(every) == 0 {
			return s(r, c)
		}
		return Fault{}
	}
}

// Chain asks each script in turn and injects the first fault one of them
// chooses.
func Chain(scripts ...Script) Script {
	return func(r *Request, c Call) Fault {
		for _, s := range scripts {
			if f := s(r, c); f.Kind != None {
				return f
			}
		}
		return Fault{}
	}
}
