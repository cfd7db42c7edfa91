package natsrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// ErrRunBusy is returned by Start when another submitter is collecting the
// run: it holds the run's lease and keeps renewing it. Two submitters
// collecting one run would each purge it on completion under the other;
// one at a time does, and the second is told who holds it.
var ErrRunBusy = errors.New("natsrun: another submitter is collecting the run")

// ErrLeaseLost ends a run whose submitter lost its lease: it was silent
// for longer than the lease (a network partition, a stopped process) and
// another submitter took the run over, or the run was purged under it.
// Whatever it has not written yet, the new holder writes.
var ErrLeaseLost = errors.New("natsrun: the run's lease was lost")

// ErrCancelled ends a run cancelled by troupe runs cancel (Client.Cancel),
// and refuses a Start on it until it is purged.
var ErrCancelled = errors.New("natsrun: the run was cancelled")

// lease is the value of a run's lease key: who holds it, and the TTL that
// a waiting submitter gives it. Its KV revision is the fencing token: the
// holder renews it with an update conditioned on the revision it last
// wrote, so that once another submitter took it over, the old holder's
// renewal fails and it stops.
type lease struct {
	Holder string        `json:"holder"` // host, pid and a unique suffix
	TTL    time.Duration `json:"ttl"`
	Since  time.Time     `json:"since"`
}

func newHolder() string {
	host, _ := os.Hostname()
	return nameRE.ReplaceAllString(host, "_") + "-" + strconv.Itoa(os.Getpid()) + "-" + nuid.Next()
}

// acquire takes run's lease for holder. A lease held by someone else is
// watched for its TTL: renewed within it, its holder is alive and acquire
// returns ErrRunBusy naming it; left alone, its holder is gone (killed, cut
// off) and acquire takes it over, conditioned on the revision it watched,
// so that of several waiting submitters one wins. It returns the lease's
// revision, the fencing token the holder renews with.
func (c *Client) acquire(ctx context.Context, run, holder string) (uint64, error) {
	mine := lease{Holder: holder, TTL: c.cfg.LeaseTTL, Since: time.Now().UTC()}
	val, _ := json.Marshal(mine)
	for {
		rev, err := retryValue(ctx, func(ctx context.Context) (uint64, error) { return c.runs.Create(ctx, leaseKey(run), val) })
		if err == nil {
			return rev, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, fmt.Errorf("natsrun: taking the lease of run %s: %w", run, err)
		}
		e, err := c.runs.Get(ctx, leaseKey(run))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released meanwhile
		}
		if err != nil {
			return 0, fmt.Errorf("natsrun: reading the lease of run %s: %w", run, err)
		}
		var held lease
		if err := json.Unmarshal(e.Value(), &held); err != nil || held.TTL <= 0 {
			held.TTL = c.cfg.LeaseTTL
		}
		c.log.Info("natsrun: the run is leased; waiting to see whether its holder is alive", "run", run, "holder", held.Holder, "ttl", held.TTL)
		// Watched on this process's clock only: clocks of other machines
		// are not compared.
		deadline := time.Now().Add(held.TTL)
		alive := false
		for time.Now().Before(deadline) && !alive {
			pause(ctx, min(held.TTL/10, 500*time.Millisecond))
			if ctx.Err() != nil {
				return 0, context.Cause(ctx)
			}
			now, err := c.runs.Get(ctx, leaseKey(run))
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
				alive = true // released: try again at once
				held.Holder = ""
			case err == nil && now.Revision() != e.Revision():
				alive = true
				held.Holder = holderOf(now.Value())
			}
		}
		if alive && held.Holder != "" {
			return 0, fmt.Errorf("%w: run %s is collected by submitter %s, which renewed its lease (TTL %v) while this one waited; wait for it to finish, or stop it (troupe runs cancel %s)",
				ErrRunBusy, run, held.Holder, held.TTL, run)
		}
		if alive {
			continue
		}
		rev, err = retryValue(ctx, func(ctx context.Context) (uint64, error) {
			return c.runs.Update(ctx, leaseKey(run), val, e.Revision())
		})
		if err == nil {
			c.log.Warn("natsrun: took over the run from a silent submitter", "run", run, "from", held.Holder)
			return rev, nil
		}
		if !casConflict(err) {
			return 0, fmt.Errorf("natsrun: taking over the lease of run %s: %w", run, err)
		}
		// Another waiting submitter took it first (it is alive now), or
		// this one did, on a try whose reply was lost.
		if cur, gerr := c.runs.Get(ctx, leaseKey(run)); gerr == nil && holderOf(cur.Value()) == holder {
			return cur.Revision(), nil
		}
		return 0, fmt.Errorf("%w: run %s was just taken over by another submitter (%s)", ErrRunBusy, run, holderOf(c.getValue(ctx, leaseKey(run))))
	}
}

// casConflict reports a conditional KV write that lost: the key's revision
// was not the one given. nats.go reports it as ErrKeyExists from a single
// server (error code 10071), but from a replicated bucket refusing a write
// while another of the key is in flight (10164, as when a retry overtakes
// its first try after a lost reply) an Update's or a conditional Delete's
// only as ErrKeyRevisionMismatch: renew failed with it, and the submitter
// logged a warning and missed that renewal, though it held the lease
// (found by the cluster-split partition schedule, partition_linux_test.go).
func casConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

func holderOf(val []byte) string {
	var l lease
	if json.Unmarshal(val, &l) != nil || l.Holder == "" {
		return "unknown"
	}
	return l.Holder
}

func (c *Client) getValue(ctx context.Context, key string) []byte {
	e, err := c.runs.Get(ctx, key)
	if err != nil {
		return nil
	}
	return e.Value()
}

// renew extends the lease held at revision rev, returning the new
// revision. It fails with ErrLeaseLost once someone else holds it or the
// run is gone, and with ErrCancelled once the run was cancelled.
func (c *Client) renew(ctx context.Context, run, holder string, rev uint64) (uint64, error) {
	if e, err := c.runs.Get(ctx, cancelKey(run)); err == nil {
		return 0, fmt.Errorf("%w: run %s: %s", ErrCancelled, run, e.Value())
	}
	val, _ := json.Marshal(lease{Holder: holder, TTL: c.cfg.LeaseTTL, Since: time.Now().UTC()})
	next, err := retryValue(ctx, func(ctx context.Context) (uint64, error) { return c.runs.Update(ctx, leaseKey(run), val, rev) })
	switch {
	case err == nil:
		return next, nil
	case casConflict(err), errors.Is(err, jetstream.ErrKeyNotFound):
		// A retried update whose first try landed looks the same as a
		// lost lease: the holder's name tells them apart.
		if e, gerr := c.runs.Get(ctx, leaseKey(run)); gerr == nil && holderOf(e.Value()) == holder {
			return e.Revision(), nil
		}
		if _, gerr := c.runs.Get(ctx, specKey(run)); errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return 0, fmt.Errorf("%w: run %s was purged while this submitter collected it", ErrLeaseLost, run)
		}
		return 0, fmt.Errorf("%w: run %s is now collected by submitter %s", ErrLeaseLost, run, holderOf(c.getValue(ctx, leaseKey(run))))
	default:
		return 0, err
	}
}

// release gives the lease up, if it is still the one held at rev.
func (c *Client) release(ctx context.Context, run string, rev uint64) {
	if err := c.runs.Delete(ctx, leaseKey(run), jetstream.LastRevision(rev)); err != nil {
		c.log.Debug("natsrun: releasing the lease", "run", run, "err", err)
	}
}
