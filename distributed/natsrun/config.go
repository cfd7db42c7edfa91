package natsrun

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Config is the shape of the JetStream objects a deployment shares. Every
// submitter and worker of one deployment must use the same Prefix; the
// other fields are applied by whoever opens the deployment last, so keep
// them equal too.
type Config struct {
	// Prefix names the deployment's subjects (PREFIX.work.>, ...), streams
	// (PREFIX_WORK, ...) and buckets; several deployments can share one
	// NATS account under different prefixes. Lower-case letters, digits
	// and '_', starting with a letter. Default "troupe".
	Prefix string
	// Replicas is the replication factor of every stream and bucket: 1 on
	// one server, 3 on a 3-node cluster. Default 1.
	Replicas int
	// AckWait is how long a worker may hold an episode without a sign of
	// life (workers send one every AckWait/3) before it is handed to
	// another worker. Default 30s.
	AckWait time.Duration
	// MaxDeliver is how many times an episode is handed out unfinished
	// before the worker that gets it next records it as failed instead of
	// playing it. Default 5.
	MaxDeliver int
	// MaxAckPending bounds the episodes handed out and not yet finished,
	// over all workers: the back-pressure that keeps a fleet from pulling
	// more than it plays. Default 1024.
	MaxAckPending int
	// Ahead is how many requests a submitter keeps queued, counting from
	// the episode it is waiting for: 1 queues only that one. Default
	// 2*MaxAckPending.
	Ahead int
	// DuplicateWindow is how long a message id is remembered, so that a
	// re-published request or result is dropped. Default 10 minutes.
	DuplicateWindow time.Duration
	// ResultsMaxAge is how long a finished episode is kept for a submitter
	// that has not collected it (it died and has not re-attached). A run
	// that completes removes its own results at once. Default 7 days.
	ResultsMaxAge time.Duration
	// ChunkSize is the largest message a result is split into; it is
	// capped by the server's max_payload. Default 512 KiB.
	ChunkSize int
	// KeepResults keeps a completed run's results and state instead of
	// purging them: a later Run with the same id then writes the same
	// output again without playing anything.
	KeepResults bool
	// Batch is how many episodes' requests one work message carries, at
	// most: a worker plays them one after the other in one slot. Scripted
	// episodes (microseconds of game) cost the servers a fraction per
	// episode with 16 or more; episodes that wait on an LLM want 1, so
	// that every one goes to a free slot. 0, the default, chooses per
	// run: 1 when a role plays an LLM (the run's Spec names an LLM
	// endpoint), else AutoBatch. At most 1024.
	Batch int
	// LeaseTTL is how long a submitter's hold on a run outlives its last
	// renewal (it renews every LeaseTTL/3). A second submitter on a run
	// whose holder still renews is refused (ErrRunBusy); one whose holder
	// went silent for LeaseTTL (it was killed) takes the run over. Default
	// 15s.
	LeaseTTL time.Duration
	// AuditRate is the share of each worker's episodes the submitter
	// re-plays in its own process to check them, from 0 (none, the
	// default) to 1 (all), drawn independently per episode and out of
	// the workers' sight; a worker caught storing an episode that differs
	// is distrusted (see ErrAudit). A worker that lies on k episodes is
	// caught with probability 1 − (1 − AuditRate)^k (AuditProbability).
	// It costs the submitter the re-played episodes' CPU. A submitter's
	// setting: workers ignore it.
	AuditRate float64
}

