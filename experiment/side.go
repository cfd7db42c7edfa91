package experiment

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// ParseSideAllocator reads a fixed allocator of another team, written
// "team=spec" (troupe experiment --side-allocator blue=difference).
func ParseSideAllocator(s string) (team, spec string, err error) {
	team, spec, ok := strings.Cut(s, "=")
	team, spec = strings.TrimSpace(team), strings.TrimSpace(spec)
	if !ok || team == "" || spec == "" {
		return "", "", fmt.Errorf("%w: side allocator %q: want team=allocator", ErrBadConfig, s)
	}
	return team, spec, nil
}

// sides checks Config.Side and Config.SideAllocators against the
// scenario, and sets the plan's side (the compared team's index, -1 when
// none) and the fixed allocators of the other teams (sideAllocs, as the
// registry names them, by team index; "" for the compared side).
func (p *plan) sides(info *env.Info) error {
	p.side = -1
	if p.cfg.Side == "" {
		if len(p.cfg.SideAllocators) > 0 {
			return fmt.Errorf("%w: side allocators %v without a compared side (Side, troupe experiment --side)", ErrBadConfig, p.cfg.SideAllocators)
		}
		return nil
	}
	if len(info.Teams) == 0 {
		return fmt.Errorf("%w: side %q: scenario %s declares no teams, so it has no sides to compare (its reward is the team's)", ErrBadConfig, p.cfg.Side, info.Name)
	}
	p.side = slices.Index(info.Teams, p.cfg.Side)
	if p.side < 0 {
		return fmt.Errorf("%w: side %q: scenario %s has the teams %s", ErrBadConfig, p.cfg.Side, info.Name, strings.Join(info.Teams, ", "))
	}
	if p.cfg.Optimum != nil {
		return fmt.Errorf("%w: an optimum with side %q: the metric is the side's own reward, reported as it is", ErrBadConfig, p.cfg.Side)
	}
	for _, team := range slices.Sorted(maps.Keys(p.cfg.SideAllocators)) {
		switch t := slices.Index(info.Teams, team); {
		case team == p.cfg.Side:
			return fmt.Errorf("%w: side allocator %s=%s: %s is the compared side, whose allocators are Allocators (--allocator)", ErrBadConfig, team, p.cfg.SideAllocators[team], team)
		case t < 0:
			return fmt.Errorf("%w: side allocator %s=%s: scenario %s has the teams %s", ErrBadConfig, team, p.cfg.SideAllocators[team], info.Name, strings.Join(info.Teams, ", "))
		}
	}
	p.sideAllocs = make([]string, len(info.Teams))
	for t, team := range info.Teams {
		if t == p.side {
			continue
		}
		spec, ok := p.cfg.SideAllocators[team]
		if !ok {
			spec = "team"
		}
		name, a, err := p.effective(info, spec)
		if err != nil {
			return fmt.Errorf("%w: side allocator %s=%s: %v", ErrBadConfig, team, spec, err)
		}
		if err := p.serves(info, a); err != nil {
			return fmt.Errorf("%w: side allocator %s=%s: %v", ErrBadConfig, team, spec, err)
		}
		p.sideAllocs[t] = name
	}
	return nil
}

// sideAllocatorsID is the fixed allocators of the other teams as the cell
// files and the manifest write them: team to allocator name; nil without
// a compared side.
func (p *plan) sideAllocatorsID() map[string]string {
	if p.side < 0 {
		return nil
	}
	info := p.cfg.Scenario.Info()
	m := map[string]string{}
	for t, name := range p.sideAllocs {
		if t != p.side {
			m[info.Teams[t]] = name
		}
	}
	return m
}

// fixedSides describes the other teams' fixed allocators for the report:
// "blue `team`".
func (p *plan) fixedSides() string {
	teams := p.cfg.Scenario.Info().Teams
	var parts []string
	for t, name := range p.sideAllocs {
		if t != p.side {
			parts = append(parts, teams[t]+" `"+name+"`")
		}
	}
	return strings.Join(parts, ", ")
}

