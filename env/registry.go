package env

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// ErrUnknownScenario is returned by Registry.Lookup for a name it does not
// hold.
var ErrUnknownScenario = errors.New("unknown scenario")

// Registry maps scenario names to scenarios. Build one with NewRegistry; it
// is read-only after that and safe for concurrent use.
type Registry struct {
	byName map[string]Scenario
}

// NewRegistry validates each scenario's Info and returns a registry of
// them. Two scenarios with the same name are an error.
func NewRegistry(scenarios ...Scenario) (*Registry, error) {
	r := &Registry{byName: make(map[string]Scenario, len(scenarios))}
	for _, s := range scenarios {
		info := s.Info()
		if err := info.Validate(); err != nil {
			return nil, err
		}
		if _, dup := r.byName[info.Name]; dup {
			return nil, fmt.Errorf("%w: two scenarios are called %q: give one another Info.Name (a name of your own, such as your module's name before it, cannot clash with a scenario troupe adds later)", ErrBadScenario, info.Name)
		}
		r.byName[info.Name] = s
	}
	return r, nil
}

// Lookup returns the scenario called name. An unknown name is an error
// that lists the known ones.
func (r *Registry) Lookup(name string) (Scenario, error) {
	if s, ok := r.byName[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("%w %q%s (known: %s)", ErrUnknownScenario, name, didYouMean(name, r.Names()), strings.Join(r.Names(), ", "))
}

// didYouMean returns `; did you mean "x"?` naming the known names closest
// to name (a typo, a case slip, a prefix), or "" when none is close: an
// error that points at the fix, not only at the mistake.
func didYouMean(name string, known []string) string {
	var near []string
	best := -1
	for _, k := range known {
		d := distance(strings.ToLower(name), strings.ToLower(k))
		close := d <= max(1, len(k)/3) || len(name) >= 3 && (strings.HasPrefix(k, name) || strings.HasPrefix(name, k))
		if !close {
			continue
		}
		switch {
		case best < 0 || d < best:
			best, near = d, []string{k}
		case d == best:
			near = append(near, k)
		}
	}
	if len(near) == 0 {
		return ""
	}
	q := make([]string, len(near))
	for i, k := range near {
		q[i] = strconv.Quote(k)
	}
	return "; did you mean " + strings.Join(q, " or ") + "?"
}

// distance is the edit distance between a and b in bytes (names are
// ASCII), counting a swap of two neighbours as one edit, the commonest
// typo: optimal string alignment.
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string { return slices.Sorted(maps.Keys(r.byName)) }
