package natsrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/troupe-rl/troupe/env"
)

// Environment variables Flags.ApplyEnv reads: the secrets that have no
// flag, since command lines are visible to every user of the machine.
const (
	EnvPassword = "TROUPE_NATS_PASSWORD"
	EnvToken    = "TROUPE_NATS_TOKEN"
)

// EmbeddedURL is the --nats value that runs an in-process server.
const EmbeddedURL = "embedded"

// Flags are the command-line settings of troupe run --nats and troupe
// worker: where the deployment is, how to authenticate, and its Config.
type Flags struct {
	Conn   ConnOptions // Conn.URL is --nats: server URLs, or "embedded"
	Config Config
	Dir    string        // --nats-dir: the embedded server's files
	Listen string        // --nats-listen: the embedded server's address for other processes
	RunID  string        // --run-id (troupe run)
	Drain  time.Duration // --drain (troupe worker)
	// MetricsAddr is --metrics-addr (troupe worker): where to serve the
	// deployment's Prometheus metrics (MetricsHandler); empty: nowhere.
	MetricsAddr string
}

// DefaultFlags returns the defaults: Config's, and .troupe/nats for an
// embedded server's files.
func DefaultFlags() Flags {
	cfg, _ := Config{}.withDefaults() // the zero Config is valid
	// Ahead follows MaxAckPending unless set: leave it to Open.
	cfg.Ahead = 0
	return Flags{Config: cfg, Dir: ".troupe/nats", Drain: 30 * time.Second}
}

// ApplyEnv reads the password and token from TROUPE_NATS_PASSWORD and
// TROUPE_NATS_TOKEN; lookup is usually os.LookupEnv.
func (f *Flags) ApplyEnv(lookup func(string) (string, bool)) {
	if v, ok := lookup(EnvPassword); ok {
		f.Conn.Password = v
	}
	if v, ok := lookup(EnvToken); ok {
		f.Conn.Token = v
	}
}

// bindCommon defines the flags troupe run and troupe worker share.
func (f *Flags) bindCommon(fs *pflag.FlagSet, urlHelp string) {
	c := &f.Config
	fs.StringVar(&f.Conn.URL, "nats", f.Conn.URL, urlHelp)
	fs.StringVar(&f.Conn.CredsFile, "nats-creds", f.Conn.CredsFile, "NATS credentials `file` (user JWT and nkey seed)")
	fs.StringVar(&f.Conn.NKeyFile, "nats-nkey", f.Conn.NKeyFile, "`file` holding a NATS user nkey seed")
	fs.StringVar(&f.Conn.User, "nats-user", f.Conn.User, "NATS user (its password from env "+EnvPassword+"; a token from env "+EnvToken+")")
	fs.StringVar(&f.Conn.TLSCA, "nats-tls-ca", f.Conn.TLSCA, "PEM `file` of the CAs that sign the NATS servers' certificates")
	fs.StringVar(&f.Conn.TLSCert, "nats-tls-cert", f.Conn.TLSCert, "client certificate `file`, for servers that verify clients")
	fs.StringVar(&f.Conn.TLSKey, "nats-tls-key", f.Conn.TLSKey, "client certificate's key `file`")
	fs.StringVar(&c.Prefix, "nats-prefix", c.Prefix, "names the deployment's streams and subjects; the same for every process of one deployment")
	fs.IntVar(&c.Replicas, "nats-replicas", c.Replicas, "replicas of every stream and bucket: 1 on one server, 3 on a 3-node cluster")
	fs.DurationVar(&c.AckWait, "nats-ack-wait", c.AckWait, "how long a silent worker keeps an episode before another worker gets it (live workers heartbeat)")
	fs.IntVar(&c.MaxDeliver, "nats-max-deliver", c.MaxDeliver, "deliveries of an unfinished episode before it is recorded as failed")
	fs.IntVar(&c.MaxAckPending, "nats-max-ack-pending", c.MaxAckPending, "episodes in hand over all workers; at least the sum of their --concurrency")
	fs.IntVar(&c.ChunkSize, "nats-chunk-size", c.ChunkSize, "largest message a stored episode is split into, in bytes")
	fs.DurationVar(&c.ResultsMaxAge, "nats-results-max-age", c.ResultsMaxAge, "how long the state and episodes of an unfinished run are kept for a re-attach; an abandoned run's go after that")
}

