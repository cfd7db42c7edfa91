package env

import (
	"errors"
	"fmt"
	"maps"
	"slices"
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
			return nil, fmt.Errorf("%w: two scenarios are called %q", ErrBadScenario, info.Name)
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
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownScenario, name, strings.Join(r.Names(), ", "))
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string { return slices.Sorted(maps.Keys(r.byName)) }
