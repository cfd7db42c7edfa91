package runspec_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

// full is a spec with every field set away from its default.
func full() runspec.Spec {
	return runspec.Spec{
		Format:        runspec.Format,
		TroupeVersion: runspec.TroupeVersion,
		Scenario:      "negotiation",
		Params:        map[string]string{"rounds": "4"},
		Policies: map[string]runspec.Policy{
			"alice": {Name: "fair"},
			"bob":   {Name: "llm", Settings: json.RawMessage(`{"temperature":0.7,"model":"m"}`)},
		},
		Emit:           []string{"alice"},
		Limits:         runspec.Limits{MaxSteps: 9, MaxTurns: 8, MaxMessages: 7, Timeout: runspec.Duration(30 * time.Second)},
		OnInvalid:      runspec.Invalid{Mode: runspec.InvalidEnd, Penalty: -1, Bonus: 1},
		Allocators:     []string{"team", "individual"},
		RewardFormat:   runspec.FormatDict,
		Episodes:       10,
		GroupSize:      2,
		Seed:           3,
		RolloutIDBase:  100,
		GroupIndexBase: 5,
	}
}

func TestGoldenHash(t *testing.T) {
	s := full()
	path := filepath.Join("testdata", "full.golden")
	got := string(s.Canonical()) + "\n" + s.Hash() + "\n"
	if os.Getenv("UPDATE_GOLDEN") != "" {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), got, "the canonical form or hash changed: that breaks stored run ids (bump runspec.Format)")
}

// TestOldSpecsKeepTheirHash: specs written before the fields that record
// the merged reward and the LLM settings (testdata/before-llm.golden,
// each a canonical spec and its hash as that troupe wrote them) decode to
// the same canonical form and hash: a resume or a NATS run of them goes on.
// They read as the old defaults: a merged spec without merge_reward sums.
func TestOldSpecsKeepTheirHash(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "before-llm.golden"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Equal(t, 0, len(lines)%2)
	for i := 0; i < len(lines); i += 2 {
		s, err := runspec.DecodeBytes([]byte(lines[i]))
		require.NoError(t, err, lines[i])
		assert.Equal(t, lines[i], string(s.Canonical()))
		assert.Equal(t, lines[i+1], s.Hash(), lines[i])
		if s.MergeTurns {
			r, err := s.Resolve(runspec.Resolvers{Scenarios: scenarios.Builtin()})
			require.NoError(t, err)
			how, err := trajectories.ParseMergeReward(string(r.Output(nil).MergeReward))
			require.NoError(t, err)
			assert.Equal(t, trajectories.MergeSum, how)
		}
	}
}

// TestMergeRewardInHash: mean and last are other runs than sum, which is
// the spec without the field.
func TestMergeRewardInHash(t *testing.T) {
	s := full()
	s.MergeTurns = true
	sum := s
	sum.MergeReward = "sum"
	assert.Equal(t, s.Hash(), sum.Hash(), "sum is the field left out")
	assert.NotContains(t, string(sum.Canonical()), "merge_reward")
	seen := map[string]string{s.Hash(): "sum"}
	for _, how := range []string{"mean", "last"} {
		m := s
		m.MergeReward = how
		require.NoError(t, m.Validate())
		assert.Contains(t, string(m.Canonical()), `"merge_reward":"`+how+`"`)
		_, dup := seen[m.Hash()]
		assert.False(t, dup, how)
		seen[m.Hash()] = how
	}
}

func TestCanonicalIsCompactSorted(t *testing.T) {
	s := full()
	c := s.Canonical()
	assert.NotContains(t, string(c), " ")
	assert.NotContains(t, string(c), "\n")
	assert.True(t, strings.HasPrefix(string(c), `{"allocators":`), string(c))
	assert.Contains(t, string(c), `"settings":{"model":"m","temperature":0.7}`)
	// Decoding the canonical form gives it back.
	d, err := runspec.DecodeBytes(c)
	require.NoError(t, err)
	assert.Equal(t, c, d.Canonical())
	// And the indented form too.
	d, err = runspec.DecodeBytes(s.Indent())
	require.NoError(t, err)
	assert.Equal(t, s.Hash(), d.Hash())
}

