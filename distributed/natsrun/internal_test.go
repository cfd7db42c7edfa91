package natsrun

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSubjectsAndKeys(t *testing.T) {
	n := newNames("troupe")
	assert.Equal(t, "TROUPE_WORK", n.workStream)
	subject := n.workSubject("run-1", 42, 49)
	run, first, last, ok := n.parseWorkSubject(subject)
	require.True(t, ok)
	assert.Equal(t, "run-1", run)
	assert.Equal(t, int64(42), first)
	assert.Equal(t, int64(49), last)
	for _, bad := range []string{"troupe.work.run-1", "troupe.work.run.x.1", "troupe.work.run.-1.1", "other.work.run.1.1", "troupe.work.a.b.1.1", "troupe.work.run.1", "troupe.work.run.5.4", "troupe.work.run.0.1024"} {
		_, _, _, ok := n.parseWorkSubject(bad)
		assert.False(t, ok, bad)
	}
	assert.Equal(t, "run_run-1", n.consumer("run-1"))
	id, ok := n.runOfConsumer(n.consumer("run-1"))
	assert.True(t, ok)
	assert.Equal(t, "run-1", id)
	r := runRef{id: "run-1", rev: "7"}
	i, ok := r.parseDoneKey(r.doneKey(9))
	require.True(t, ok)
	assert.Equal(t, int64(9), i)
	_, ok = runRef{id: "run-1", rev: "8"}.parseDoneKey(r.doneKey(9))
	assert.False(t, ok, "a marker of another incarnation of the run is not this one's")
	assert.Equal(t, "run-1.7.done.*", r.doneFilter())
}

func TestRetryStopsAtPermanentErrors(t *testing.T) {
	ctx := context.Background()
	calls := 0
	err := retry(ctx, func(context.Context) error {
		calls++
		if calls < 3 {
			return nats.ErrTimeout
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 3, calls, "a timeout is tried again")

	calls = 0
	err = retry(ctx, func(context.Context) error { calls++; return fmt.Errorf("create: %w", jetstream.ErrKeyExists) })
	require.ErrorIs(t, err, jetstream.ErrKeyExists)
	assert.Equal(t, 1, calls, "key exists is an answer, not a failure")

	calls = 0
	err = retry(ctx, func(context.Context) error {
		calls++
		return &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"}
	})
	require.Error(t, err)
	assert.Equal(t, 1, calls, "a bad request stays bad")

	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = retry(cctx, func(context.Context) error {
		return &jetstream.APIError{Code: 503, Description: "JetStream system temporarily unavailable"}
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "temporarily unavailable", "the last error is kept")
	assert.False(t, permanent(errors.New("no responders")))
}

func TestRedactURLs(t *testing.T) {
	assert.Equal(t, "nats://a:REDACTED@h:1,nats://REDACTED@h:2,nats://h:3", redactURLs("nats://a:secret@h:1,nats://tok@h:2,nats://h:3"))
	assert.Equal(t, "REDACTED@h:%zz", redactURLs("user:pw@h:%zz"), "an unparsable URL keeps nothing before its @")
}
