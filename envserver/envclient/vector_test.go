package envclient_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/envserver/envclient"
)

func sampleBatch(final bool, dtype int, credit bool) *envclient.Batch {
	b := &envclient.Batch{NumEnvs: 2, NumAgents: 2, ObsDim: 3, StateDim: 1, NumActions: 2, ObsDType: dtype, Final: final,
		Rewards: []float32{1, -1, 0, 0.5}, State: []float32{0.25, 1},
		Masks: []byte{1, 0, 0, 0, 1, 1, 0, 0}, Acting: []byte{1, 0, 1, 0}, Terminated: []byte{1, 0}, Truncated: []byte{0, 0},
		Started: []envclient.Started{{Env: 0, Seed: 1 << 60, RolloutID: -3}},
		Ended:   []envclient.Ended{{Env: 0, Status: envclient.StatusCompleted, RolloutID: 7, Team: 0.125}}}
	if dtype == envclient.DTypeUint8 {
		b.ObsBytes = []byte("abcdefghijkl")
	} else {
		b.Obs = []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	}
	if credit {
		b.NumCredit = 1
		b.Ended[0].Credit = []float64{1, 0.5, 0.25, -1, -0.5, 1e-9}
	}
	if final {
		b.Ended[0].FinalState = []float32{9}
		if dtype == envclient.DTypeUint8 {
			b.Ended[0].FinalObsBytes = []byte("xyzuvw")
		} else {
			b.Ended[0].FinalObs = []float32{6, 5, 4, 3, 2, 1}
		}
	}
	return b
}

// TestBatchRoundTrip: a batch frame decodes to what was encoded.
func TestBatchRoundTrip(t *testing.T) {
	for _, final := range []bool{false, true} {
		for _, dtype := range []int{envclient.DTypeFloat32, envclient.DTypeUint8} {
			b := sampleBatch(final, dtype, final && dtype == envclient.DTypeUint8)
			data := envclient.AppendBatch(nil, b)
			assert.Zero(t, len(data)%8)
			got, err := envclient.DecodeBatch(data)
			require.NoError(t, err)
			assert.Equal(t, b, got)
			// Every shorter or longer frame is refused.
			for n := range len(data) {
				_, err := envclient.DecodeBatch(data[:n])
				require.ErrorIs(t, err, envclient.ErrFrame, "%d bytes", n)
			}
			_, err = envclient.DecodeBatch(append(data, 0))
			require.ErrorIs(t, err, envclient.ErrFrame)
		}
	}
}

// TestActionsRoundTrip: an actions frame decodes to what was encoded, and
// a wrong one is refused.
func TestActionsRoundTrip(t *testing.T) {
	a := envclient.Actions{NumEnvs: 2, NumAgents: 3, Actions: []int32{0, -1, 5, 1 << 30, -7, 2}}
	data := envclient.AppendActions(nil, a)
	var got envclient.Actions
	require.NoError(t, envclient.DecodeActions(data, &got))
	assert.Equal(t, a, got)
	for _, bad := range [][]byte{data[:15], data[:len(data)-1], append(data, 0), append([]byte("TVB1"), data[4:]...)} {
		require.ErrorIs(t, envclient.DecodeActions(bad, &got), envclient.ErrFrame)
	}
	flagged := append([]byte(nil), data...)
	flagged[12] = 1
	require.ErrorContains(t, envclient.DecodeActions(flagged, &got), "flags")
}

// FuzzDecodeActions: the server's decoder never panics, and what it
// accepts encodes back to the same bytes.
func FuzzDecodeActions(f *testing.F) {
	f.Add(envclient.AppendActions(nil, envclient.Actions{NumEnvs: 2, NumAgents: 2, Actions: []int32{0, -1, 3, 4}}))
	f.Add([]byte("TVA1\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var a envclient.Actions
		if err := envclient.DecodeActions(data, &a); err != nil {
			return
		}
		assert.Equal(t, data, envclient.AppendActions(nil, a))
	})
}

// FuzzDecodeBatch: the client's decoder never panics, and what it accepts
// encodes back to the same bytes.
func FuzzDecodeBatch(f *testing.F) {
	for _, final := range []bool{false, true} {
		for _, credit := range []bool{false, true} {
			f.Add(envclient.AppendBatch(nil, sampleBatch(final, envclient.DTypeFloat32, credit)))
			f.Add(envclient.AppendBatch(nil, sampleBatch(final, envclient.DTypeUint8, credit)))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := envclient.DecodeBatch(data)
		if err != nil {
			return
		}
		assert.Equal(t, data, envclient.AppendBatch(nil, b))
	})
}
