package credit_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

func TestEveryBuiltinIsMadeByItsNameWithDefaults(t *testing.T) {
	r := credit.Builtin()
	for _, name := range r.Names() {
		a, err := r.Parse(name)
		require.NoError(t, err, name)
		assert.Equal(t, name, a.Name(), "with its defaults an allocator is called by its bare name")
		assert.NotEmpty(t, r.Doc(name))
	}
}

func TestNamesAreCanonicalSpecsThatParseBack(t *testing.T) {
	r := credit.Builtin()
	for spec, want := range map[string]string{
		"grpo:eps=0.01,key=role":                         "grpo:eps=0.01,key=role",
		"grpo(key=agent+role;eps=1e-06)":                 "grpo:key=role+agent",
		"rloo:base=individual":                           "rloo:base=individual",
		"dr-grpo:key=scenario+group+role":                "dr-grpo",
		"rae:alpha=0.9,state=" + t.TempDir() + "/s.json": "rae:alpha=0.9",
		"discount:gamma=0.5":                             "discount:gamma=0.5",
		"discount:of=rloo(key=role),unit=step":           "discount:of=rloo(key=role),unit=step",
		"discount:of=discount(of=rloo(key=role))":        "discount:of=discount(of=rloo(key=role))",
		"difference:c=average,sim=resimulate":            "difference:c=average,sim=resimulate",
		"difference:alternatives=16":                     "difference",
		"leave-one-out:mode=null,budget=10,parallel=1":   "leave-one-out:budget=10,mode=null",
		"shapley:max-agents=8":                           "shapley:max-agents=8",
		"shapley-mc:permutations=32,seed=4,mode=null":    "shapley-mc:mode=null,permutations=32,seed=4",
		"coma:samples=3":                                 "coma:samples=3",
	} {
		a, err := r.Parse(spec)
		require.NoError(t, err, spec)
		require.Equal(t, want, a.Name(), spec)
		again, err := r.Parse(a.Name())
		require.NoError(t, err, a.Name())
		assert.Equal(t, want, again.Name(), "the name parses back to the same allocator")
	}
}

func TestParseErrorsNameWhatIsWrong(t *testing.T) {
	r := credit.Builtin()
	for spec, want := range map[string]string{
		"nope":                      "nope",
		"":                          "no allocator name",
		"team:":                     "nothing after ':'",
		"team:x=1":                  "team takes no parameters",
		"grpo:alpha=1":              `grpo has no parameter "alpha" (it takes eps, key, base)`,
		"grpo:eps":                  `"eps" is not key=value`,
		"grpo:eps=":                 "eps has an empty value",
		"grpo:eps=1,eps=2":          "eps given twice",
		"grpo:eps=-1":               `eps="-1": want a number`,
		"grpo:key=role+role":        `group key "role+role"`,
		"grpo:key=seat":             `group key "seat"`,
		"grpo:base=mine":            "one of team, individual, auto",
		"rae:alpha=1":               "[0, 1)",
		"discount:gamma=2":          `gamma="2"`,
		"discount:of=nope":          `unknown allocator "nope"`,
		"discount:of=rloo(key=role": "unbalanced",
		"rloo(key=role":             "without a closing",
		"shapley:max-agents=21":     "max-agents",
		"shapley-mc:permutations=0": "permutations",
		"difference:c=median":       "one of null, average",
		"leave-one-out:mode=gone":   "one of absent, null",
		"coma:sim=replay":           "one of frozen, resimulate",
		"coma:parallel=0":           "parallel",
		"shapley-mc:seed=-1":        "non-negative",
		"shapley:budget=1.5":        "budget",
		"rloo:key=role)":            "unbalanced",
	} {
		_, err := r.Parse(spec)
		require.Error(t, err, spec)
		assert.Contains(t, err.Error(), want, spec)
		if spec == "nope" || spec == "discount:of=nope" {
			assert.ErrorIs(t, err, credit.ErrUnknownAllocator, spec)
		} else {
			assert.ErrorIs(t, err, credit.ErrBadAllocatorParam, spec)
		}
	}
}

func TestUsageDocumentsEveryAllocatorAndParameter(t *testing.T) {
	r := credit.Builtin()
	var b strings.Builder
	require.NoError(t, r.Usage(&b))
	for _, name := range r.Names() {
		assert.Contains(t, b.String(), "\n"+name+"\n")
		e, ok := r.Entry(name)
		require.True(t, ok)
		for _, p := range e.Params {
			head := "    " + p.Name
			if p.Default != "" {
				head += "=" + p.Default
			}
			assert.Contains(t, b.String(), head+"\n", "%s %s", name, p.Name)
		}
	}
	for line := range strings.SplitSeq(b.String(), "\n") {
		assert.LessOrEqual(t, len([]rune(line)), 80, line)
	}
}

func TestRegistryEntriesAreChecked(t *testing.T) {
	mk := func(map[string]string) (trajectories.Allocator, error) { return credit.Team{}, nil }
	for _, e := range []credit.Entry{
		{Name: "", Make: mk},
		{Name: "a:b", Make: mk},
		{Name: "x"},
		{Name: "x", Make: mk, Params: []credit.Param{{Name: "p"}, {Name: "p"}}},
	} {
		_, err := credit.NewRegistry(e)
		assert.Error(t, err, e.Name)
	}
	_, err := credit.NewRegistry(credit.Entry{Name: "x", Make: mk}, credit.Entry{Name: "x", Make: mk})
	assert.ErrorContains(t, err, `two allocators are called "x"`)
	_, err = credit.Builtin().With(credit.Entry{Name: "team", Make: mk})
	assert.ErrorContains(t, err, `"team"`)
}

