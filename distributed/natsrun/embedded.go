package natsrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedOptions configure an in-process NATS server.
type EmbeddedOptions struct {
	// Dir is where JetStream keeps its files. A run survives the process:
	// start a server on the same Dir and re-attach. Required.
	Dir string
	// Listen, when set (host:port, port 0 for any), also opens the server
	// to other processes on that address, so that `troupe worker` processes
	// on this machine (or others, on a routable address) can join. Empty
	// serves this process only.
	Listen string
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
}

// Embedded is an in-process NATS server with JetStream on disk.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts an in-process server and waits until it accepts
// connections.
func StartEmbedded(o EmbeddedOptions) (*Embedded, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("%w: an embedded server needs a directory for its files", ErrBadConfig)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("natsrun: embedded server: %w", err)
	}
	opts := &server.Options{
		ServerName: "troupe-embedded",
		JetStream:  true,
		StoreDir:   o.Dir,
		NoSigs:     true,
		NoLog:      o.Logger == nil,
		DontListen: o.Listen == "",
		// Results can be large; the server's default payload limit (1 MiB)
		// is what clients chunk to.
	}
	if o.Listen != "" {
		host, port, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("%w: listen address %q: %w", ErrBadConfig, o.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			return nil, fmt.Errorf("%w: listen address %q: bad port", ErrBadConfig, o.Listen)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		}
		opts.Host, opts.Port = host, p
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsrun: embedded server: %w", err)
	}
	if o.Logger != nil {
		srv.SetLogger(slogAdapter{o.Logger}, false, false)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("natsrun: the embedded server did not start within 30s")
	}
	return &Embedded{srv: srv}, nil
}

// Connect opens an in-process connection to the server (no sockets).
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(e.srv), nats.Name("troupe-embedded")}, opts...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("natsrun: connecting to the embedded server: %w", err)
	}
	return nc, nil
}

// ClientURL is the URL other processes connect to; empty when the server
// does not listen.
func (e *Embedded) ClientURL() string {
	if e.srv.Addr() == nil {
		return ""
	}
	return e.srv.ClientURL()
}

// Close shuts the server down and waits until it has; JetStream's files
// stay in Dir.
func (e *Embedded) Close() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// slogAdapter writes the server's log to slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) { a.l.Info(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Tracef(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }

// LocalOptions configure a single-machine deployment: an embedded server
// and a worker in this process.
type LocalOptions struct {
	Embedded EmbeddedOptions
	Config   Config
	// Worker configures the in-process worker; its Registry is required.
	Worker WorkerConfig
	Logger *slog.Logger
}

// Local is a single-machine deployment: `troupe run --nats embedded`. Its
// runs are resumable: after a crash, a new Local on the same directory
// re-attaches to them.
type Local struct {
	Server *Embedded
	Conn   *nats.Conn
	Client *Client
	Worker *Worker

	stop context.CancelFunc
	wg   sync.WaitGroup
	once sync.Once
}

// StartLocal starts the server, connects, and starts the worker.
func StartLocal(ctx context.Context, o LocalOptions) (*Local, error) {
	srv, err := StartEmbedded(o.Embedded)
	if err != nil {
		return nil, err
	}
	l := &Local{Server: srv}
	fail := func(err error) (*Local, error) {
		if l.Conn != nil {
			l.Conn.Close()
		}
		srv.Close()
		return nil, err
	}
	if l.Conn, err = srv.Connect(); err != nil {
		return fail(err)
	}
	var opts []Option
	if o.Logger != nil {
		opts = append(opts, WithLogger(o.Logger))
	}
	if l.Client, err = Open(ctx, l.Conn, o.Config, opts...); err != nil {
		return fail(err)
	}
	if l.Worker, err = l.Client.NewWorker(ctx, o.Worker); err != nil {
		return fail(err)
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l.stop = stop
	l.wg.Go(func() { _ = l.Worker.Run(wctx) })
	return l, nil
}

// Close stops the worker (handing back what it holds), closes the
// connection and shuts the server down.
func (l *Local) Close() {
	l.once.Do(func() {
		l.stop()
		l.wg.Wait()
		l.Conn.Close()
		l.Server.Close()
	})
}
