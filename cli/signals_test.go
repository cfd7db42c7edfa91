package cli

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIsTerminal(t *testing.T) {
	f, err := os.Create(t.TempDir() + "/not-a-terminal")
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, isTerminal(f))
	assert.False(t, isTerminal(&strings.Builder{}))
}

func TestSignalErrorExitCodes(t *testing.T) {
	assert.Equal(t, 130, (&SignalError{Signal: syscall.SIGINT}).ExitCode())
	assert.Equal(t, 143, (&SignalError{Signal: syscall.SIGTERM}).ExitCode())
	assert.Equal(t, "interrupt signal received", (&SignalError{Signal: os.Interrupt}).Error())
}

func TestNotifyContextStop(t *testing.T) {
	ctx, stop := NotifyContext(t.Context())
	stop()
	stop()
	<-ctx.Done()
	assert.ErrorIs(t, context.Cause(ctx), context.Canceled)
}
