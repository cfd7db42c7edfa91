package natsrun

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSetupUpdatesOnlyWhatChanged: a client that connects to streams and
// buckets already set up as it would set them up updates none of them
// (every update the server announces is counted), and one whose
// configuration differs updates them to it. An update at every connect
// would meet the consumers that runs create meanwhile: a data race inside
// nats-server (see ensureStream).
func TestSetupUpdatesOnlyWhatChanged(t *testing.T) {
	e, err := StartEmbedded(EmbeddedOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	defer e.Close()
	nc, err := e.Connect()
	require.NoError(t, err)
	defer nc.Close()
	ctx := context.Background()
	// A stream of the test's own, updated after the connects: the server
	// announces updates in order, so once its advisory arrives, any update
	// the connects made has been counted before it.
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	markerCfg := jetstream.StreamConfig{Name: "marker", Subjects: []string{"marker"}}
	_, err = js.CreateStream(ctx, markerCfg)
	require.NoError(t, err)
	var updates atomic.Int32
	marked := make(chan struct{})
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.UPDATED.>", func(m *nats.Msg) {
		if m.Subject == "$JS.EVENT.ADVISORY.STREAM.UPDATED.marker" {
			close(marked)
			return
		}
		updates.Add(1)
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.Flush())

	open := func(maxAge time.Duration) *Client {
		t.Helper()
		c, err := Open(ctx, nc, Config{Prefix: "setup", ResultsMaxAge: maxAge})
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
		return c
	}
	open(time.Hour)
	open(time.Hour)
	open(time.Hour)
	markerCfg.MaxMsgs = 10
	_, err = js.UpdateStream(ctx, markerCfg)
	require.NoError(t, err)
	select {
	case <-marked:
	case <-time.After(time.Minute):
		t.Fatal("the marker stream's update was never announced")
	}
	assert.Zero(t, updates.Load(), "connecting again updates nothing")

	c := open(2 * time.Hour)
	info, err := c.results.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Hour, info.Config.MaxAge)
	status, err := c.runs.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Hour, status.TTL())
	assert.Eventually(t, func() bool { return updates.Load() >= 3 }, 2*time.Second, 10*time.Millisecond,
		"the work and results streams and the runs bucket are updated to the new age")
}
