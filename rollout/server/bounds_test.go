package server_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/httpedge"
	"github.com/troupe-rl/troupe/internal/httpedge/edgetest"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
)

// A client that announces a 100 kB body and sends one byte is answered
// 408 and its connection closed once ReadTimeout passes.
func TestSlowBodyIsCutOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := newServer(t, server.Config{ReadTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	answer := edgetest.SlowBody(t, ln.Addr().String(), rollout.PathRollouts)
	assert.True(t, strings.HasPrefix(answer, "HTTP/1.1 408 "), "%q", answer)
}

// A token shorter than 16 bytes is refused; so is an address beyond
// loopback without a token, unless InsecureOpen.
func TestAccessBeyondLoopback(t *testing.T) {
	_, err := server.New(server.Config{Token: "x"})
	assert.ErrorIs(t, err, httpedge.ErrShortToken)
	assert.ErrorIs(t, err, server.ErrBadConfig)
	_, err = server.New(server.Config{Addr: "0.0.0.0:8377"})
	assert.ErrorIs(t, err, httpedge.ErrExposed)
	_, err = server.New(server.Config{Addr: "0.0.0.0:8377", InsecureOpen: true})
	assert.NoError(t, err)
	_, err = server.New(server.Config{Addr: "0.0.0.0:8377", Token: strings.Repeat("k", httpedge.MinTokenBytes)})
	assert.NoError(t, err)
}