func TestDefaultsExplicit(t *testing.T) {
	a := runspec.Spec{Scenario: "elfarol", Episodes: 3}
	b := runspec.Spec{Format: runspec.Format, TroupeVersion: runspec.TroupeVersion, Scenario: "elfarol", Episodes: 3,
		GroupSize: 1, Allocators: []string{"team"}, RewardFormat: "scalar", OnInvalid: runspec.Invalid{Mode: "pass"},
		Params: map[string]string{}, Policies: map[string]runspec.Policy{}, Emit: []string{}}
	assert.Equal(t, a.Hash(), b.Hash())
	c := a
	c.Emit = []string{"patron", "patron"}
	d := a
	d.Emit = []string{"patron"}
	assert.Equal(t, c.Hash(), d.Hash())

	// Resolved, the scenario's defaults are explicit too.
	reg := scenarios.Builtin()
	ra, err := a.Resolve(runspec.Resolvers{Scenarios: reg})
	require.NoError(t, err)
	e := a
	e.Params = map[string]string{"agents": ra.Spec.Params["agents"]}
	e.Policies = map[string]runspec.Policy{"patron": ra.Spec.Policies["patron"]}
	re, err := e.Resolve(runspec.Resolvers{Scenarios: reg})
	require.NoError(t, err)
	assert.Equal(t, ra.Hash(), re.Hash())
	assert.Len(t, ra.Spec.Params, len(ra.Info.Params))
	assert.Equal(t, ra.Info.DefaultPolicyName(), ra.Spec.Policies["patron"].Name)
}

// TestHashSensitive changes every field, one at a time, by reflection, so
// that a field added later is covered too.
func TestHashSensitive(t *testing.T) {
	base := full()
	h0 := base.Hash()
	seen := map[string]bool{h0: true}
	var walk func(v reflect.Value, path string)
	check := func(path string) {
		h := base.Hash()
		assert.False(t, seen[h], "changing %s does not change the hash (or collides)", path)
		seen[h] = true
	}
	walk = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				walk(v.Field(i), path+"."+v.Type().Field(i).Name)
			}
			return
		case reflect.String:
			old := v.String()
			v.SetString(old + "x")
			check(path)
			v.SetString(old)
		case reflect.Int, reflect.Int64:
			old := v.Int()
			v.SetInt(old + 1)
			check(path)
			v.SetInt(old)
		case reflect.Uint64:
			old := v.Uint()
			v.SetUint(old + 1)
			check(path)
			v.SetUint(old)
		case reflect.Float64:
			old := v.Float()
			v.SetFloat(old + 0.25)
			check(path)
			v.SetFloat(old)
		case reflect.Bool:
			old := v.Bool()
			v.SetBool(!old)
			check(path)
			v.SetBool(old)
		case reflect.Map:
			old := v.Interface()
			nm := reflect.MakeMap(v.Type())
			iter := v.MapRange()
			for iter.Next() {
				nm.SetMapIndex(iter.Key(), iter.Value())
			}
			nm.SetMapIndex(reflect.ValueOf("zz"), reflect.Zero(v.Type().Elem()))
			v.Set(nm)
			check(path)
			v.Set(reflect.ValueOf(old))
		case reflect.Slice:
			if v.Type().Elem().Kind() == reflect.Uint8 { // settings
				old := v.Bytes()
				v.SetBytes([]byte(`{"k":1}`))
				check(path)
				v.SetBytes(old)
				return
			}
			old := v.Interface()
			v.Set(reflect.Append(v, reflect.ValueOf("zz")))
			check(path)
			v.Set(reflect.ValueOf(old))
		case reflect.Pointer: // optional fields: set, then each of theirs
			old := v.Interface()
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
				check(path)
			}
			walk(v.Elem(), path)
			v.Set(reflect.ValueOf(old))
		default:
			t.Fatalf("field %s of kind %v: teach this test to change it", path, v.Kind())
		}
	}
	walk(reflect.ValueOf(&base).Elem(), "Spec")
	// Policies' fields sit in a map: change them directly.
	p := base.Policies["bob"]
	for _, q := range []runspec.Policy{{Name: "llm2", Settings: p.Settings}, {Name: "llm", Settings: json.RawMessage(`{"temperature":0.8}`)}} {
		base.Policies["bob"] = q
		check("Policies.bob")
	}
	base.Policies["bob"] = p
	assert.Equal(t, h0, base.Hash())
}

