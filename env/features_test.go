package env_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/signal"
)

// featureLog is a policy that plays the first legal action and keeps a
// copy of the features of every observation, by agent; reads says
// whether it asks for them (agents.ReadsFeatures).
type featureLog struct {
	reads bool
	mu    sync.Mutex
	seen  map[string][][]float32
}

func (f *featureLog) ReadsFeatures() bool { return f.reads }

func (f *featureLog) Act(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen[obs.Agent] = append(f.seen[obs.Agent], slices.Clone(obs.Features))
	return agents.Action{Text: obs.Legal[0]}, nil
}

// The engine writes Observation.Features for a policy that reads them,
// and only for it: at every turn they are what the stepped episode's
// Features (the path envserver serves) gives for the seat at the same
// decision; a policy that does not read them sees nil. A stepped
// episode's driver gives its house policies the same (Episode.FeaturesFor).
func TestObservationFeaturesAreTheSeatsFeatures(t *testing.T) {
	sc := signal.New()
	for seed := range uint64(20) {
		setup := hiddenSetup(t, sc, nil, seed)
		reader := &featureLog{reads: true, seen: map[string][][]float32{}}
		other := &featureLog{seen: map[string][][]float32{}}
		live := setup
		live.Policy = func(s env.Seat) agents.Policy {
			if s.ID == "speaker" {
				return reader
			}
			return other
		}
		rec := env.RunEpisode(context.Background(), live)
		require.Empty(t, rec.Err)

		ep, err := env.NewEpisode(setup)
		require.NoError(t, err)
		turns := map[string]int{}
		for !ep.Done() {
			pending := ep.Pending()
			for _, p := range pending {
				id := ep.Seats()[p.Seat].ID
				k := turns[id]
				turns[id]++
				if id != "speaker" {
					require.Less(t, k, len(other.seen[id]), "seed %d: %s turn %d", seed, id, k)
					assert.Nil(t, other.seen[id][k], "seed %d: %s reads no features", seed, id)
					continue
				}
				want := make([]float32, sc.ObservationSpace(setup.Params, p.Role).Size())
				require.NoError(t, ep.Features(p.Seat, want))
				require.Less(t, k, len(reader.seen[id]), "seed %d: %s turn %d", seed, id, k)
				assert.Equal(t, want, reader.seen[id][k], "seed %d: %s turn %d", seed, id, k)
				// A stepped episode's driver gives them as the engine does.
				o := p.Observation
				require.NoError(t, ep.FeaturesFor(other, p.Seat, &o))
				assert.Nil(t, o.Features)
				require.NoError(t, ep.FeaturesFor(reader, p.Seat, &o))
				assert.Equal(t, want, o.Features)
			}
			for _, p := range pending {
				require.NoError(t, ep.Act(p.Seat, agents.Action{Text: p.Legal[0]}))
			}
		}
		assert.Equal(t, len(reader.seen["speaker"]), turns["speaker"], "seed %d", seed)
	}
}
