package natsrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/troupe-rl/troupe/distributed/wire"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// Client is a connection to a deployment: the streams, buckets and
// consumers a submitter and a worker share. It is safe for concurrent use.
// Open creates whatever is missing, so the first process to start sets a
// deployment up.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	cfg     Config
	n       names
	work    jetstream.Stream
	results jetstream.Stream
	runs    jetstream.KeyValue
	alive   jetstream.KeyValue
	log     *slog.Logger
	chunk   int
	inline  int          // results up to this size ride in their done markers
	fps     fingerprints // the runs' it submits
	// auditKey, set by tests, keys the audit draws of the runs it
	// submits; nil draws a secret key per run (crypto/rand).
	auditKey []byte
}

// Option adjusts a Client.
type Option func(*Client)

// WithLogger makes the client, and the executors and workers it makes, log
// to l. The default discards. Nothing logged holds a credential.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// Open connects to the deployment cfg describes on nc, creating or updating
// its streams, buckets and consumers. It does not own nc: close it after
// the client's last use.
func Open(ctx context.Context, nc *nats.Conn, cfg Config, opts ...Option) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsrun: jetstream: %w", err)
	}
	c := &Client{nc: nc, js: js, cfg: cfg, n: newNames(cfg.Prefix), log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(c)
	}
	// A result chunk leaves room for the headers under max_payload.
	c.chunk = cfg.ChunkSize
	if max := int(nc.MaxPayload()) - 4096; max > 0 && max < c.chunk {
		c.chunk = max
	}
	c.inline = min(c.chunk, maxInline)
	if err := retry(ctx, func(ctx context.Context) error { return c.setup(ctx) }); err != nil {
		return nil, fmt.Errorf("natsrun: setting up %s streams: %w", cfg.Prefix, err)
	}
	return c, nil
}

// Config returns the client's configuration, defaults filled in.
func (c *Client) Config() Config { return c.cfg }

func (c *Client) setup(ctx context.Context) error {
	cfg, n := c.cfg, c.n
	var err error
	c.work, err = c.ensureStream(ctx, jetstream.StreamConfig{
		Name:        n.workStream,
		Description: "troupe: episode requests waiting for a worker",
		Subjects:    []string{n.prefix + ".work.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
		// An abandoned run's requests go with its results.
		MaxAge: cfg.ResultsMaxAge,
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", n.workStream, err)
	}
	c.results, err = c.ensureStream(ctx, jetstream.StreamConfig{
		Name:        n.resStream,
		Description: "troupe: finished episodes, one or more chunks each",
		Subjects:    []string{n.prefix + ".result.>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
		MaxAge:      cfg.ResultsMaxAge,
		// Results arrive S2-compressed (commit): compressing them again
		// would cost the servers CPU for nothing.
		Compression: jetstream.NoCompression,
		// Direct gets return the raw message from any replica, instead of
		// base64 in JSON from the leader. A replica that lags may not hold
		// a result yet when its done marker is seen: fetch asks again.
		AllowDirect: true,
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", n.resStream, err)
	}
	// Each run has a consumer of its own (runConsumer). The one shared
	// consumer of protocol 1 would overlap them: it goes.
	if err := c.js.DeleteConsumer(ctx, n.workStream, "workers"); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("removing the shared consumer of protocol 1: %w", err)
	}
	c.runs, err = c.ensureKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      n.runsBucket,
		Description: "troupe: run specs and which episodes are done",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		// An abandoned run's state goes with its results: every entry
		// expires ResultsMaxAge after it was written, as its results do
		// (a run must not last longer than that).
		TTL: cfg.ResultsMaxAge,
	})
	if err != nil {
		return fmt.Errorf("bucket %s: %w", n.runsBucket, err)
	}
	c.alive, err = c.ensureKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      n.aliveBucket,
		Description: "troupe: live workers (each refreshes its key; silent ones expire)",
		History:     1,
		TTL:         presenceTTL,
		Storage:     jetstream.MemoryStorage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("bucket %s: %w", n.aliveBucket, err)
	}
	return nil
}

// ensureStream creates the stream, or finds it as cfg says, and updates it
// only when its configuration differs (another ResultsMaxAge, say).
// CreateOrUpdateStream updates it every time, even to the same
// configuration, and a stream update that meets a consumer being created
// is a data race inside nats-server (v2.15.2: fileStore.UpdateConfig
// against ConsumerStore), which every client that connects while a run
// starts would set off.
func (c *Client) ensureStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := c.js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return c.js.UpdateStream(ctx, cfg)
	}
	return s, err
}

