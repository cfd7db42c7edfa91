package natsrun

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/troupe-rl/troupe/distributed/wire"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// The audit: the submitter re-plays a random share of every worker's
// episodes (Config.AuditRate) in its own process and compares them, byte
// for byte, with what the worker stored. The run's fingerprint (three
// fixed seeds, the default policy) catches a worker whose scenario plays
// differently everywhere; the audit catches one that differs only on some
// seeds, or only under another policy, with a probability the operator
// sets:
//
// Each episode is audited, independently of the others, with probability
// r (AuditRate): the draw is a keyed hash (HMAC-SHA256) of the episode's
// index under a key the submitter draws from crypto/rand when it starts
// the run and never sends. It is made when the episode is collected,
// after its worker stored it, and nothing of it is published: a worker
// cannot know which of its episodes will be checked. A worker that lies
// on k of its episodes is caught with probability
//
//	P(caught) = 1 − (1 − r)^k
//
// exactly; one that lies on each of its n episodes with probability f,
// independently, with 1 − (1 − r·f)^n. Lying on 1% of 10,000 episodes
// (k = 100) at r = 0.05 is caught with probability 1 − 0.95^100 ≈ 0.994.
//
// The audit only checks: an audited episode that matches is the worker's
// (the same bytes), and one that does not is replaced by the submitter's
// own, which is what a local run writes, so the output stays the local
// run's. The worker that stored it is distrusted from then on: every
// episode of it the submitter collects later is re-played here and the
// submitter's own is written (quarantine: nothing of it is written
// unchecked, nothing is lost or written twice). Its episodes collected
// before, unaudited, were handed to the output already: they are all
// re-played at once, and if one of them differs the output holds a lie
// and the run stops with ErrAudit naming it.
//
// Not audited: episodes a worker recorded as failed without playing them
// (EndRejected, EndMaxDeliver), and episodes cut by the clock (in a run
// with a timeout: env.EndDeadline) or the run (env.EndInterrupted), which
// no re-play reproduces.
// Runs whose roles play an LLM cannot be audited (their answers are not
// reproducible); Start refuses a rate above 0 for them.

// ErrAudit is wrapped by the error that stops a run when an audit finds
// that an episode already handed to the output differs from the
// submitter's re-play of it.
var ErrAudit = errors.New("natsrun: an audited worker lied")

// AuditFailure is an episode whose stored record differs from the
// submitter's re-play of it.
type AuditFailure struct {
	Worker  string `json:"worker"`  // the worker that stored it (WorkerConfig.Name)
	Episode int64  `json:"episode"` // its index in the run
	// Diff is the first difference between the episode's JSON line as the
	// worker stored it and as the submitter played it.
	Diff string `json:"diff"`
	// Written: the episode had been handed to the output, unaudited,
	// before its worker was caught; the run stopped with ErrAudit.
	Written bool `json:"written,omitempty"`
}

func (f AuditFailure) String() string {
	return fmt.Sprintf("worker %s, episode %d: %s", f.Worker, f.Episode, f.Diff)
}

// AuditProbability is the probability that an audit at rate r catches a
// worker that lies on k of its episodes: 1 − (1 − r)^k.
func AuditProbability(r float64, k int) float64 {
	return 1 - math.Pow(1-r, float64(k))
}

// auditor audits one run's episodes.
type auditor struct {
	threshold uint64 // audit when the draw is below it; math.MaxUint64 with all
	all       bool   // rate 1
	untimed   bool   // the run has no timeout: no episode ends by the clock
	key       []byte // the secret the draws are keyed with
	local     *env.LocalExecutor
	// stored reads back the record a worker stored for an episode already
	// collected, and the worker's name: what recheck compares.
	stored func(ctx context.Context, idx int64) (ep *episode.Record, raw []byte, worker string, err error)
	log    *slog.Logger

	mu         sync.Mutex
	distrusted map[string]bool
	accepted   map[string][]env.Request // by worker: unaudited, handed to the output
	failures   []AuditFailure
	audited    int64
}

// newAuditor returns the auditor of a run at rate (0 < rate <= 1), whose
// episodes local plays and stored reads back; key nil draws a secret one.
func newAuditor(rate float64, key []byte, local *env.LocalExecutor, stored func(context.Context, int64) (*episode.Record, []byte, string, error), log *slog.Logger) (*auditor, error) {
	if key == nil {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("natsrun: drawing the audit key: %w", err)
		}
	}
	a := &auditor{key: key, local: local, stored: stored, log: log, all: rate >= 1, untimed: local.Timeout == 0,
		distrusted: map[string]bool{}, accepted: map[string][]env.Request{}}
	// rate·2^64, in floating point: 2^64 itself is out of uint64's range.
	if !a.all {
		a.threshold = uint64(math.Ldexp(rate, 64))
	}
	return a, nil
}

// rate is the probability that picked is true: the rate as drawn.
func (a *auditor) rate() float64 {
	if a.all {
		return 1
	}
	return math.Ldexp(float64(a.threshold), -64)
}

// picked draws whether episode idx is audited.
func (a *auditor) picked(idx int64) bool {
	if a.all {
		return true
	}
	mac := hmac.New(sha256.New, a.key)
	mac.Write(binary.BigEndian.AppendUint64(nil, uint64(idx)))
	return binary.BigEndian.Uint64(mac.Sum(nil)) < a.threshold
}

// auditable reports whether a re-play can reproduce ep: it was played,
// and not cut by the clock or the run. An episode of a run without a
// timeout that claims the clock cut it is audited (and fails).
func (a *auditor) auditable(ep *episode.Record) bool {
	switch ep.End {
	case EndRejected, EndMaxDeliver, EndResultLost, env.EndInterrupted:
		return false
	case env.EndDeadline:
		return a.untimed
	}
	return true
}

