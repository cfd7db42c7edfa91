package durable_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/trajectories/durable"
)

// FuzzRead reads arbitrary progress files: never a panic, and a progress
// that reads back writes and reads back the same.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"format":"troupe.progress/v1","spec_hash":"ab","spec":{"episodes":3},"files":[{"kind":"samples","path":"a.jsonl","layout":"flat","bytes":10}],"groups":1,"episodes":1,"samples":4,"allocator_states":null,"complete":false}`))
	f.Add([]byte(`{"format":"troupe.progress/v1","files":[]}`))
	f.Add([]byte(`{"format":"troupe.progress/v2","spec_hash":"ab","spec":{"episodes":3},"files":[{"kind":"samples","path":"a.jsonl","layout":"flat","bytes":10,"digest":"highwayhash256:` + strings.Repeat("0a", 32) + `"}],"groups":1,"episodes":1,"samples":4,"allocator_states":null,"complete":false}`))
	f.Add([]byte(`{"format":"troupe.progress/v3","spec_hash":"ab","spec":{"episodes":3},"files":[{"kind":"samples","path":"a.jsonl","layout":"flat","bytes":10,"digest":"highwayhash256:` + strings.Repeat("0a", 32) + `"}],"groups":1,"episodes":1,"samples":4,"allocator_states":[{"allocator":"rae","state":{"version":1,"baselines":[]}}],"allocator_states_at_start":[{"allocator":"rae","state":{"version":1,"baselines":[]}}],"complete":false}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[]`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "p.json")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		p, err := durable.Read(nil, path)
		if err != nil {
			return
		}
		require.NoError(t, p.Write(nil, path))
		again, err := durable.Read(nil, path)
		require.NoError(t, err)
		require.Equal(t, p.SpecHash, again.SpecHash)
		require.Equal(t, p.Files, again.Files)
		require.Equal(t, p.Groups, again.Groups)
		require.Equal(t, len(p.StartStates), len(again.StartStates))
		require.NoError(t, again.Check(p))
	})
}