// ensureKeyValue is ensureStream for a bucket.
func (c *Client) ensureKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := c.js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return c.js.UpdateKeyValue(ctx, cfg)
	}
	return kv, err
}

// runConsumer creates, or finds, the durable consumer of run's requests,
// with the run's own delivery settings: AckWait is how long a silent worker
// keeps one of its episodes, MaxAckPending how many of them the fleet
// holds at once. MaxDeliver is unlimited: a worker that gets a request
// past the run's MaxDeliver records it as failed, which the server's own
// limit would not.
func (c *Client) runConsumer(ctx context.Context, run string, d delivery) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		cons, err = c.js.CreateConsumer(ctx, c.n.workStream, c.consumerConfig(run, d))
		if lostStore(err) {
			// The consumer's directory went from under it: a purge of an
			// earlier run of this id deleted the consumer, and the server
			// removed that one's directory only after this one was made
			// in its place (a delete whose reply timed out and whose
			// retry found it gone). Every create of it then fails alike.
			// Its state cannot be kept anyway: delete it and make it anew
			// (the requests it had handed out come again, and done
			// markers keep them from being played twice).
			c.log.Warn("natsrun: the run's consumer lost its storage; making it again", "run", run, "err", err)
			if derr := c.js.DeleteConsumer(ctx, c.n.workStream, c.n.consumer(run)); derr != nil && !errors.Is(derr, jetstream.ErrConsumerNotFound) {
				return derr
			}
			cons, err = c.js.CreateConsumer(ctx, c.n.workStream, c.consumerConfig(run, d))
		}
		if errors.Is(err, jetstream.ErrConsumerExists) {
			// Created before, maybe with other settings by a submitter
			// that registered the run: the stored ones rule, and the
			// consumer keeps them.
			cons, err = c.js.Consumer(ctx, c.n.workStream, c.n.consumer(run))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("natsrun: the consumer of run %s: %w", run, err)
	}
	return cons, nil
}

// lostStore reports whether err is the server's failure to create a
// consumer whose storage directory is missing.
func lostStore(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeConsumerCreate &&
		strings.Contains(api.Description, "no such file or directory")
}

func (c *Client) consumerConfig(run string, d delivery) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       c.n.consumer(run),
		Description:   "troupe: the requests of run " + run,
		FilterSubject: c.n.workFilter(run),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: d.MaxAckPending,
		MaxWaiting:    1 << 14,
		Replicas:      c.cfg.Replicas,
		// An abandoned run's consumer goes once no worker pulls from it
		// (its spec expired, or it was purged); a submitter collecting
		// the run makes it again if it went while no worker was up.
		InactiveThreshold: c.cfg.ResultsMaxAge,
	}
}

// presenceTTL is how long a worker's presence key outlives its last
// refresh; workers refresh every presenceTTL/3.
const presenceTTL = 30 * time.Second

