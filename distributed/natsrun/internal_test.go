package natsrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
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

// TestRunRecordsAreReadStrictly: a run record of another version is
// refused naming the versions, and one with a field this version does not
// know is refused naming the field, rather than played without it.
func TestRunRecordsAreReadStrictly(t *testing.T) {
	good := storedRun{Run: record{Protocol: ProtocolVersion, Wire: ours.wire, Troupe: ours.troupe, Scenario: "count", Episodes: 2, GroupSize: 1}}
	st, err := decodeStoredRun(good.encode(), ours)
	require.NoError(t, err)
	assert.Equal(t, "count", st.Run.Scenario)

	older := ours
	older.protocol--
	_, err = decodeStoredRun(good.encode(), older)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.Contains(t, err.Error(), fmt.Sprintf("this process speaks protocol %d", ProtocolVersion-1))

	extra := strings.Replace(string(good.encode()), `"scenario":"count"`, `"scenario":"count","judge":"gpt"`, 1)
	_, err = decodeStoredRun([]byte(extra), ours)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.Contains(t, err.Error(), `unknown field "judge"`)

	_, err = decodeRequests([]byte(`[{"scenario":"count","index":3,"colour":"red"}]`), 3, 3)
	assert.ErrorContains(t, err, `unknown field "colour"`)
	_, err = decodeRequests([]byte(`[{"scenario":"count","index":3},{"scenario":"count","index":3}]`), 3, 4)
	assert.ErrorContains(t, err, "not one of 3 to 4 once")
}

// FuzzDecoders feeds the decoders of what other processes store (run
// records, done markers, work messages) arbitrary bytes: they return an
// error or a value, never panic.
func FuzzDecoders(f *testing.F) {
	good := storedRun{Run: record{Protocol: ProtocolVersion, Wire: ours.wire, Troupe: ours.troupe, Scenario: "count"}}
	f.Add(good.encode())
	f.Add(appendMarker(nil, &doneRecord{Attempt: "a", Inline: true, Codec: codecS2}, []byte("xyz")))
	f.Add([]byte(`[{"scenario":"count","index":0}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = decodeStoredRun(data, ours)
		rec, inline, err := parseMarker(data)
		if err == nil && rec.Inline && len(data) < 1<<16 {
			c := &Client{}
			_, _ = c.fetch(context.Background(), rec, inline)
		}
		_, _ = decodeRequests(data, 0, 10)
	})
}

// TestBatchIsChosenPerRun: Config.Batch 0 gives LLM runs one episode per
// work message and scripted ones AutoBatch; a set batch is kept.
func TestBatchIsChosenPerRun(t *testing.T) {
	llm := Spec{LLMEndpoint: "http://127.0.0.1:8080/v1"}
	for _, c := range []struct {
		batch int
		spec  Spec
		want  int
	}{{0, Spec{}, AutoBatch}, {0, llm, 1}, {3, Spec{}, 3}, {3, llm, 3}} {
		if got := (Config{Batch: c.batch}).batchFor(c.spec); got != c.want {
			t.Errorf("batch %d, endpoint %q: %d, want %d", c.batch, c.spec.LLMEndpoint, got, c.want)
		}
	}
}

// TestCASConflict: a conditional KV write that lost is recognised however
// the server words it. A replicated bucket answers a write to a key with
// another write in flight with error 10164, which nats.go's Update and
// conditional Delete report as ErrKeyRevisionMismatch only (a lone
// server's 10071 is ErrKeyExists as well); lease renewal took the former
// for a failure that was no conflict (the cluster-split partition
// schedule).
func TestCASConflict(t *testing.T) {
	wrongLast := func(code jetstream.ErrorCode) error {
		// As nats.go's Update wraps the server's answer.
		return fmt.Errorf("%w: %w", &jetstream.APIError{Code: 400, ErrorCode: code, Description: "wrong last sequence"}, jetstream.ErrKeyRevisionMismatch)
	}
	assert.True(t, casConflict(wrongLast(jetstream.JSErrCodeStreamWrongLastSequence)))
	assert.True(t, casConflict(wrongLast(jetstream.JSErrCodeStreamWrongLastSequenceConstant)))
	assert.True(t, casConflict(fmt.Errorf("creating: %w", jetstream.ErrKeyExists)))
	assert.False(t, casConflict(jetstream.ErrKeyNotFound))
	assert.False(t, casConflict(&jetstream.APIError{Code: 503, ErrorCode: 10008}))
	assert.False(t, casConflict(context.DeadlineExceeded))
}