func TestWithExtendsACopyAndWrappersSeeTheExtension(t *testing.T) {
	base := credit.Builtin()
	mine, err := base.With(credit.Entry{
		Name: "half", Doc: "G/2",
		Make: func(map[string]string) (trajectories.Allocator, error) { return half{}, nil },
	})
	require.NoError(t, err)
	_, err = base.Parse("half")
	require.ErrorIs(t, err, credit.ErrUnknownAllocator, "the original registry is unchanged")

	d, err := mine.Parse("discount:of=half,gamma=0.5")
	require.NoError(t, err, "discount finds the allocator in the registry it is made from")
	got, err := allocate(d, agentEpisode(8, nil, seats("r"), []int{2}))
	require.NoError(t, err)
	assert.Equal(t, []float64{2, 4}, got[0])
}

type half struct{}

func (half) Name() string { return "half" }
func (half) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	for e, ep := range group {
		for s := range ep.Samples {
			dst[e][s] = ep.Score.Team / 2
		}
	}
	return nil
}

func TestRAEStateParameterLoadsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rae.json")
	a, err := credit.Builtin().Parse("rae:state=" + path)
	require.NoError(t, err)
	_, err = allocate(a, agentEpisode(10, nil, seats("r"), []int{1}))
	require.NoError(t, err)
	require.NoError(t, a.(interface{ Close() error }).Close())

	b, err := credit.Builtin().Parse("rae:state=" + path)
	require.NoError(t, err)
	v, n, ok := b.(*credit.RAE).Baseline("test", "r")
	require.True(t, ok)
	assert.InDelta(t, 0.05*10, v, 1e-12)
	assert.Equal(t, int64(1), n)
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"team", "grpo:eps=0.1,key=role", "discount:of=rloo(key=role;base=team),gamma=0.5", "shapley-mc(permutations=3)", "a:b=(", "x:=,", ")"} {
		f.Add(s)
	}
	r := credit.Builtin()
	f.Fuzz(func(t *testing.T, spec string) {
		if strings.Contains(spec, "state=") {
			t.Skip("would touch the file system")
		}
		a, err := r.Parse(spec)
		if err != nil {
			if !errors.Is(err, credit.ErrBadAllocatorParam) && !errors.Is(err, credit.ErrUnknownAllocator) {
				t.Fatalf("Parse(%q): error without a sentinel: %v", spec, err)
			}
			return
		}
		again, err := r.Parse(a.Name())
		if err != nil || again.Name() != a.Name() {
			t.Fatalf("Parse(%q) = %s, which does not parse back: %v", spec, a.Name(), err)
		}
	})
}

func TestParseDefaultingSim(t *testing.T) {
	reg := credit.Builtin()
	for spec, want := range map[string]string{
		// The name is what the user typed: the key of a dict reward.
		"difference":                 "difference",
		"shapley-mc:permutations=20": "shapley-mc:permutations=20",
		"difference:sim=resimulate":  "difference",
		"difference:sim=frozen":      "difference:sim=frozen",
		"team":                       "team",
	} {
		a, err := reg.ParseDefaultingSim(spec, true)
		if !assert.NoError(t, err, spec) {
			continue
		}
		assert.Equal(t, want, a.Name(), spec)
		if d, ok := a.(credit.Difference); ok {
			assert.Equal(t, spec != "difference:sim=frozen", d.Sim.Resimulate, "%s re-simulates as the scenario asks, unless told otherwise", spec)
		}
		if m, ok := a.(credit.MonteCarloShapley); ok {
			assert.True(t, m.Sim.Resimulate, spec)
		}
		plain, err := reg.ParseDefaultingSim(spec, false)
		require.NoError(t, err)
		direct, err := reg.Parse(spec)
		require.NoError(t, err)
		assert.Equal(t, direct.Name(), plain.Name(), "without the scenario's request nothing changes")
	}
	_, err := reg.ParseDefaultingSim("nonsense", true)
	assert.ErrorIs(t, err, credit.ErrUnknownAllocator)
	// A wrapper cannot take sim= itself: the user must say it inside.
	_, err = reg.ParseDefaultingSim("discount:gamma=0.5,of=leave-one-out", true)
	assert.ErrorIs(t, err, credit.ErrBadAllocatorParam)
	assert.ErrorContains(t, err, "give sim= explicitly")
	a, err := reg.ParseDefaultingSim("discount:gamma=0.5,of=leave-one-out(sim=resimulate)", true)
	require.NoError(t, err)
	assert.Contains(t, a.Name(), "sim=resimulate")
}

func TestSplitSpecs(t *testing.T) {
	assert.Equal(t, []string{"team", "equal-split"}, credit.SplitSpecs("team, equal-split"))
	assert.Equal(t, []string{"rae:alpha=0.9,state=r.json", "team"}, credit.SplitSpecs("rae:alpha=0.9,state=r.json,team"))
	assert.Equal(t, []string{"discount:of=rloo(key=role,base=team),gamma=0.9", "difference"},
		credit.SplitSpecs("discount:of=rloo(key=role,base=team),gamma=0.9,difference"))
	assert.Equal(t, []string{"team", ""}, credit.SplitSpecs("team,"), "an empty piece is kept for the caller to reject")
}
