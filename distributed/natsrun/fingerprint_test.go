package natsrun_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/distributed/natsrun/internal/testscen"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

// TestFingerprint: a scenario's fingerprint is the same for separately
// built copies (and for a copy with policies added), and differs for one
// that plays differently, for other parameters and for other limits.
func TestFingerprint(t *testing.T) {
	fp := func(sc env.Scenario, params map[string]string, limits env.Limits) string {
		t.Helper()
		p, err := sc.Info().ParseParams(params)
		require.NoError(t, err)
		f, err := natsrun.Fingerprint(sc, p.Map(), limits, env.InvalidRule{})
		require.NoError(t, err)
		return f
	}
	elf, err := testscen.Registry(testscen.Options{}).Lookup("elfarol")
	require.NoError(t, err)
	base := fp(elfarol.New(), nil, env.Limits{})
	assert.Regexp(t, `^sha256:[0-9a-f]{32}$`, base)
	assert.Equal(t, base, fp(elfarol.New(), nil, env.Limits{}))
	assert.Equal(t, base, fp(elf, nil, env.Limits{}), "policies added")
	assert.NotEqual(t, base, fp(capacity3(t), nil, env.Limits{}), "capacity always 3")
	assert.NotEqual(t, base, fp(elfarol.New(), map[string]string{"capacity": "3"}, env.Limits{}))
	assert.NotEqual(t, base, fp(elfarol.New(), nil, env.Limits{MaxTurns: 5}))
	assert.NotEqual(t, base, fp(tictactoe.New(), nil, env.Limits{}))

	// Another Info (its prose), the same play.
	info := *elfarol.New().Info()
	info.Doc += " "
	assert.NotEqual(t, base, fp(env.Define(&info, elfarol.New().New), nil, env.Limits{}))
}

// TestFingerprintCost: fingerprinting the built-in scenarios with their
// default parameters is cheap: a worker does it once per run.
func TestFingerprintCost(t *testing.T) {
	reg := testscen.Registry(testscen.Options{})
	for _, name := range reg.Names() {
		sc, err := reg.Lookup(name)
		require.NoError(t, err)
		p, err := sc.Info().ParseParams(nil)
		require.NoError(t, err)
		t0 := time.Now()
		_, err = natsrun.Fingerprint(sc, p.Map(), env.Limits{}, env.InvalidRule{})
		require.NoError(t, err)
		t.Logf("%s: %v", name, time.Since(t0))
	}
}

func BenchmarkFingerprint(b *testing.B) {
	reg := testscen.Registry(testscen.Options{})
	for _, name := range reg.Names() {
		b.Run(name, func(b *testing.B) {
			sc, err := reg.Lookup(name)
			require.NoError(b, err)
			p, err := sc.Info().ParseParams(nil)
			require.NoError(b, err)
			for b.Loop() {
				if _, err := natsrun.Fingerprint(sc, p.Map(), env.Limits{}, env.InvalidRule{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
