package natsrun

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// TestCheckFingerprint: a worker plays a run whose fingerprint
// is its own, and refuses one whose fingerprint differs or is missing,
// naming the scenario and both fingerprints; it computes a run input's
// fingerprint once.
func TestCheckFingerprint(t *testing.T) {
	reg, err := env.NewRegistry(elfarol.New())
	require.NoError(t, err)
	w := &Worker{cfg: WorkerConfig{Registry: reg}}
	w.execs.max = 4
	sc, err := reg.Lookup("elfarol")
	require.NoError(t, err)
	p, err := sc.Info().ParseParams(map[string]string{"agents": "5"})
	require.NoError(t, err)
	rec := record{Scenario: "elfarol", Params: p.Map(), Episodes: 1, GroupSize: 1}
	rec.Fingerprint, err = Fingerprint(sc, rec.Params, env.Limits{}, env.InvalidRule{})
	require.NoError(t, err)
	require.NoError(t, w.checkFingerprint(t.Context(), &rec))
	assert.Len(t, w.fps.m, 1)
	require.NoError(t, w.checkFingerprint(t.Context(), &rec))
	assert.Len(t, w.fps.m, 1, "computed once")

	own := rec.Fingerprint
	rec.Fingerprint = "sha256:00000000000000000000000000000000"
	err = w.checkFingerprint(t.Context(), &rec)
	require.ErrorIs(t, err, ErrFingerprint)
	assert.Contains(t, err.Error(), "scenario elfarol plays differently on this worker: the run's fingerprint is sha256:00000000000000000000000000000000, this worker's "+own)

	rec.Fingerprint = ""
	err = w.checkFingerprint(t.Context(), &rec)
	require.ErrorIs(t, err, ErrFingerprint)
	assert.Contains(t, err.Error(), "the run's fingerprint is missing")
}

// TestFingerprintStopsWithItsContext: a fingerprint whose context ends
// (the run replaced, the worker stopping) is an error that says so, and
// is not cached: the next asking computes it.
func TestFingerprintStopsWithItsContext(t *testing.T) {
	sc := elfarol.New()
	p, err := sc.Info().ParseParams(map[string]string{"agents": "5"})
	require.NoError(t, err)
	in := fingerprintInput{Scenario: "elfarol", Params: p.Map()}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var fps fingerprints
	_, err = fps.of(ctx, sc, in)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "natsrun: fingerprinting scenario elfarol: stopped before its 3 episodes were played")
	assert.Empty(t, fps.m)
	fp, err := fps.of(t.Context(), sc, in)
	require.NoError(t, err)
	want, err := Fingerprint(sc, p.Map(), env.Limits{}, env.InvalidRule{})
	require.NoError(t, err)
	assert.Equal(t, want, fp)
}
