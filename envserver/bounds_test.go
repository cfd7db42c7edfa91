package envserver_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/internal/httpedge"
	"github.com/troupe-rl/troupe/internal/httpedge/edgetest"
	"github.com/troupe-rl/troupe/policies/llm"
)

// An episode of more seats than the server's limit is refused, 400
// too_large, naming the count and the flag, at /reset, /seats and
// /vectors; El Farol's 1,000,000 patrons are refused before they are
// built (it counts its seats: env.SeatCounter), so the refusal costs
// next to nothing; at the limit the episode is served.
func TestSeatLimit(t *testing.T) {
	c, _, _, _ := start(t, envserver.Config{})
	ctx := t.Context()
	refused := func(t *testing.T, err error, seats string) {
		t.Helper()
		var ae *envclient.APIError
		require.True(t, errors.As(err, &ae), "%v", err)
		assert.Equal(t, http.StatusBadRequest, ae.Status)
		assert.Equal(t, envclient.CodeTooLarge, ae.Body.Code)
		assert.Contains(t, ae.Body.Message, seats+" seats")
		assert.Contains(t, ae.Body.Message, "--max-seats")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "elfarol", Params: map[string]string{"agents": "1000000"}})
	runtime.ReadMemStats(&after)
	refused(t, err, "1000000")
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(16<<20), "refused before a million seats are built")
	_, err = c.Seats(ctx, envclient.SeatsRequest{Scenario: "elfarol", Params: map[string]string{"agents": "1000000"}})
	refused(t, err, "1000000")

	small, _, _, _ := start(t, envserver.Config{MaxSeats: 10})
	_, _, err = small.Reset(ctx, envclient.ResetRequest{Scenario: "elfarol", Params: map[string]string{"agents": "11"}})
	refused(t, err, "11")
	_, err = small.Vector(ctx, envclient.VectorRequest{Scenario: "elfarol", Params: map[string]string{"agents": "11"}, NumEnvs: 1})
	refused(t, err, "11")
	_, res, err := small.Reset(ctx, envclient.ResetRequest{Scenario: "elfarol", Params: map[string]string{"agents": "10"}})
	require.NoError(t, err)
	assert.Len(t, res.Observation.Seats, 10)

	// A scenario that does not count its seats ahead is held to the
	// limit once they are built: werewolf's 8 players over a limit of 3.
	tiny, _, _, _ := start(t, envserver.Config{MaxSeats: 3})
	_, _, err = tiny.Reset(ctx, envclient.ResetRequest{Scenario: "werewolf"})
	refused(t, err, "8")

	_, err = envserver.New(envserver.Config{MaxSeats: -1})
	assert.ErrorIs(t, err, envserver.ErrBadConfig)
}

// serving runs s.Serve on a loopback listener until the test ends.
func serving(t *testing.T, cfg envserver.Config) string {
	t.Helper()
	s, err := envserver.New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ln.Addr().String()
}

// A client that announces a 100 kB body and sends one byte is answered
// 408 and its connection closed once the body timeout passes, where the
// server used to hold it as long as the client liked.
func TestSlowBodyIsCutOff(t *testing.T) {
	addr := serving(t, envserver.Config{BodyTimeout: 200 * time.Millisecond})
	answer := edgetest.SlowBody(t, addr, envclient.PathReset)
	assert.True(t, strings.HasPrefix(answer, "HTTP/1.1 408 "), "%q", answer)
	assert.Contains(t, answer, "--body-timeout")
}

// Beyond loopback the server needs a token of 16 bytes or more, or
// InsecureOpen; open without a token, it forwards no harness seat's chat
// calls: a server with a model server for them is refused.
func TestAccessBeyondLoopback(t *testing.T) {
	long := strings.Repeat("t", httpedge.MinTokenBytes)
	model := func(string) (*llm.Client, error) { return nil, errors.New("unused") }
	for _, c := range []struct {
		name string
		cfg  envserver.Config
		err  error
	}{
		{"0.0.0.0 without a token", envserver.Config{Addr: "0.0.0.0:0"}, httpedge.ErrExposed},
		{"a one-byte token", envserver.Config{Token: "t"}, httpedge.ErrShortToken},
		{"a one-byte token, open", envserver.Config{Addr: "0.0.0.0:0", Token: "t", InsecureOpen: true}, httpedge.ErrShortToken},
		{"open, forwarding chat calls", envserver.Config{Addr: "0.0.0.0:0", InsecureOpen: true, HarnessModel: model}, envserver.ErrBadConfig},
		{"0.0.0.0 with a token", envserver.Config{Addr: "0.0.0.0:0", Token: long, HarnessModel: model}, nil},
		{"open, declared", envserver.Config{Addr: "0.0.0.0:0", InsecureOpen: true}, nil},
		{"loopback without a token", envserver.Config{HarnessModel: model}, nil},
	} {
		_, err := envserver.New(c.cfg)
		if c.err == nil {
			assert.NoError(t, err, c.name)
			continue
		}
		assert.ErrorIs(t, err, c.err, c.name)
		assert.ErrorIs(t, err, envserver.ErrBadConfig, c.name)
	}
}
