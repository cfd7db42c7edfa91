package natsrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// RunInfo is what a deployment holds about one run: troupe runs list and
// show.
type RunInfo struct {
	ID       string
	Revision uint64
	Scenario string
	Episodes int
	Created  time.Time
	// Incompatible, when set, is why this process cannot read the run's
	// record (another version of troupe submitted it); the counts below
	// are still read.
	Incompatible string
	Delivery     struct {
		AckWait       time.Duration
		MaxDeliver    int
		MaxAckPending int
	}
	Done int // episodes recorded as done
	// Queued and InFlight count work messages, each holding the requests
	// of up to the run's batch of episodes (Config.Batch).
	Queued   uint64 // work messages no worker has taken yet
	InFlight int    // work messages workers hold
	Results  uint64 // result messages stored
	// Holder is the submitter collecting the run, from its lease; empty
	// when none holds it (it ended, or was killed and the lease lapsed).
	Holder       string
	LeaseRenewed time.Time // the holder's last renewal, by its clock
	// HolderLive: the holder renewed its lease within three TTLs (by this
	// machine's clock), so it is taken to be alive; a killed submitter's
	// lease stays until a re-attach takes it over.
	HolderLive bool
	Cancelled  string    // why it was cancelled, when it was
	Refusals   []Refusal // workers that cannot play it
}

// Runs lists the runs the deployment holds, by id.
func (c *Client) Runs(ctx context.Context) ([]RunInfo, error) {
	lister, err := c.runs.ListKeysFiltered(ctx, specFilter)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, fmt.Errorf("natsrun: listing runs: %w", err)
	}
	var ids []string
	if lister != nil {
		for k := range lister.Keys() {
			if id, ok := runOfSpecKey(k); ok {
				ids = append(ids, id)
			}
		}
		_ = lister.Stop()
	}
	slices.Sort(ids)
	var out []RunInfo
	for _, id := range ids {
		info, err := c.Run(ctx, id)
		if errors.Is(err, ErrNoRun) {
			continue // purged since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// ErrNoRun is returned for a run id the deployment holds nothing of.
var ErrNoRun = errors.New("natsrun: no such run")

// Run reads what the deployment holds about run.
func (c *Client) Run(ctx context.Context, run string) (RunInfo, error) {
	info := RunInfo{ID: run}
	if err := CheckRunID(run); err != nil {
		return info, err
	}
	e, err := c.runs.Get(ctx, specKey(run))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return info, fmt.Errorf("%w: %s", ErrNoRun, run)
	}
	if err != nil {
		return info, fmt.Errorf("natsrun: run %s: %w", run, err)
	}
	info.Revision = e.Revision()
	info.Created = e.Created()
	if st, err := decodeStoredRun(e.Value(), ours); err != nil {
		info.Incompatible = err.Error()
	} else {
		info.Scenario, info.Episodes, info.Created = st.Run.Scenario, st.Run.Episodes, st.Created
		info.Delivery.AckWait, info.Delivery.MaxDeliver, info.Delivery.MaxAckPending = st.Delivery.AckWait, st.Delivery.MaxDeliver, st.Delivery.MaxAckPending
	}
	ref := runRef{id: run, rev: strconv.FormatUint(info.Revision, 10)}
	kv, err := c.js.Stream(ctx, "KV_"+c.n.runsBucket)
	if err != nil {
		return info, fmt.Errorf("natsrun: run %s: %w", run, err)
	}
	kinfo, err := kv.Info(ctx, jetstream.WithSubjectFilter("$KV."+c.n.runsBucket+"."+run+".>"))
	if err != nil {
		return info, fmt.Errorf("natsrun: run %s: %w", run, err)
	}
	donePrefix := "$KV." + c.n.runsBucket + "." + strings.TrimSuffix(ref.doneFilter(), "*")
	for subject := range kinfo.State.Subjects {
		if strings.HasPrefix(subject, donePrefix) {
			info.Done++
		}
	}
	if cons, err := c.js.Consumer(ctx, c.n.workStream, c.n.consumer(run)); err == nil {
		ci := cons.CachedInfo()
		info.Queued, info.InFlight = ci.NumPending, ci.NumAckPending
	}
	if rinfo, err := c.results.Info(ctx, jetstream.WithSubjectFilter(c.n.resultFilter(run))); err == nil {
		for _, n := range rinfo.State.Subjects {
			info.Results += n
		}
	}
	if le, err := c.runs.Get(ctx, leaseKey(run)); err == nil {
		var l lease
		if json.Unmarshal(le.Value(), &l) == nil {
			info.Holder, info.LeaseRenewed = l.Holder, l.Since
			info.HolderLive = time.Since(l.Since) < 3*l.TTL
		}
	}
	if ce, err := c.runs.Get(ctx, cancelKey(run)); err == nil {
		info.Cancelled = string(ce.Value())
	}
	if lister, err := c.runs.ListKeysFiltered(ctx, ref.refusedFilter()); err == nil {
		for k := range lister.Keys() {
			if re, err := c.runs.Get(ctx, k); err == nil {
				var r Refusal
				if json.Unmarshal(re.Value(), &r) == nil {
					info.Refusals = append(info.Refusals, r)
				}
			}
		}
		_ = lister.Stop()
		slices.SortFunc(info.Refusals, func(a, b Refusal) int { return strings.Compare(a.Worker, b.Worker) })
	}
	return info, nil
}

// Cancel stops run: its queued requests are removed and its consumer
// deleted, so that no worker starts another of its episodes (those in hand
// finish and are stored for nobody, until Purge or ResultsMaxAge); its
// submitter stops with ErrCancelled at its next lease renewal, and a Start
// on it is refused until it is purged. What it stored stays, for
// inspection, until Purge.
func (c *Client) Cancel(ctx context.Context, run, reason string) error {
	if err := CheckRunID(run); err != nil {
		return err
	}
	if _, err := c.runs.Get(ctx, specKey(run)); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: %s", ErrNoRun, run)
	}
	if reason == "" {
		reason = "cancelled"
	}
	reason += " at " + time.Now().UTC().Format(time.RFC3339)
	if _, err := retryValue(ctx, func(ctx context.Context) (uint64, error) {
		return c.runs.Put(ctx, cancelKey(run), []byte(reason))
	}); err != nil {
		return fmt.Errorf("natsrun: cancelling run %s: %w", run, err)
	}
	return c.dropQueue(ctx, run)
}