// doneRecord is the value of a done marker: where the episode's encoding
// lies in the results stream.
type doneRecord struct {
	Attempt string   `json:"attempt"`
	Seqs    []uint64 `json:"seqs"`  // the chunks' stream sequences, in order
	Size    int      `json:"size"`  // bytes stored, all chunks
	CRC     uint32   `json:"crc"`   // CRC-32C of the bytes stored
	Codec   string   `json:"codec"` // how the encoding is compressed: codecS2
	Raw     int      `json:"raw"`   // the encoding's size, uncompressed
	// Inline: the stored bytes follow the record in the marker's value,
	// and Seqs is empty.
	Inline     bool            `json:"inline,omitempty"`
	Status     protocol.Status `json:"status"`
	Deliveries uint64          `json:"deliveries"` // times the request was handed out
	Worker     string          `json:"worker"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// codecS2 is the S2 block format (github.com/klauspost/compress/s2).
const codecS2 = "s2"

// commit stores ep as the result of episode idx of run, exactly once: the
// chunks go to the results stream under a subject of their own attempt,
// then a done marker is created, which only one attempt can do. It reports
// whether this attempt's result is the one recorded. A losing attempt's
// chunks are purged.
func (c *Client) commit(ctx context.Context, run runRef, idx int64, ep *episode.Record, deliveries uint64, worker string) (bool, error) {
	raw := wire.Encode(nil, ep)
	// S2 at the source: the bytes cross the network, the servers and their
	// replicas once, compressed (an episode's JSON shrinks several times).
	data := s2.EncodeBetter(nil, raw)
	attempt := nuid.Next()
	subject := c.n.resultSubject(run.id, idx, attempt)
	rec := doneRecord{
		Attempt: attempt, Size: len(data), CRC: crc32.Checksum(data, castagnoli), Codec: codecS2, Raw: len(raw),
		Status: ep.Status, Deliveries: deliveries, Worker: worker,
	}
	var val []byte
	if len(data) <= c.inline {
		// Small enough to ride in the done marker itself: one write to
		// store the episode, and the collector's watcher brings it along,
		// with no read of the results stream.
		rec.Inline = true
		val = appendMarker(nil, &rec, data)
	} else {
		parts := (len(data) + c.chunk - 1) / c.chunk
		for k := range parts {
			part := data[k*c.chunk : min((k+1)*c.chunk, len(data))]
			msg := &nats.Msg{Subject: subject, Data: part, Header: nats.Header{}}
			// The id makes a publish retried after a lost ack land once.
			msg.Header.Set(jetstream.MsgIDHeader, attempt+"."+strconv.Itoa(k))
			msg.Header.Set(headerPart, strconv.Itoa(k)+"/"+strconv.Itoa(parts))
			ack, err := retryValue(ctx, func(ctx context.Context) (*jetstream.PubAck, error) {
				return c.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(c.n.resStream))
			})
			if err != nil {
				return false, fmt.Errorf("storing episode %d of run %s: %w", idx, run, err)
			}
			rec.Seqs = append(rec.Seqs, ack.Sequence)
		}
		val = appendMarker(nil, &rec, nil)
	}
	key := run.doneKey(idx)
	for {
		_, err := retryValue(ctx, func(ctx context.Context) (uint64, error) { return c.runs.Create(ctx, key, val) })
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return false, fmt.Errorf("recording episode %d of run %s as done: %w", idx, run, err)
		}
		// Someone recorded this episode first, or an earlier try of this
		// very Create succeeded and its reply was lost, or that try is
		// still being replicated: a replicated bucket refuses a write to
		// a key another write to it has in flight (error 10164, which
		// nats.go reports as ErrKeyExists too), and that write may yet be
		// dropped. The bucket's leader tells which (a replica may lag).
		prev, gerr := c.leaderDoneRecord(ctx, run, idx)
		switch {
		case gerr == nil && prev.Attempt == attempt:
			return true, nil
		case gerr == nil:
			c.purgeSubject(ctx, subject) // another attempt's result is the one
			return false, nil
		case errors.Is(gerr, jetstream.ErrKeyNotFound) && ctx.Err() == nil:
			// No marker yet: the conflict was a write in flight. Before,
			// this counted as another's result, and the request was
			// acknowledged with no episode stored if that write was then
			// dropped (the cluster-split partition schedule).
			pause(ctx, 50*time.Millisecond)
		default:
			// Unsure who won: the request goes back rather than being
			// acknowledged with its episode perhaps stored by nobody.
			// The chunks stay; ResultsMaxAge removes them if not ours.
			return false, fmt.Errorf("recording episode %d of run %s as done: whether it is recorded is unknown: %w", idx, run, gerr)
		}
	}
}

const headerPart = "Troupe-Part"

// doneRecord reads episode idx's done marker; jetstream.ErrKeyNotFound when
// there is none.
func (c *Client) doneRecord(ctx context.Context, run runRef, idx int64) (doneRecord, error) {
	entry, err := retryValue(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) {
		return c.runs.Get(ctx, run.doneKey(idx))
	})
	if err != nil {
		return doneRecord{}, err
	}
	rec, _, err := parseMarker(entry.Value())
	if err != nil {
		return rec, fmt.Errorf("done marker of episode %d of run %s: %w", idx, run, err)
	}
	return rec, nil
}

// appendMarker appends a done marker's value: the record's JSON, and after
// a newline the episode's stored bytes when they ride inline.
func appendMarker(dst []byte, rec *doneRecord, inline []byte) []byte {
	b, err := json.Marshal(rec)
	if err != nil {
		panic(fmt.Sprintf("natsrun: encoding a done marker: %v", err)) // strings and numbers
	}
	dst = append(dst, b...)
	if rec.Inline {
		dst = append(dst, '\n')
		dst = append(dst, inline...)
	}
	return dst
}

// parseMarker splits a done marker's value into its record and the
// episode's inline bytes (nil when they are in the results stream).
func parseMarker(val []byte) (doneRecord, []byte, error) {
	var rec doneRecord
	head, inline, _ := bytes.Cut(val, []byte{'\n'})
	if err := json.Unmarshal(head, &rec); err != nil {
		return rec, nil, err
	}
	if !rec.Inline {
		inline = nil
	}
	return rec, inline, nil
}

// fetch reads back the episode a done marker points at: inline, or from
// the results stream.
func (c *Client) fetch(ctx context.Context, rec doneRecord, inline []byte) (*episode.Record, error) {
	ep, _, err := c.fetchRaw(ctx, rec, inline)
	return ep, err
}

// fetchRaw is fetch, with the episode's encoding as the worker stored it.
func (c *Client) fetchRaw(ctx context.Context, rec doneRecord, inline []byte) (*episode.Record, []byte, error) {
	data, seqs := inline, []uint64(nil)
	if !rec.Inline {
		data, seqs = make([]byte, 0, min(rec.Size, maxResult)), rec.Seqs
	}
	for _, seq := range seqs {
		var chunk []byte
		err := retry(ctx, func(ctx context.Context) error {
			msg, err := c.results.GetMsg(ctx, seq)
			if err == nil {
				chunk = msg.Data
				return nil
			}
			if !errors.Is(err, jetstream.ErrMsgNotFound) {
				return err
			}
			// Direct gets are answered by any replica, and one that lags
			// may not hold the chunk yet (it was stored before its done
			// marker): the leader settles it.
			chunk, err = c.leaderGet(ctx, seq)
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("result chunk %d: %w", seq, err)
		}
		data = append(data, chunk...)
	}
	if len(data) != rec.Size || crc32.Checksum(data, castagnoli) != rec.CRC {
		return nil, nil, fmt.Errorf("%w: result of %d bytes does not match its done marker (%d bytes)", ErrCorruptResult, len(data), rec.Size)
	}
	if rec.Codec != codecS2 {
		return nil, nil, fmt.Errorf("%w: result compressed with %q, not %q", ErrCorruptResult, rec.Codec, codecS2)
	}
	if n, err := s2.DecodedLen(data); err != nil || n != rec.Raw || n > maxResult {
		return nil, nil, fmt.Errorf("%w: result of %d bytes does not decompress to %d bytes (%v)", ErrCorruptResult, len(data), rec.Raw, err)
	}
	raw, err := s2.Decode(nil, data)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrCorruptResult, err)
	}
	ep, err := wire.Decode(raw)
	return ep, raw, err
}

// maxInline is the largest result a done marker carries inline: larger
// ones go to the results stream, so that watching a run's markers stays
// light.
const maxInline = 64 << 10

// maxResult bounds an episode's encoding: a done marker claiming more is
// corrupt.
const maxResult = 1 << 30

// leaderGet reads message seq of the results stream from the stream's
// leader.
func (c *Client) leaderGet(ctx context.Context, seq uint64) ([]byte, error) {
	m, err := c.leaderMsg(ctx, c.n.resStream, struct {
		Seq uint64 `json:"seq"`
	}{seq})
	if err != nil {
		return nil, fmt.Errorf("reading message %d: %w", seq, err)
	}
	return m.Data, nil
}

// storedMsg is a stream message as the stream's leader answers it.
type storedMsg struct {
	Seq  uint64 `json:"seq"`
	Hdrs []byte `json:"hdrs"`
	Data []byte `json:"data"`
}

// tombstone reports a KV delete or purge marker, which carries a
// KV-Operation header.
func (m *storedMsg) tombstone() bool { return bytes.Contains(m.Hdrs, []byte("KV-Operation")) }

// leaderMsg asks stream's leader (not a replica, which may lag, as a
// direct get may) for the message req names.
func (c *Client) leaderMsg(ctx context.Context, stream string, req any) (*storedMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := c.nc.RequestWithContext(ctx, jetstream.DefaultAPIPrefix+"STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Message *storedMsg          `json:"message"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, err
	}
	switch {
	case r.Error != nil && r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case r.Error != nil:
		return nil, r.Error
	case r.Message == nil:
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	return r.Message, nil
}