// bindSubmitter defines the flags of a submitter (troupe run and troupe serve).
func (f *Flags) bindSubmitter(fs *pflag.FlagSet) {
	fs.IntVar(&f.Config.Batch, "nats-batch", f.Config.Batch, "episodes per work message, played one after another by one worker slot: 16 or more for scripted episodes (less broker work), 1 for LLM ones; 0 chooses (1 when a role plays an LLM, else 16)")
	fs.Float64Var(&f.Config.AuditRate, "audit-rate", f.Config.AuditRate, "share of each worker's episodes this submitter re-plays to check them, 0 to 1 (e.g. 0.05), drawn secretly per episode after the worker stored it; a worker lying on k episodes is caught with probability 1-(1-rate)^k (on 1% of 10000 at 0.05: 0.994); its episodes are then re-played here, and the run stops if one written before differs")
	fs.DurationVar(&f.Config.LeaseTTL, "nats-lease", f.Config.LeaseTTL, "how long after this submitter's last sign of life another may take its run over (it renews every third of it)")
}

// BindRun defines troupe run's flags on fs, with f's values as defaults.
func (f *Flags) BindRun(fs *pflag.FlagSet) {
	f.bindCommon(fs, "play the episodes on troupe workers through NATS: server `URLs` (comma-separated), or embedded for an in-process server whose runs resume after a crash")
	fs.StringVar(&f.RunID, "run-id", f.RunID, "id of the distributed run, to re-attach to it (default: a digest of the run, so the same command re-attaches)")
	fs.StringVar(&f.Dir, "nats-dir", f.Dir, "--nats embedded: `directory` of the server's files")
	fs.StringVar(&f.Listen, "nats-listen", f.Listen, "--nats embedded: also accept troupe workers on this `host:port`")
	fs.BoolVar(&f.Config.KeepResults, "nats-keep", f.Config.KeepResults, "keep a completed run's episodes in NATS (running it again then writes them without playing)")
	f.bindSubmitter(fs)
}

// BindServe defines troupe serve's flags on fs: those of troupe run but
// the run id and the results' keeping, which are per request there.
func (f *Flags) BindServe(fs *pflag.FlagSet) {
	f.bindCommon(fs, "hand the episodes of rollout requests to troupe workers through NATS: server `URLs` (comma-separated), or embedded for an in-process server and worker")
	fs.StringVar(&f.Dir, "nats-dir", f.Dir, "--nats embedded: `directory` of the server's files")
	fs.StringVar(&f.Listen, "nats-listen", f.Listen, "--nats embedded: also accept troupe workers on this `host:port`")
	f.bindSubmitter(fs)
}

// BindWorker defines troupe worker's flags on fs.
func (f *Flags) BindWorker(fs *pflag.FlagSet) {
	f.bindCommon(fs, "NATS server `URLs` (comma-separated)")
	fs.DurationVar(&f.Drain, "drain", f.Drain, "on SIGTERM, how long the episodes in hand may finish before they are handed back")
	fs.StringVar(&f.MetricsAddr, "metrics-addr", f.MetricsAddr, "serve the deployment's Prometheus metrics (queue depth, in flight, redeliveries, workers) at http://`host:port`/metrics")
}

// BindRuns defines troupe runs's flags on fs: the deployment's address,
// credentials and prefix.
func (f *Flags) BindRuns(fs *pflag.FlagSet) {
	f.bindCommon(fs, "the deployment's NATS server `URLs` (comma-separated), or embedded for the server files in --nats-dir")
	fs.StringVar(&f.Dir, "nats-dir", f.Dir, "--nats embedded: `directory` of the server's files")
}

// OpenAdmin connects troupe runs to the deployment: with --nats embedded
// it starts the server on --nats-dir, without a worker.
func (f *Flags) OpenAdmin(ctx context.Context, log *slog.Logger) (*Deployment, error) {
	log = cmp.Or(log, slog.New(slog.DiscardHandler))
	if f.Embedded() {
		srv, err := StartEmbedded(EmbeddedOptions{Dir: f.Dir})
		if err != nil {
			return nil, err
		}
		nc, err := srv.Connect()
		if err != nil {
			srv.Close()
			return nil, err
		}
		c, err := Open(ctx, nc, f.Config, WithLogger(log))
		if err != nil {
			nc.Close()
			srv.Close()
			return nil, err
		}
		return &Deployment{Client: c, Server: srv, close: func() { nc.Close(); srv.Close() }}, nil
	}
	nc, c, err := f.open(ctx, log)
	if err != nil {
		return nil, err
	}
	return &Deployment{Client: c, close: nc.Close}, nil
}

// Embedded reports whether --nats asks for an in-process server.
func (f *Flags) Embedded() bool { return f.Conn.URL == EmbeddedURL }

