// Package client is the Go client of troupe's HTTP rollout service
// (rollout/server, `troupe serve`): Go programs use it to play episodes on
// a remote service and get their samples back.
//
//	c, err := client.New("http://127.0.0.1:8377", client.WithToken(token))
//	res, err := c.Rollouts(ctx, &rollout.Request{Scenario: "tictactoe", N: 8})
//	for _, r := range res.Rollouts { ... r.Samples ... }
//
// Errors the service answers are *rollout.Error values: test their kind
// with errors.Is(err, rollout.CodeUnknownScenario) and the like. The client
// does not retry; a 503 shutting_down means the service is draining, and
// another replica (or a later attempt) should take the request.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-rl/troupe/rollout"
)

// Client talks to one rollout service. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends token as the bearer token of every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses h instead of the client's own, which keeps up to 256
// idle connections to the service and has no overall timeout (each call's
// context bounds it).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// ErrBadURL is returned by New for a base URL that is not http(s)://host.
var ErrBadURL = errors.New("bad rollout service URL")

// New returns a client of the service at baseURL ("http://127.0.0.1:8377").
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrBadURL, baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w %q: want http://host:port or https://host:port", ErrBadURL, baseURL)
	}
	c := &Client{base: strings.TrimRight(baseURL, "/")}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// The default keeps 2 idle connections per host, which makes a
		// program with hundreds of concurrent rollouts open and close a
		// connection per request.
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 256
		c.http = &http.Client{Transport: t}
	}
	return c, nil
}

// Result is the answer to a rollout request.
type Result struct {
	rollout.Response
	// EpisodeTime is the time the service spent inside the episodes (its
	// Server-Timing header); the rest of a call's latency is the
	// service's and the network's overhead. 0 when the service did not
	// say.
	EpisodeTime time.Duration
	// AllocationSeq is the answer's place in the order in which requests
	// updated the service's stateful allocators (its
	// Troupe-Allocation-Seq header); 0 when the request used none.
	AllocationSeq uint64
}

// Rollouts asks the service for the episodes req describes and returns
// them with their samples.
func (c *Client) Rollouts(ctx context.Context, req *rollout.Request) (*Result, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("rollout request: %w", err)
	}
	res := &Result{}
	h, err := c.do(ctx, http.MethodPost, rollout.PathRollouts, body, &res.Response)
	if err != nil {
		return nil, err
	}
	res.EpisodeTime, _ = rollout.ParseServerTiming(h.Get(rollout.HeaderServerTiming))
	if v := h.Get(rollout.HeaderAllocationSeq); v != "" {
		if res.AllocationSeq, err = strconv.ParseUint(v, 10, 64); err != nil {
			return nil, fmt.Errorf("rollout answer: bad %s header %q", rollout.HeaderAllocationSeq, v)
		}
	}
	return res, nil
}

// Scenarios lists the scenarios the service plays.
func (c *Client) Scenarios(ctx context.Context) (*rollout.ScenarioList, error) {
	var out rollout.ScenarioList
	if _, err := c.do(ctx, http.MethodGet, rollout.PathScenarios, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Allocators lists the reward allocators the service knows.
func (c *Client) Allocators(ctx context.Context) (*rollout.AllocatorList, error) {
	var out rollout.AllocatorList
	if _, err := c.do(ctx, http.MethodGet, rollout.PathAllocators, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Health returns the service's health: rollout.HealthServing, or
// rollout.HealthDraining while it shuts down (answered 503, which is not an
// error here).
func (c *Client) Health(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+rollout.PathHealth, nil)
	if err != nil {
		return "", fmt.Errorf("troupe service: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("troupe service: %w", err)
	}
	defer drain(resp.Body)
	var h rollout.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || h.Status == "" {
		return "", fmt.Errorf("troupe service: GET %s answered %s without a health status", rollout.PathHealth, resp.Status)
	}
	return h.Status, nil
}

// do sends one request and decodes a 200 answer into out, or the error
// body into a *rollout.Error.
func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) (http.Header, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, fmt.Errorf("troupe service: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("troupe service: %s %s: %w", method, path, err)
	}
	defer drain(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, decodeError(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return nil, fmt.Errorf("troupe service: %s %s: decoding the answer: %w", method, path, err)
	}
	return resp.Header, nil
}

// decodeError turns an error answer into a *rollout.Error; an answer
// without the JSON error body (a proxy's page, say) keeps its status and
// the start of its text.
func decodeError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body rollout.ErrorBody
	if err := json.Unmarshal(raw, &body); err == nil && body.Error != nil && body.Error.Code != "" {
		body.Error.Status = resp.StatusCode
		return body.Error
	}
	text := strings.TrimSpace(string(raw))
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	return &rollout.Error{Status: resp.StatusCode, Code: rollout.CodeInternal, Message: fmt.Sprintf("%s: %s", resp.Status, text)}
}

// drain reads what is left of a body so the connection can be reused.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	_ = body.Close()
}
