package natsrun

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnOptions say how to reach and authenticate to a NATS deployment.
// Secrets are read from files where NATS allows it (creds, nkey seed, TLS
// key); String and LogValue never show a secret, and Connect's errors
// never hold one.
type ConnOptions struct {
	// URL is one server URL, or several separated by commas (the
	// cluster's seeds): nats://host:4222, tls://host:4222. A user and
	// password may be embedded (nats://user:pass@host:4222).
	URL string
	// CredsFile is a NATS credentials file (a user JWT and its nkey seed),
	// as nsc or the account operator issues it.
	CredsFile string
	// NKeyFile is a file holding a user nkey seed (SU...).
	NKeyFile string
	// User and Password, or Token, authenticate with a server's static
	// users. Prefer CredsFile or NKeyFile: these sit in memory and, on a
	// command line, in the process table.
	User, Password string
	Token          string
	// TLSCA is a PEM file of the CAs that sign the servers' certificates;
	// TLSCert and TLSKey are the client's own certificate and key, for
	// servers that verify clients.
	TLSCA, TLSCert, TLSKey string
	// Name is the connection's name in the server's monitoring.
	Name string
}

// String describes the options with every secret elided.
func (o ConnOptions) String() string {
	var parts []string
	parts = append(parts, "url="+redactURLs(o.URL))
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("creds", o.CredsFile)
	add("nkey", o.NKeyFile)
	add("user", o.User)
	if o.Password != "" {
		parts = append(parts, "password=REDACTED")
	}
	if o.Token != "" {
		parts = append(parts, "token=REDACTED")
	}
	add("tls-ca", o.TLSCA)
	add("tls-cert", o.TLSCert)
	add("tls-key", o.TLSKey)
	add("name", o.Name)
	return strings.Join(parts, " ")
}

// GoString keeps %#v from printing the secrets.
func (o ConnOptions) GoString() string { return "natsrun.ConnOptions{" + o.String() + "}" }

// LogValue implements slog.LogValuer with String's redaction.
func (o ConnOptions) LogValue() slog.Value { return slog.StringValue(o.String()) }

// redactURLs replaces the user information (a password, a token) of every
// URL in a comma-separated list.
func redactURLs(list string) string {
	urls := strings.Split(list, ",")
	for i, raw := range urls {
		at := strings.LastIndex(raw, "@")
		if at < 0 {
			continue // nothing secret in it
		}
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.User == nil {
			// Not a URL with user information as url.Parse sees it
			// (an opaque "user:pw@host", a bad escape): keep nothing
			// before the "@".
			urls[i] = "REDACTED" + raw[at:]
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
		} else {
			u.User = url.User("REDACTED") // a lone user part may be a token
		}
		urls[i] = u.String()
	}
	return strings.Join(urls, ",")
}

// natsOptions turns o into nats.go options.
func (o ConnOptions) natsOptions() ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name(o.Name),
		// A cluster node restarting, or a network blip, must not end a
		// long run: keep reconnecting, buffering what is published.
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}
	if o.CredsFile != "" && o.NKeyFile != "" {
		return nil, fmt.Errorf("%w: give a creds file or an nkey file, not both", ErrBadConfig)
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.NKeyFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			// The error names the file, never its content.
			return nil, fmt.Errorf("%w: nkey file %s: %w", ErrBadConfig, o.NKeyFile, err)
		}
		opts = append(opts, opt)
	}
	if o.User != "" || o.Password != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, fmt.Errorf("%w: a client TLS certificate needs its key and the key its certificate", ErrBadConfig)
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	return opts, nil
}

// Connect opens a connection with o, plus any extra nats.go options. It
// waits for the first connection until ctx ends.
func Connect(ctx context.Context, o ConnOptions, extra ...nats.Option) (*nats.Conn, error) {
	if strings.TrimSpace(o.URL) == "" {
		return nil, fmt.Errorf("%w: no NATS URL", ErrBadConfig)
	}
	opts, err := o.natsOptions()
	if err != nil {
		return nil, err
	}
	opts = append(opts, extra...)
	if dl, ok := ctx.Deadline(); ok {
		opts = append(opts, nats.Timeout(time.Until(dl)))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		// nats.go's errors do not carry the URL, and ours carries it
		// redacted.
		return nil, fmt.Errorf("natsrun: connecting to %s: %w", redactURLs(o.URL), err)
	}
	return nc, nil
}