func TestValidateNamesField(t *testing.T) {
	cases := map[string]func(*runspec.Spec){
		"format":              func(s *runspec.Spec) { s.Format = "v0" },
		"scenario":            func(s *runspec.Spec) { s.Scenario = "" },
		"episodes":            func(s *runspec.Spec) { s.Episodes = 0 },
		"group_size":          func(s *runspec.Spec) { s.GroupSize = -1 },
		"limits.max_steps":    func(s *runspec.Spec) { s.Limits.MaxSteps = -1 },
		"limits.max_turns":    func(s *runspec.Spec) { s.Limits.MaxTurns = -1 },
		"limits.max_messages": func(s *runspec.Spec) { s.Limits.MaxMessages = -1 },
		"limits.timeout":      func(s *runspec.Spec) { s.Limits.Timeout = -1 },
		"rollout_id_base":     func(s *runspec.Spec) { s.RolloutIDBase = -1 },
		"tree.k":              func(s *runspec.Spec) { s.Tree = &runspec.Tree{K: 1, Alpha: 1} },
		"tree.alpha":          func(s *runspec.Spec) { s.Tree = &runspec.Tree{K: 2, Alpha: math.Inf(1)} },
		"group_index_base":    func(s *runspec.Spec) { s.GroupIndexBase = -1 },
		"reward_format":       func(s *runspec.Spec) { s.RewardFormat = "tensor" },
		"on_invalid.mode":     func(s *runspec.Spec) { s.OnInvalid.Mode = "explode" },
		"on_invalid":          func(s *runspec.Spec) { s.OnInvalid = runspec.Invalid{Mode: "pass", Penalty: 1} },
		"policies.alice.name": func(s *runspec.Spec) { s.Policies["alice"] = runspec.Policy{} },
		"policies.bob.settings": func(s *runspec.Spec) {
			s.Policies["bob"] = runspec.Policy{Name: "llm", Settings: json.RawMessage(`[1]`)}
		},
		"emit[0]":       func(s *runspec.Spec) { s.Emit = []string{""} },
		"allocators[1]": func(s *runspec.Spec) { s.Allocators = []string{"team", " "} },
		"seeds":         func(s *runspec.Spec) { s.Seeds = &runspec.Seeds{Scenario: 1} }, // 10 episodes in groups of 2
		"merge_reward":  func(s *runspec.Spec) { s.MergeTurns, s.MergeReward = true, "median" },
		"merge_reward ": func(s *runspec.Spec) { s.MergeReward = "mean" }, // without merge_turns
	}
	for field, mutate := range cases {
		t.Run(field, func(t *testing.T) {
			s := full()
			s.Policies = map[string]runspec.Policy{"alice": {Name: "fair"}, "bob": {Name: "fair"}}
			mutate(&s)
			err := s.Validate()
			var fe *runspec.FieldError
			require.ErrorAs(t, err, &fe)
			field = strings.TrimSpace(field)
			assert.Equal(t, field, fe.Field)
			assert.ErrorIs(t, err, runspec.ErrBadSpec)
			assert.Contains(t, err.Error(), field)
		})
	}
	s := full()
	require.NoError(t, s.Validate())
}

