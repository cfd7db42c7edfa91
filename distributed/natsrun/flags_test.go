package natsrun_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/distributed/natsrun/internal/testscen"
	"github.com/troupe-rl/troupe/trajectories"
)

func TestFlagsParse(t *testing.T) {
	f := natsrun.DefaultFlags()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	f.BindRun(fs)
	require.NoError(t, fs.Parse([]string{
		"--nats", "nats://a:4222,nats://b:4222", "--nats-creds", "w.creds", "--nats-replicas", "3",
		"--nats-ack-wait", "1m", "--nats-max-ack-pending", "4096", "--run-id", "r1", "--nats-keep",
	}))
	f.ApplyEnv(func(k string) (string, bool) {
		return map[string]string{natsrun.EnvPassword: "pw", natsrun.EnvToken: "tok"}[k], k == natsrun.EnvPassword || k == natsrun.EnvToken
	})
	assert.Equal(t, "nats://a:4222,nats://b:4222", f.Conn.URL)
	assert.Equal(t, "w.creds", f.Conn.CredsFile)
	assert.Equal(t, "pw", f.Conn.Password)
	assert.Equal(t, "tok", f.Conn.Token)
	assert.Equal(t, 3, f.Config.Replicas)
	assert.Equal(t, time.Minute, f.Config.AckWait)
	assert.Equal(t, 4096, f.Config.MaxAckPending)
	assert.True(t, f.Config.KeepResults)
	assert.Equal(t, "r1", f.RunID)
	assert.False(t, f.Embedded())

	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	assert.Contains(t, help.String(), "--nats-tls-ca")
	for _, secret := range []string{"nats-password", "nats-token", "nats-pass"} {
		assert.Nil(t, fs.Lookup(secret), "a secret must not have a flag: command lines are public")
	}

	w := natsrun.DefaultFlags()
	wfs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	w.BindWorker(wfs)
	require.NoError(t, wfs.Parse([]string{"--nats", "embedded", "--drain", "5s"}))
	assert.Equal(t, 5*time.Second, w.Drain)
	err := w.RunWorker(context.Background(), testscen.Registry(testscen.Options{}), nil, nil, 1, nil)
	require.ErrorIs(t, err, natsrun.ErrBadConfig)
	w.Conn.URL = ""
	require.ErrorIs(t, w.RunWorker(context.Background(), testscen.Registry(testscen.Options{}), nil, nil, 1, nil), natsrun.ErrNoURL)
}

// TestFlagsEmbeddedRunAndWorker wires troupe run --nats embedded
// --nats-listen and a troupe worker to it, as the command line does.
func TestFlagsEmbeddedRunAndWorker(t *testing.T) {
	reg := testscen.Registry(testscen.Options{})
	f := natsrun.DefaultFlags()
	f.Conn.URL, f.Dir, f.Listen = natsrun.EmbeddedURL, t.TempDir(), "127.0.0.1:0"
	ctx := context.Background()
	d, err := f.OpenRun(ctx, reg, nil, 1, nil)
	require.NoError(t, err)
	defer d.Close()

	// A second process's worker joins over TCP; here, in this process.
	url := embeddedURL(t, d)
	wf := natsrun.DefaultFlags()
	wf.Conn.URL = url
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wf.RunWorker(wctx, reg, nil, nil, 2, nil) }()

	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "random", Episodes: 12, Seed: 3})
	want := local(t, rc, trajectories.Flat)
	id, err := natsrun.RunID(rc.Config, spec)
	require.NoError(t, err)
	got, _, _ := remote(t, d.Client, id, rc, spec, trajectories.Flat)
	assert.Equal(t, want, got)
	stop()
	require.NoError(t, <-done)
	assert.True(t, strings.HasPrefix(url, "nats://127.0.0.1:"), url)
}

// embeddedURL is the TCP address of the deployment's embedded server.
func embeddedURL(t *testing.T, d *natsrun.Deployment) string {
	t.Helper()
	require.NotNil(t, d.Server)
	return d.Server.ClientURL()
}

// A worker stopped while it is still connecting or setting up its streams
// stops cleanly, as one stopped while running does: cancellation is not a
// failure (it used to be, which made the test above fail now and then when
// the run ended before the worker had started).
func TestRunWorkerStoppedBeforeItStarts(t *testing.T) {
	reg := testscen.Registry(testscen.Options{})
	f := natsrun.DefaultFlags()
	f.Conn.URL, f.Dir, f.Listen = natsrun.EmbeddedURL, t.TempDir(), "127.0.0.1:0"
	d, err := f.OpenRun(context.Background(), reg, nil, 1, nil)
	require.NoError(t, err)
	defer d.Close()

	wf := natsrun.DefaultFlags()
	wf.Conn.URL = embeddedURL(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, wf.RunWorker(ctx, reg, nil, nil, 2, nil))

	// A real failure with a live context is still an error.
	bad := natsrun.DefaultFlags()
	bad.Conn.URL = "nats://127.0.0.1:1"
	bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer bcancel()
	assert.Error(t, bad.RunWorker(bctx, reg, nil, nil, 1, nil))
}
