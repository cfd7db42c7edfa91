package envclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// ErrServer is wrapped by the errors the server answered: errors.As gives
// the *APIError with its code.
var ErrServer = errors.New("environment server error")

// APIError is an error answer of the server.
type APIError struct {
	Status int   // the HTTP status
	Body   Error // its code and message
}

// Error implements error.
func (e *APIError) Error() string {
	return fmt.Sprintf("environment server: %d %s: %s", e.Status, e.Body.Code, e.Body.Message)
}

// Unwrap returns ErrServer.
func (e *APIError) Unwrap() error { return ErrServer }

// Code is the error's code (CodeIllegal, ...).
func (e *APIError) Code() string { return e.Body.Code }

// Client talks to an environment server over HTTP. It is safe for
// concurrent use; each Session is one player.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client of the server at base ("http://127.0.0.1:8378"),
// sending token as a bearer token when it is not empty. hc nil is
// http.DefaultClient.
func New(base, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(base, "/"), token: token, http: hc}
}

// do sends a request and decodes its JSON answer into out.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ctype := "application/json"
	if frame, ok := in.(binaryBody); ok {
		body, ctype = bytes.NewReader(frame), ContentBinary
	} else if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", ctype)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var eb ErrorBody
		if json.Unmarshal(data, &eb) == nil && eb.Error != nil {
			return &APIError{Status: resp.StatusCode, Body: *eb.Error}
		}
		return &APIError{Status: resp.StatusCode, Body: Error{Code: CodeInternal, Message: strings.TrimSpace(string(data))}}
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return nil
	}
	return json.Unmarshal(data, out)
}

// Health reports the server's health ("healthy").
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.do(ctx, http.MethodGet, PathHealth, nil, &h)
}

// Reset starts a session: a new episode, or a seat at one (req.Join). It
// answers once one of the session's seats must act, or the episode is
// over (or the server's wait ran out: Pending empty, Done false).
func (c *Client) Reset(ctx context.Context, req ResetRequest) (*Session, Result, error) {
	var res Result
	if err := c.do(ctx, http.MethodPost, PathReset, req, &res); err != nil {
		return nil, res, err
	}
	return &Session{c: c, ID: res.Observation.SessionID, EpisodeID: res.Observation.EpisodeID}, res, nil
}

// Seats returns the seats of a scenario under parameters and their action
// sets, without playing an episode.
func (c *Client) Seats(ctx context.Context, req SeatsRequest) (SeatsAnswer, error) {
	var a SeatsAnswer
	return a, c.do(ctx, http.MethodPost, PathSeats, req, &a)
}

// Record returns the record of an episode that is over, as an episode file
// holds it (one troupe.episode/v2 line).
func (c *Client) Record(ctx context.Context, episodeID string) ([]byte, error) {
	var b []byte
	return b, c.do(ctx, http.MethodGet, PathRecord+"?episode_id="+url.QueryEscape(episodeID), nil, &b)
}

// Session is one session of a server.
type Session struct {
	c         *Client
	ID        string
	EpisodeID string
}

// Step gives one move of the session's one pending seat (or of seat, when
// not empty) and waits for its next turn.
func (s *Session) Step(ctx context.Context, seat, move string) (Result, error) {
	return s.StepAction(ctx, Action{Seat: seat, Move: &move})
}

// StepAll gives the moves of several seats at once, by agent id.
func (s *Session) StepAll(ctx context.Context, moves map[string]string) (Result, error) {
	return s.StepAction(ctx, Action{Moves: moves})
}

// Wait gives no move and waits for the session's turn.
func (s *Session) Wait(ctx context.Context) (Result, error) { return s.StepAction(ctx, Action{}) }

// StepAction sends a step with action a.
func (s *Session) StepAction(ctx context.Context, a Action) (Result, error) {
	var res Result
	return res, s.c.do(ctx, http.MethodPost, PathStep, StepRequest{SessionID: s.ID, Action: a}, &res)
}

// State returns the episode's state as the session sees it.
func (s *Session) State(ctx context.Context) (State, error) {
	var st State
	return st, s.c.do(ctx, http.MethodGet, PathState+"?session_id="+url.QueryEscape(s.ID), nil, &st)
}

// Close ends the session: its seats fall back (to the house policy, or a
// forfeit).
func (s *Session) Close(ctx context.Context) error {
	var st State
	return s.c.do(ctx, http.MethodPost, PathClose, SessionRequest{SessionID: s.ID}, &st)
}

// binaryBody is a request body sent as it is (a frame).
type binaryBody []byte

// Vector is a vector environment of a server (docs/vector.md).
type Vector struct {
	c *Client
	VectorAnswer
	frame []byte
}

// Vector creates a vector environment; its Reset starts its episodes.
func (c *Client) Vector(ctx context.Context, req VectorRequest) (*Vector, error) {
	v := &Vector{c: c}
	if err := c.do(ctx, http.MethodPost, PathVectors, req, &v.VectorAnswer); err != nil {
		return nil, err
	}
	return v, nil
}

// Reset stops the vector's episodes and starts new ones, the first of
// run seed seed when it is not nil, and answers their first batch.
func (v *Vector) Reset(ctx context.Context, seed *uint64) (*Batch, error) {
	var data []byte
	if err := v.c.do(ctx, http.MethodPost, v.path("reset"), VectorReset{Seed: seed}, &data); err != nil {
		return nil, err
	}
	return DecodeBatch(data)
}

// Step gives the actions, [env][agent] row-major (NoAction, or anything,
// for the agents that do not act), and answers the next batch.
func (v *Vector) Step(ctx context.Context, actions []int32) (*Batch, error) {
	v.frame = AppendActions(v.frame[:0], Actions{NumEnvs: v.NumEnvs, NumAgents: len(v.Agents), Actions: actions})
	var data []byte
	if err := v.c.do(ctx, http.MethodPost, v.path("step"), binaryBody(v.frame), &data); err != nil {
		return nil, err
	}
	return DecodeBatch(data)
}

// Close ends the vector: its episodes in play end aborted.
func (v *Vector) Close(ctx context.Context) error {
	var out map[string]string
	return v.c.do(ctx, http.MethodPost, v.path("close"), struct{}{}, &out)
}

func (v *Vector) path(op string) string { return PathVector + url.PathEscape(v.VectorID) + "/" + op }