func TestResolveNamesField(t *testing.T) {
	reg := scenarios.Builtin()
	cases := map[string]func(*runspec.Spec){
		"scenario":      func(s *runspec.Spec) { s.Scenario = "nope" },
		"params":        func(s *runspec.Spec) { s.Params = map[string]string{"bogus": "1"} },
		"emit[0]":       func(s *runspec.Spec) { s.Emit = []string{"carol"} },
		"allocators[0]": func(s *runspec.Spec) { s.Allocators = []string{"magic"} },
		"policies":      func(s *runspec.Spec) { s.Policies = map[string]runspec.Policy{"carol": {Name: "fair"}} },
	}
	for field, mutate := range cases {
		t.Run(field, func(t *testing.T) {
			s := full()
			s.Params = nil
			s.Policies = nil
			mutate(&s)
			_, err := s.Resolve(runspec.Resolvers{Scenarios: reg})
			var fe *runspec.FieldError
			require.ErrorAs(t, err, &fe)
			field = strings.TrimSpace(field)
			assert.Equal(t, field, fe.Field)
		})
	}
	// An unknown policy, and settings for a policy that takes none.
	s := full()
	s.Params = nil
	s.Policies = map[string]runspec.Policy{"alice": {Name: "genius"}}
	_, err := s.Resolve(runspec.Resolvers{Scenarios: reg})
	assert.ErrorIs(t, err, env.ErrUnknownPolicy)
	s.Policies = map[string]runspec.Policy{"alice": {Name: "fair", Settings: json.RawMessage(`{"x":1}`)}}
	_, err = s.Resolve(runspec.Resolvers{Scenarios: reg})
	assert.ErrorContains(t, err, "takes no settings")
}

func TestDecodeStrict(t *testing.T) {
	_, err := runspec.DecodeBytes([]byte(`{"format":"troupe.runspec/v1","scenario":"elfarol","episodes":1,"bogus":1}`))
	assert.ErrorContains(t, err, `"bogus"`)
	_, err = runspec.DecodeBytes([]byte(`{"format":"troupe.runspec/v1","scenario":"elfarol","episodes":1,"limits":{"max_step":1}}`))
	assert.ErrorContains(t, err, `"max_step"`)
	_, err = runspec.DecodeBytes([]byte(`{"format":"troupe.runspec/v1","scenario":"elfarol","episodes":1} {}`))
	assert.ErrorContains(t, err, "after the spec")
	_, err = runspec.DecodeBytes([]byte(`{"scenario":"elfarol","episodes":1}`))
	assert.ErrorContains(t, err, "format")
	s, err := runspec.DecodeBytes([]byte(`{"format":"troupe.runspec/v1","scenario":"elfarol","episodes":1,"limits":{"timeout":"1m"}}`))
	require.NoError(t, err)
	assert.Equal(t, runspec.Duration(time.Minute), s.Limits.Timeout)
}

// TestResolvePlays checks that a resolved spec plays what the equivalent
// hand-written play.Config plays.
func TestResolvePlays(t *testing.T) {
	reg := scenarios.Builtin()
	s := runspec.Spec{Scenario: "tictactoe", Episodes: 6, GroupSize: 2, Seed: 9, RolloutIDBase: 4,
		Allocators: []string{"team", "individual"}, RewardFormat: "dict", Limits: runspec.Limits{MaxTurns: 5}}
	r, err := s.Resolve(runspec.Resolvers{Scenarios: reg})
	require.NoError(t, err)
	var a bytes.Buffer
	_, err = play.Run(context.Background(), r.Config, r.Output(trajectories.NewJSONLWriter(&a, trajectories.Flat)))
	require.NoError(t, err)

	sc, err := reg.Lookup("tictactoe")
	require.NoError(t, err)
	info := sc.Info()
	params, err := info.ParseParams(nil)
	require.NoError(t, err)
	policy, _, err := info.AssignPolicies(env.PolicyRequest{Scenario: sc, Params: params}, nil, nil)
	require.NoError(t, err)
	var b bytes.Buffer
	_, err = play.Run(context.Background(), play.Config{
		Play:          env.Play{Scenario: sc, Params: params, Policy: policy, Limits: env.Limits{MaxTurns: 5}},
		Episodes:      6,
		GroupSize:     2,
		Seed:          9,
		RolloutIDBase: 4,
	}, &trajectories.Output{Sink: trajectories.NewJSONLWriter(&b, trajectories.Flat),
		Allocators: r.Allocators, Format: trajectories.RewardDict})
	require.NoError(t, err)
	require.NotZero(t, a.Len())
	assert.Equal(t, b.String(), a.String())
}

