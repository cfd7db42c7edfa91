// Package credit holds troupe's reward allocators: the ways an episode's
// team reward is split among its samples, and a registry that names them.
package credit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/trajectories"
)

// Team gives every sample the episode's team reward G: r_i = G(z).
type Team struct{}

// Name implements trajectories.Allocator.
func (Team) Name() string { return "team" }

// Allocate implements trajectories.Allocator.
func (Team) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	for e, ep := range group {
		for s := range ep.Samples {
			dst[e][s] = ep.Score.Team
		}
	}
	return nil
}

// EqualSplit divides the team reward equally: among the episode's agents
// (G/K, every sample of an agent gets its agent's share) or, PerSample,
// among its emitted samples (G / number of samples).
type EqualSplit struct {
	PerSample bool
}

// Name implements trajectories.Allocator.
func (a EqualSplit) Name() string {
	if a.PerSample {
		return "equal-split-sample"
	}
	return "equal-split"
}

// Allocate implements trajectories.Allocator.
func (a EqualSplit) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	for e, ep := range group {
		n := len(ep.Seats)
		if a.PerSample {
			n = len(ep.Samples)
		}
		if n == 0 {
			continue
		}
		share := ep.Score.Team / float64(n)
		for s := range ep.Samples {
			dst[e][s] = share
		}
	}
	return nil
}

// Maker builds an allocator from its parameters (name to text value).
type Maker func(params map[string]string) (trajectories.Allocator, error)

// ErrUnknownAllocator is returned for a name the registry does not hold.
var ErrUnknownAllocator = errors.New("unknown allocator")

// ErrBadAllocatorParam is wrapped by errors about allocator parameters.
var ErrBadAllocatorParam = errors.New("bad allocator parameter")

// Registry names allocators. Build one with NewRegistry or Builtin; it is
// read-only afterwards and safe for concurrent use.
type Registry struct {
	makers map[string]Maker
	docs   map[string]string
}

// Entry is one registered allocator.
type Entry struct {
	Name string
	Doc  string // what it computes and the parameters it takes
	Make Maker
}

// NewRegistry returns a registry of entries; duplicate names are an error.
func NewRegistry(entries ...Entry) (*Registry, error) {
	r := &Registry{makers: map[string]Maker{}, docs: map[string]string{}}
	for _, e := range entries {
		if _, dup := r.makers[e.Name]; dup || e.Name == "" {
			return nil, fmt.Errorf("allocator registry: empty or duplicate name %q", e.Name)
		}
		r.makers[e.Name], r.docs[e.Name] = e.Make, e.Doc
	}
	return r, nil
}

// Builtin returns a registry of troupe's allocators.
func Builtin() *Registry {
	r, err := NewRegistry(
		Entry{Name: "team", Doc: "every sample gets the team reward G", Make: noParams(Team{})},
		Entry{Name: "equal-split", Doc: "every agent's samples get G/K, K the number of agents", Make: noParams(EqualSplit{})},
		Entry{Name: "equal-split-sample", Doc: "every sample gets G/S, S the number of samples", Make: noParams(EqualSplit{PerSample: true})},
	)
	if err != nil {
		panic(err) // fixed at compile time and covered by tests
	}
	return r
}

func noParams(a trajectories.Allocator) Maker {
	return func(params map[string]string) (trajectories.Allocator, error) {
		for k := range params {
			return nil, fmt.Errorf("%w: %s takes no parameters, got %q", ErrBadAllocatorParam, a.Name(), k)
		}
		return a, nil
	}
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string { return slices.Sorted(maps.Keys(r.makers)) }

// Doc returns the documentation of the named allocator.
func (r *Registry) Doc(name string) string { return r.docs[name] }

// Make builds the named allocator with params.
func (r *Registry) Make(name string, params map[string]string) (trajectories.Allocator, error) {
	m, ok := r.makers[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownAllocator, name, strings.Join(r.Names(), ", "))
	}
	return m(params)
}

// Parse builds an allocator from a command-line spec: "name" or
// "name:key=value,key=value" (for example "rae:alpha=0.9").
func (r *Registry) Parse(spec string) (trajectories.Allocator, error) {
	name, rest, _ := strings.Cut(strings.TrimSpace(spec), ":")
	params := map[string]string{}
	if rest != "" {
		for _, kv := range strings.Split(rest, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return nil, fmt.Errorf("%w: allocator %s: %q is not key=value", ErrBadAllocatorParam, name, kv)
			}
			params[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return r.Make(name, params)
}