// ErrBadConfig is wrapped by errors about a Config, a run id, or options.
var ErrBadConfig = errors.New("natsrun: bad configuration")

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// withDefaults returns c with zero fields set to their defaults, or an
// error naming the first bad field.
func (c Config) withDefaults() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = "troupe"
	}
	if !prefixRE.MatchString(c.Prefix) {
		return c, fmt.Errorf("%w: prefix %q: want lower-case letters, digits and '_', starting with a letter, at most 32", ErrBadConfig, c.Prefix)
	}
	setDefault(&c.Replicas, 1)
	setDefault(&c.AckWait, 30*time.Second)
	setDefault(&c.MaxDeliver, 5)
	setDefault(&c.MaxAckPending, 1024)
	setDefault(&c.Ahead, 2*c.MaxAckPending)
	setDefault(&c.DuplicateWindow, 10*time.Minute)
	setDefault(&c.ResultsMaxAge, 7*24*time.Hour)
	setDefault(&c.ChunkSize, 512<<10)
	setDefault(&c.LeaseTTL, 15*time.Second)
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return c, fmt.Errorf("%w: replicas %d: want 1 to 5", ErrBadConfig, c.Replicas)
	case c.AckWait < 100*time.Millisecond:
		return c, fmt.Errorf("%w: ack wait %v: want at least 100ms", ErrBadConfig, c.AckWait)
	case c.MaxDeliver < 1:
		return c, fmt.Errorf("%w: max deliver %d: want at least 1", ErrBadConfig, c.MaxDeliver)
	case c.MaxAckPending < 1:
		return c, fmt.Errorf("%w: max ack pending %d: want at least 1", ErrBadConfig, c.MaxAckPending)
	case c.Ahead < 1:
		return c, fmt.Errorf("%w: ahead %d: want at least 1", ErrBadConfig, c.Ahead)
	case c.DuplicateWindow < time.Second:
		return c, fmt.Errorf("%w: duplicate window %v: want at least 1s", ErrBadConfig, c.DuplicateWindow)
	case c.ResultsMaxAge < c.DuplicateWindow:
		return c, fmt.Errorf("%w: results max age %v is shorter than the duplicate window %v", ErrBadConfig, c.ResultsMaxAge, c.DuplicateWindow)
	case c.ChunkSize < 1024:
		return c, fmt.Errorf("%w: chunk size %d: want at least 1024 bytes", ErrBadConfig, c.ChunkSize)
	case c.Batch < 0 || c.Batch > maxBatch:
		return c, fmt.Errorf("%w: batch %d: want 0 (chosen per run) or 1 to %d", ErrBadConfig, c.Batch, maxBatch)
	case !(c.AuditRate >= 0 && c.AuditRate <= 1): // NaN too
		return c, fmt.Errorf("%w: audit rate %g: want 0 (no audit) to 1 (every episode)", ErrBadConfig, c.AuditRate)
	case c.LeaseTTL < 300*time.Millisecond:
		return c, fmt.Errorf("%w: lease ttl %v: want at least 300ms", ErrBadConfig, c.LeaseTTL)
	}
	return c, nil
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// AutoBatch is the batch a run without LLM policies gets when
// Config.Batch is 0: with 16 the servers' share per scripted episode is
// about half of one message per episode (docs/scaling.md).
const AutoBatch = 16

// batchFor resolves Config.Batch for a run with spec.
func (c Config) batchFor(spec Spec) int {
	switch {
	case c.Batch > 0:
		return c.Batch
	case spec.LLMEndpoint != "":
		return 1
	}
	return AutoBatch
}

// maxBatch bounds Config.Batch.
const maxBatch = 1024

// names are the subjects, streams, buckets and consumers of a deployment.
type names struct {
	prefix      string
	workStream  string // work queue of episode requests
	resStream   string // finished episodes, chunked
	runsBucket  string // run specs and done markers
	aliveBucket string // worker presence
}

func newNames(prefix string) names {
	up := strings.ToUpper(prefix)
	return names{
		prefix:      prefix,
		workStream:  up + "_WORK",
		resStream:   up + "_RESULTS",
		runsBucket:  up + "_RUNS",
		aliveBucket: up + "_WORKERS",
	}
}

// consumer names the durable consumer of one run's requests: each run has
// its own, with the run's ack wait and back-pressure, so that no run's
// settings reconfigure another's.
func (n names) consumer(run string) string { return "run_" + run }