// Deployment is what troupe run talks to: a client, and whatever Close
// must release (the embedded server and its worker).
type Deployment struct {
	Client *Client
	// Server is the embedded server, nil for a remote deployment. Its
	// ClientURL, when it listens, is what troupe workers join.
	Server *Embedded
	close  func()
}

// Close releases the deployment: it stops an embedded worker (handing back
// what it holds), closes the connection, and shuts an embedded server
// down.
func (d *Deployment) Close() { d.close() }

// ErrNoURL is returned when --nats is empty.
var ErrNoURL = errors.New("natsrun: --nats is empty: give NATS server URLs, or embedded")

// OpenRun connects troupe run to the deployment. With --nats embedded it
// starts the server in --nats-dir and a worker playing slots episodes at
// once with reg's scenarios and the policies policies makes
// (WorkerConfig.Policies; nil: the scenarios' own).
func (f *Flags) OpenRun(ctx context.Context, reg *env.Registry, policies func(llmEndpoint string) env.PolicyMaker, slots int, log *slog.Logger) (*Deployment, error) {
	log = cmp.Or(log, slog.New(slog.DiscardHandler))
	if f.Embedded() {
		l, err := StartLocal(ctx, LocalOptions{
			Embedded: EmbeddedOptions{Dir: f.Dir, Listen: f.Listen},
			Config:   f.Config,
			Worker:   WorkerConfig{Registry: reg, Policies: policies, Concurrency: slots, Name: "embedded"},
			Logger:   log,
		})
		if err != nil {
			return nil, err
		}
		return &Deployment{Client: l.Client, Server: l.Server, close: l.Close}, nil
	}
	nc, c, err := f.open(ctx, log)
	if err != nil {
		return nil, err
	}
	return &Deployment{Client: c, close: nc.Close}, nil
}

// RunWorker runs troupe worker: it connects, then plays episodes with
// reg's scenarios (and policies, made by policies, WorkerConfig.Policies:
// nil for the scenarios' own; those named in parallel asked at once for
// simultaneous actors, WorkerConfig.Parallel) until ctx ends, and hands
// back what is left after --drain.
func (f *Flags) RunWorker(ctx context.Context, reg *env.Registry, policies func(llmEndpoint string) env.PolicyMaker, parallel []string, concurrency int, log *slog.Logger) error {
	log = cmp.Or(log, slog.New(slog.DiscardHandler))
	if f.Embedded() {
		return fmt.Errorf("%w: a worker joins an existing server; run troupe run --nats embedded --nats-listen HOST:PORT and give its address", ErrBadConfig)
	}
	// A worker told to stop while it is still connecting or setting up has
	// nothing in hand: like one stopped while running, it stops cleanly.
	// Only a failure with ctx still live is an error. The NATS client does
	// not always wrap ctx's error in the one it returns when ctx ends
	// during a request (a closed connection, a JetStream timeout), so a
	// done ctx is what decides, not the error's chain.
	stopped := func(err error) error {
		if ctx.Err() != nil {
			log.Info("natsrun: worker stopped before it started", "err", err)
			return nil
		}
		return err
	}
	nc, c, err := f.open(ctx, log)
	if err != nil {
		return stopped(err)
	}
	defer nc.Close()
	if f.MetricsAddr != "" {
		stop, err := serveMetrics(f.MetricsAddr, c, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	w, err := c.NewWorker(ctx, WorkerConfig{Registry: reg, Policies: policies, Parallel: parallel, Concurrency: concurrency, Drain: f.Drain})
	if err != nil {
		return stopped(err)
	}
	return w.Run(ctx)
}

func (f *Flags) open(ctx context.Context, log *slog.Logger) (*nats.Conn, *Client, error) {
	if strings.TrimSpace(f.Conn.URL) == "" {
		return nil, nil, ErrNoURL
	}
	log.Info("natsrun: connecting", "nats", f.Conn)
	nc, err := Connect(ctx, f.Conn,
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			// Closing the connection at the end of a run disconnects it
			// too, with no error: that is no news.
			if err != nil {
				log.Warn("natsrun: disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("natsrun: reconnected", "server", nc.ConnectedUrlRedacted())
		}))
	if err != nil {
		return nil, nil, err
	}
	c, err := Open(ctx, nc, f.Config, WithLogger(log))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, c, nil
}

// serveMetrics serves MetricsHandler at addr/metrics until stop is called.
func serveMetrics(addr string, c *Client, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: --metrics-addr: %w", ErrBadConfig, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", MetricsHandler(c))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics endpoint stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() { _ = srv.Close() }, nil
}
