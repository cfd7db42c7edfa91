//go:build unix

package cli

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNotifyContextCancelsWithTheSignal(t *testing.T) {
	ctx, stop := NotifyContext(t.Context())
	defer stop()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute): // a guard against hanging, not a timing assertion
		t.Fatal("the signal did not cancel the context")
	}
	se, ok := context.Cause(ctx).(*SignalError)
	require.True(t, ok, "cause %v", context.Cause(ctx))
	assert.Equal(t, syscall.SIGTERM, se.Signal)
}