// runOfConsumer is the run a consumer name belongs to.
func (n names) runOfConsumer(name string) (string, bool) {
	run, ok := strings.CutPrefix(name, "run_")
	return run, ok && runIDRE.MatchString(run)
}

// workSubject is the subject of a work message holding requests of the
// episodes first to last (not necessarily all of them).
func (n names) workSubject(run string, first, last int64) string {
	return n.prefix + ".work." + run + "." + strconv.FormatInt(first, 10) + "." + strconv.FormatInt(last, 10)
}

func (n names) workFilter(run string) string { return n.prefix + ".work." + run + ".>" }

func (n names) resultSubject(run string, idx int64, attempt string) string {
	return n.prefix + ".result." + run + "." + strconv.FormatInt(idx, 10) + "." + attempt
}

func (n names) resultFilter(run string) string { return n.prefix + ".result." + run + ".>" }

// parseWorkSubject splits PREFIX.work.RUN.FIRST.LAST.
func (n names) parseWorkSubject(subject string) (run string, first, last int64, ok bool) {
	rest, ok := strings.CutPrefix(subject, n.prefix+".work.")
	if !ok {
		return "", 0, 0, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || !runIDRE.MatchString(parts[0]) {
		return "", 0, 0, false
	}
	first, err1 := strconv.ParseInt(parts[1], 10, 64)
	last, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || first < 0 || last < first || last-first >= maxBatch {
		return "", 0, 0, false
	}
	return parts[0], first, last, true
}

func specKey(run string) string { return run + ".spec" }

// specFilter matches every run's spec key.
const specFilter = "*.spec"

// runOfSpecKey is the run a spec key belongs to.
func runOfSpecKey(key string) (string, bool) {
	run, ok := strings.CutSuffix(key, ".spec")
	return run, ok && runIDRE.MatchString(run)
}

// leaseKey holds the lease of the submitter collecting the run.
func leaseKey(run string) string { return run + ".lease" }

// cancelKey marks a run cancelled (troupe runs cancel): its submitter
// stops, and no submitter re-attaches until it is purged.
func cancelKey(run string) string { return run + ".cancelled" }

// runRef names one incarnation of a run: its id and the revision of its
// spec in the runs bucket. A run purged and started again under the same
// id gets a new revision, so nothing of the old one (a done marker stored
// by a straggling worker) can be taken for the new one's.
type runRef struct {
	id, rev string
}

func (r runRef) String() string { return r.id + "@" + r.rev }

func (r runRef) doneKey(idx int64) string {
	return r.id + "." + r.rev + ".done." + strconv.FormatInt(idx, 10)
}

func (r runRef) doneFilter() string { return r.id + "." + r.rev + ".done.*" }

// errorKey holds the last error a worker hit storing an episode, so that a
// request given up after MaxDeliver says why.
func (r runRef) errorKey(idx int64) string {
	return r.id + "." + r.rev + ".error." + strconv.FormatInt(idx, 10)
}

// refusedKey records that a worker cannot play the run, and why.
func (r runRef) refusedKey(worker string) string { return r.id + "." + r.rev + ".refused." + worker }

func (r runRef) refusedFilter() string { return r.id + "." + r.rev + ".refused.*" }

// parseDoneKey returns the episode index of a doneKey.
func (r runRef) parseDoneKey(key string) (int64, bool) {
	num, ok := strings.CutPrefix(key, r.id+"."+r.rev+".done.")
	if !ok {
		return 0, false
	}
	idx, err := strconv.ParseInt(num, 10, 64)
	return idx, err == nil && idx >= 0
}

var runIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CheckRunID reports whether id can name a run: 1 to 64 letters, digits,
// '_' or '-' (it becomes a subject token and a key prefix).
func CheckRunID(id string) error {
	if !runIDRE.MatchString(id) {
		return fmt.Errorf("%w: run id %q: want 1 to 64 letters, digits, '_' or '-'", ErrBadConfig, id)
	}
	return nil
}