// lastBySubject asks a stream's leader for the last message on a subject.
type lastBySubject struct {
	Subject string `json:"last_by_subj"`
}

// leaderDoneRecord is doneRecord read from the runs bucket's leader:
// jetstream.ErrKeyNotFound when there is no marker.
func (c *Client) leaderDoneRecord(ctx context.Context, run runRef, idx int64) (doneRecord, error) {
	m, err := retryValue(ctx, func(ctx context.Context) (*storedMsg, error) {
		return c.leaderMsg(ctx, "KV_"+c.n.runsBucket, lastBySubject{"$KV." + c.n.runsBucket + "." + run.doneKey(idx)})
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) || (err == nil && m.tombstone()) {
		return doneRecord{}, jetstream.ErrKeyNotFound // never written, or deleted or purged since
	}
	if err != nil {
		return doneRecord{}, err
	}
	rec, _, err := parseMarker(m.Data)
	if err != nil {
		return rec, fmt.Errorf("done marker of episode %d of run %s: %w", idx, run, err)
	}
	return rec, nil
}

// specGone reports whether run's spec is no longer the one the run was
// started with (purged, deleted, or started again), as the runs bucket's
// leader sees it: a lagging replica's "not found" must not make a worker
// take back the results of a live run.
func (c *Client) specGone(ctx context.Context, run runRef) (bool, error) {
	m, err := c.leaderMsg(ctx, "KV_"+c.n.runsBucket, lastBySubject{"$KV." + c.n.runsBucket + "." + specKey(run.id)})
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return true, nil
	case err != nil:
		return false, err
	}
	return strconv.FormatUint(m.Seq, 10) != run.rev || m.tombstone(), nil
}