func TestResolveMakers(t *testing.T) {
	reg := scenarios.Builtin()
	var got []env.PolicyRequest
	s := runspec.Spec{Scenario: "tictactoe", Episodes: 1, Seed: 5,
		Policies: map[string]runspec.Policy{"x": {Name: "mine", Settings: json.RawMessage(`{"a": 1}`)}}}
	r, err := s.Resolve(runspec.Resolvers{Scenarios: reg, Parallel: []string{"mine"},
		Policies: func(req env.PolicyRequest) (agents_Policy, error) {
			got = append(got, req)
			if req.Name != "mine" {
				return nil, env.ErrUnknownPolicy
			}
			return randomPolicy(), nil
		}})
	require.NoError(t, err)
	assert.True(t, r.Config.ParallelPolicies)
	require.Len(t, got, 2)
	assert.Equal(t, `{"a":1}`, string(got[0].Settings))
	assert.Equal(t, uint64(5), got[0].Seed)
	assert.Equal(t, map[string]string{"x": "mine", "o": r.Info.DefaultPolicyName()}, r.PolicyNames)
	_, err = s.Resolve(runspec.Resolvers{Scenarios: reg})
	assert.True(t, errors.Is(err, env.ErrUnknownPolicy), "%v", err)
}

// TestSeedsFixTheRequests: without Seeds a run's seeds derive from Seed
// (play.Config.Requests); with them every episode plays the scenario
// seed, and its policy seed derives from Policy and its position, else
// from the scenario seed and its rollout_id: the rollout service's rules.
func TestSeedsFixTheRequests(t *testing.T) {
	reg := scenarios.Builtin()
	spec := runspec.Spec{Scenario: "tictactoe", Episodes: 3, GroupSize: 3, Seed: 5, RolloutIDBase: 40, GroupIndexBase: 7}
	r, err := spec.Resolve(runspec.Resolvers{Scenarios: reg})
	require.NoError(t, err)
	assert.Equal(t, r.Config.Requests(), r.Requests())

	policy := uint64(99)
	for _, sd := range []*runspec.Seeds{{Scenario: 11}, {Scenario: 11, Policy: &policy}} {
		placed, err := r.At(100, 8, sd)
		require.NoError(t, err)
		assert.Equal(t, int64(100), placed.Spec.RolloutIDBase)
		assert.Equal(t, int64(40), r.Spec.RolloutIDBase, "At leaves the run it was given alone")
		assert.NotEqual(t, r.Hash(), placed.Hash())
		reqs := placed.Requests()
		require.Len(t, reqs, 3)
		for i, req := range reqs {
			assert.Equal(t, int64(i), req.Index)
			assert.Equal(t, int64(100+i), req.RolloutID)
			assert.Equal(t, int64(8), req.GroupIndex, "one group")
			assert.Equal(t, uint64(11), req.Seed)
			want := seeds.Mix(11, 2, uint64(req.RolloutID))
			if sd.Policy != nil {
				want = seeds.Mix(policy, uint64(i))
			}
			assert.Equal(t, want, req.PolicySeed)
		}
		// The placed spec is data: decoded again it resolves to the same
		// run and the same requests.
		back, err := runspec.DecodeBytes(placed.Spec.Indent())
		require.NoError(t, err)
		rb, err := back.Resolve(runspec.Resolvers{Scenarios: reg})
		require.NoError(t, err)
		assert.Equal(t, placed.Hash(), rb.Hash())
		assert.Equal(t, reqs, rb.Requests())
	}

	_, err = r.At(-1, 0, nil)
	assert.ErrorIs(t, err, runspec.ErrBadSpec)
	_, err = r.At(math.MaxInt64-1, 0, nil)
	var fe *runspec.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "rollout_id_base", fe.Field, "the episodes' ids would overflow")
	grouped := spec
	grouped.GroupSize = 1
	rg, err := grouped.Resolve(runspec.Resolvers{Scenarios: reg})
	require.NoError(t, err)
	_, err = rg.At(0, 0, &runspec.Seeds{})
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "seeds", fe.Field, "fixed seeds are one group's")
}