// check audits ep, req's episode as worker stored it (its encoding raw,
// when known, spares one), when
// the draw picks it or its worker is distrusted, and returns the episode
// to hand to the output: ep, or the submitter's own when ep differs. A
// non-nil error means the output already holds a lie (ErrAudit) or ctx
// ended during a re-play.
func (a *auditor) check(ctx context.Context, req env.Request, worker string, ep *episode.Record, raw []byte) (*episode.Record, error) {
	if !a.auditable(ep) {
		return ep, nil
	}
	a.mu.Lock()
	distrusted := a.distrusted[worker]
	if !distrusted && !a.picked(req.Index) {
		// Only its index is kept: were its worker caught, its record is
		// read back from the run's results, which hold it until the run
		// completes.
		a.accepted[worker] = append(a.accepted[worker], req)
		a.mu.Unlock()
		return ep, nil
	}
	a.mu.Unlock()
	own, diff, err := a.compare(ctx, req, ep, raw)
	if err != nil || diff == "" {
		return ep, err
	}
	failure := AuditFailure{Worker: worker, Episode: req.Index, Diff: diff}
	a.mu.Lock()
	a.failures = append(a.failures, failure)
	caught := !a.distrusted[worker]
	a.distrusted[worker] = true
	earlier := a.accepted[worker]
	delete(a.accepted, worker)
	a.mu.Unlock()
	a.log.Error("natsrun: an audited episode differs from the submitter's re-play; the submitter's is written and the worker is distrusted",
		"worker", worker, "episode", req.Index, "diff", failure.Diff)
	if caught {
		if err := a.recheck(ctx, worker, earlier); err != nil {
			return nil, err
		}
	}
	return own, nil
}

// compare re-plays req and compares the result with ep (encoded as raw,
// when known): diff is empty when they are the same, else their first
// difference; own is the re-play.
func (a *auditor) compare(ctx context.Context, req env.Request, ep *episode.Record, raw []byte) (own *episode.Record, diff string, err error) {
	own = a.local.Execute(ctx, req)
	if own.End == env.EndInterrupted && ctx.Err() != nil {
		return nil, "", fmt.Errorf("natsrun: auditing episode %d: %w", req.Index, context.Cause(ctx))
	}
	a.mu.Lock()
	a.audited++
	a.mu.Unlock()
	mine := wire.Encode(nil, own)
	// The worker's bytes as stored first: the same as ours, no need to
	// encode its record again. Otherwise its record, encoded here, decides:
	// bytes that decode to the same record are the same episode.
	if bytes.Equal(raw, mine) || bytes.Equal(wire.Encode(nil, ep), mine) {
		return own, "", nil
	}
	return own, firstDiff(ep, own), nil
}

// recheck re-plays a caught worker's episodes that were handed to the
// output unaudited: ErrAudit, naming them, when one differs.
func (a *auditor) recheck(ctx context.Context, worker string, earlier []env.Request) error {
	var lies []AuditFailure
	for _, req := range earlier {
		ep, raw, by, err := a.stored(ctx, req.Index)
		if err != nil {
			return fmt.Errorf("natsrun: re-checking episode %d of worker %s, which was caught lying: %w", req.Index, worker, err)
		}
		if by != worker {
			// Not the record that was written: that one cannot be checked.
			lies = append(lies, AuditFailure{Worker: worker, Episode: req.Index, Written: true,
				Diff: "its record was replaced by worker " + by + "'s: the one written cannot be checked"})
			continue
		}
		if _, diff, err := a.compare(ctx, req, ep, raw); err != nil {
			return err
		} else if diff != "" {
			lies = append(lies, AuditFailure{Worker: worker, Episode: req.Index, Written: true, Diff: diff})
		}
	}
	a.mu.Lock()
	a.failures = append(a.failures, lies...)
	a.mu.Unlock()
	if len(lies) == 0 {
		return nil
	}
	idxs := make([]string, len(lies))
	for i, l := range lies {
		idxs[i] = strconv.FormatInt(l.Episode, 10)
	}
	return fmt.Errorf("%w: worker %s stored episodes that differ from the submitter's re-play, and episodes %s of them were handed to the output unaudited before it was caught (episode %d: %s): the output is not the local run's; play the run again without that worker",
		ErrAudit, worker, strings.Join(idxs, ", "), lies[0].Episode, lies[0].Diff)
}

// stats returns the episodes re-played and the failures found, in the
// order found.
func (a *auditor) stats() (int64, []AuditFailure) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.audited, slices.Clone(a.failures)
}

// firstDiff describes where the episode JSON lines of got (the worker's)
// and want (the submitter's) first differ, with the text around it.
func firstDiff(got, want *episode.Record) string {
	g, _ := trajectories.AppendEpisodeJSON(nil, got, nil)
	w, _ := trajectories.AppendEpisodeJSON(nil, want, nil)
	i := 0
	for i < len(g) && i < len(w) && g[i] == w[i] {
		i++
	}
	if i == len(g) && i == len(w) {
		// Equal lines: the difference is in what the line leaves out.
		return "the records differ in a field the episode line does not show"
	}
	const around = 40
	from := max(0, i-around)
	clip := func(b []byte) string { return strconv.Quote(string(b[from:min(len(b), i+around)])) }
	return fmt.Sprintf("at byte %d of the episode line: the worker's %s, the submitter's %s", i, clip(g), clip(w))
}