// ErrCorruptResult reports a stored result that does not match its done
// marker.
var ErrCorruptResult = errors.New("natsrun: corrupt result")

// purgeSubject removes a losing attempt's chunks; failing to is harmless
// (ResultsMaxAge removes them), so errors are only logged.
func (c *Client) purgeSubject(ctx context.Context, subject string) {
	if err := c.results.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		c.log.Debug("natsrun: purging a duplicate result", "subject", subject, "err", err)
	}
}

// retry calls f until it succeeds, fails for good, or ctx ends. Each call
// gets its own deadline, so that one lost reply (a server that died
// mid-request, a leader election) costs one timeout, not the run.
func retry(ctx context.Context, f func(ctx context.Context) error) error {
	const perTry = 5 * time.Second
	wait := 20 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, perTry)
		err := f(tctx)
		cancel()
		if err == nil || permanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last error: %w)", context.Cause(ctx), err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %w)", context.Cause(ctx), err)
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// retryValue is retry for a call that returns a value: the value of its
// last call.
func retryValue[T any](ctx context.Context, f func(ctx context.Context) (T, error)) (T, error) {
	var v T
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		v, err = f(ctx)
		return err
	})
	return v, err
}

// permanent reports errors that trying again cannot fix. Everything else
// (timeouts, no responders during a leader election, a reconnecting
// connection, "JetStream not ready") is worth another try.
func permanent(err error) bool {
	switch {
	case errors.Is(err, jetstream.ErrKeyExists),
		errors.Is(err, jetstream.ErrKeyNotFound),
		errors.Is(err, jetstream.ErrMsgNotFound),
		errors.Is(err, jetstream.ErrStreamNotFound),
		errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, jetstream.ErrBucketNotFound),
		errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrMaxPayload):
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 503 and 408 are the server saying "not now"; other API errors
		// (a bad request, a conflicting configuration) stay as they are,
		// but one: two clients creating the same durable consumer at once
		// can race on its files inside nats-server (a 500, "consumer
		// create", open .../meta.inf.tmp: no such file), and the next try
		// finds the consumer the other made.
		if apiErr.Code == 500 && apiErr.ErrorCode == jetstream.JSErrCodeConsumerCreate {
			return false
		}
		return apiErr.Code != 503 && apiErr.Code != 408 && apiErr.Code != 0
	}
	return false
}