// cellAllocator is the allocator a cell's learners learn from: the cell's
// compared allocator, or, with a compared side, an allocator that gives
// each team's samples the values of that team's allocator. Teams whose
// allocators have the same name share one allocator, as the teams of an
// experiment without a compared side do (a stateful one keeps one state).
func (p *plan) cellAllocator(c *cellPlan) (trajectories.Allocator, error) {
	if p.side < 0 {
		return p.allocator(c)
	}
	teams := p.cfg.Scenario.Info().Teams
	names := slices.Clone(p.sideAllocs)
	names[p.side] = p.allocs[c.alloc]
	b := &byTeam{of: make([]int, len(teams))}
	labels := make([]string, len(teams))
	for t, name := range names {
		labels[t] = teams[t] + "=" + name
		if k := slices.Index(names, name); k < t {
			b.of[t] = b.of[k]
			continue
		}
		a, err := p.registry.ParseDefaultingSim(name, p.resimulate)
		if err != nil {
			return nil, err
		}
		b.of[t] = len(b.allocs)
		b.allocs = append(b.allocs, a)
	}
	b.name = strings.Join(labels, ",")
	return b, nil
}

// byTeam gives the samples of each team's seats the values of that team's
// allocator (allocs[of[t]] for Seat.Team t): the per-side rewards of an
// experiment with a compared side. Every allocator runs on the whole
// group, so a counterfactual one values each seat by its own team's reward
// as it always does; the values of the other teams' seats are dropped.
type byTeam struct {
	name   string
	allocs []trajectories.Allocator
	of     []int // per team: its allocator in allocs
}

// Name implements trajectories.Allocator: "red=difference,blue=team".
func (b *byTeam) Name() string { return b.name }

// Needs implements credit.Needer: what any of the allocators needs.
func (b *byTeam) Needs() credit.Needs {
	var n credit.Needs
	for _, a := range b.allocs {
		n = n.Or(credit.NeedsOf(a))
	}
	return n
}

// Sequential implements trajectories.Sequential: as sequential as the
// most sequential of its allocators.
func (b *byTeam) Sequential() bool { return trajectories.AnySequential(b.allocs) }

// Close implements io.Closer: it closes the allocators that are (a
// stateful one saves its state), and returns the first error.
func (b *byTeam) Close() error {
	var first error
	for _, a := range b.allocs {
		if c, ok := a.(io.Closer); ok {
			if err := c.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Allocate implements trajectories.Allocator.
func (b *byTeam) Allocate(ctx context.Context, group []*trajectories.Episode, dst [][]float64) error {
	values := make([][][]float64, len(b.allocs)) // per allocator, as dst
	for k, a := range b.allocs {
		values[k] = make([][]float64, len(dst))
		for e := range dst {
			values[k][e] = make([]float64, len(dst[e]))
		}
		if err := a.Allocate(ctx, group, values[k]); err != nil {
			return fmt.Errorf("%s: %w", a.Name(), err)
		}
	}
	for e, ep := range group {
		if len(ep.Candidates) > 0 {
			return fmt.Errorf("episode %d of %s: per-side allocators do not take tree-sampled episodes", ep.Index, ep.Scenario)
		}
		s := 0
		for i := range ep.Turns {
			tr := &ep.Turns[i]
			if !tr.Emit {
				continue
			}
			if s >= len(dst[e]) || tr.Seat < 0 || tr.Seat >= len(ep.Seats) {
				return fmt.Errorf("episode %d of %s: emitted turn %d (seat %d) has no sample of %d", ep.Index, ep.Scenario, i, tr.Seat, len(dst[e]))
			}
			t := ep.Seats[tr.Seat].Team
			if t < 0 || t >= len(b.of) {
				return fmt.Errorf("episode %d of %s: seat %d is on team %d of %d", ep.Index, ep.Scenario, tr.Seat, t, len(b.of))
			}
			dst[e][s] = values[b.of[t]][e][s]
			s++
		}
	}
	return nil
}