// dropQueue deletes run's consumer and its queued requests.
func (c *Client) dropQueue(ctx context.Context, run string) error {
	if err := retry(ctx, func(ctx context.Context) error {
		err := c.js.DeleteConsumer(ctx, c.n.workStream, c.n.consumer(run))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("natsrun: run %s: deleting its consumer: %w", run, err)
	}
	if err := retry(ctx, func(ctx context.Context) error {
		return c.work.Purge(ctx, jetstream.WithPurgeSubject(c.n.workFilter(run)))
	}); err != nil {
		return fmt.Errorf("natsrun: run %s: removing its queued requests: %w", run, err)
	}
	return nil
}

// Purge removes everything the deployment holds about run: its consumer
// and queued requests, stored results, done markers, lease and spec.
// Workers that still hold one of its episodes finish it and store a result
// nobody collects, which ResultsMaxAge then removes; its submitter, if one
// still collects it, stops with ErrLeaseLost.
func (c *Client) Purge(ctx context.Context, run string) error {
	if err := CheckRunID(run); err != nil {
		return err
	}
	// A purge marker on the spec tells the workers that follow the specs
	// to stop pulling the run at once.
	if err := retry(ctx, func(ctx context.Context) error { return c.runs.Purge(ctx, specKey(run)) }); err != nil {
		return fmt.Errorf("natsrun: purge %s: %w", run, err)
	}
	if err := c.dropQueue(ctx, run); err != nil {
		return err
	}
	kvStream, err := c.js.Stream(ctx, "KV_"+c.n.runsBucket)
	if err != nil {
		return fmt.Errorf("natsrun: purge %s: %w", run, err)
	}
	for _, p := range []struct {
		s       jetstream.Stream
		subject string
	}{
		{c.results, c.n.resultFilter(run)},
		{kvStream, "$KV." + c.n.runsBucket + "." + run + ".>"},
	} {
		if err := retry(ctx, func(ctx context.Context) error {
			return p.s.Purge(ctx, jetstream.WithPurgeSubject(p.subject))
		}); err != nil {
			return fmt.Errorf("natsrun: purge %s: %s: %w", run, p.subject, err)
		}
	}
	return nil
}
