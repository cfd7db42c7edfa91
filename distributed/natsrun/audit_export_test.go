package natsrun

import (
	"context"
	"log/slog"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
)

// SetAuditKey keys the audit draws of the runs c submits with key, in
// place of a secret drawn per run: the tests' draws are then known.
func SetAuditKey(c *Client, key []byte) { c.auditKey = key }

// Auditor is the audit of one run's episodes, played by local.
type Auditor struct{ a *auditor }

// NewAuditor is the auditor a run at rate, with key, gets; stored reads
// back what the workers stored.
func NewAuditor(rate float64, key []byte, local *env.LocalExecutor, stored func(context.Context, int64) (*episode.Record, []byte, string, error)) (*Auditor, error) {
	a, err := newAuditor(rate, key, local, stored, slog.New(slog.DiscardHandler))
	return &Auditor{a}, err
}

// Check is what the collector does with episode ep of req, stored by
// worker (encoded as raw; nil: unknown).
func (a *Auditor) Check(ctx context.Context, req env.Request, worker string, ep *episode.Record, raw []byte) (*episode.Record, error) {
	return a.a.check(ctx, req, worker, ep, raw)
}

// Picked reports whether the draw audits episode idx.
func (a *Auditor) Picked(idx int64) bool { return a.a.picked(idx) }

// Rate is the probability that an episode is drawn.
func (a *Auditor) Rate() float64 { return a.a.rate() }

// Stats are the episodes re-played and the failures found.
func (a *Auditor) Stats() (int64, []AuditFailure) { return a.a.stats() }
