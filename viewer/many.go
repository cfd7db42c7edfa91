package viewer

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// An episode of many agents (El Farol with 500 patrons, a league of
// 10,000) is not drawn agent by agent: a bar, a table row, a lifeline and
// a timeline per agent made pages of megabytes and tens of thousands of
// elements that no one could read. Past manyAgents seats the page shows
// what aggregates (each role's credit: its agents' mean, spread and
// distribution per allocator, each on its own scale) and, agent by agent,
// only a few: the top and bottom ones under each allocator and the one the
// reader asked for (?agent=ID), whose turns, messages and states the
// diagrams then draw.

// manyAgents is the most seats an episode page draws one by one.
const manyAgents = 40

// extremes is how many top and bottom agents per allocator a page of many
// agents shows.
const extremes = 5

// maxTurnsShown bounds the turns a page lists; maxMessagesListed the
// message table's rows.
const (
	maxTurnsShown      = 200
	maxMessagesListed  = 500
	maxRecipientsNamed = 20
)

// RoleCredit is one role's agents under one allocator: the distribution of
// their values per sample.
type RoleCredit struct {
	Role, Allocator string
	Agents          int // with samples
	Stat            Stat
}

// manyView is what a page of many agents adds.
type manyView struct {
	Seats   int // the episode's
	Shown   []string
	Focus   string // the agent asked for, "" none
	FocusOK bool
	Err     string // the agent asked for is not in the episode
	Roles   []RoleCredit
	Hists   []Chart // per allocator, the agents' values, its own scale
}

// focusSubset picks the seats a page of many agents draws, and returns the
// episode cut down to them.
func focusSubset(e *Episode, focus string) (*Episode, *manyView) {
	m := &manyView{Seats: len(e.Seats), Focus: focus}
	keep := map[int]bool{}
	if focus != "" {
		k := slices.IndexFunc(e.Seats, func(s SeatView) bool { return s.ID == focus })
		if k >= 0 {
			keep[k], m.FocusOK = true, true
		} else {
			m.Err = fmt.Sprintf("this episode has no agent %q", focus)
		}
	}
	for a, name := range e.Allocators {
		var with []int
		for i := range e.Seats {
			if e.Seats[i].Credit[a].N > 0 {
				with = append(with, i)
			}
		}
		slices.SortStableFunc(with, func(x, y int) int { return cmp.Compare(e.Seats[y].Credit[a].Mean(), e.Seats[x].Credit[a].Mean()) })
		for k, i := range with {
			if k < extremes || k >= len(with)-extremes {
				keep[i] = true
			}
		}
		byRole := map[string]*RoleCredit{}
		var order []string
		values := make([]float64, 0, len(with))
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, i := range with {
			s := &e.Seats[i]
			r, ok := byRole[s.Role]
			if !ok {
				r = &RoleCredit{Role: s.Role, Allocator: name}
				byRole[s.Role] = r
				order = append(order, s.Role)
			}
			v := s.Credit[a].Mean()
			r.Agents++
			r.Stat.add(v)
			values = append(values, v)
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		slices.Sort(order)
		for _, role := range order {
			m.Roles = append(m.Roles, *byRole[role])
		}
		if len(values) > 0 {
			h := histogram(values, lo, hi, fmt.Sprintf("alloc-hist alloc-%d", a%8), name+": agents' value per sample")
			for k := range h.Bars {
				h.Bars[k].Alloc = name
				h.Bars[k].Title = strings.Replace(h.Bars[k].Title, "episodes", "agents", 1)
			}
			m.Hists = append(m.Hists, h)
		}
	}
	if len(e.Allocators) == 0 {
		for i := range min(len(e.Seats), 2*extremes) {
			keep[i] = true
		}
	}
	seats := slices.Sorted(maps.Keys(keep))
	for _, i := range seats {
		m.Shown = append(m.Shown, e.Seats[i].ID)
	}
	return subset(e, seats), m
}

// subset is e with only the seats keep (in order): their turns, the
// messages they sent or received (recipients outside keep dropped from
// the arrows, counted in the names), their transitions.
func subset(e *Episode, keep []int) *Episode {
	sub := *e
	at := make(map[int]int, len(keep))
	sub.Seats = make([]SeatView, len(keep))
	for k, i := range keep {
		at[i] = k
		sub.Seats[k] = e.Seats[i]
		sub.Seats[k].Seat = k
	}
	sub.Turns = nil
	for _, t := range e.Turns {
		if k, ok := at[t.Seat]; ok {
			t.Seat = k
			sub.Turns = append(sub.Turns, t)
		}
	}
	sub.Messages = nil
	msgAt := map[int]int{}
	for j, m := range e.Messages {
		k, sent := at[m.FromSeat]
		var rs []int
		for _, r := range m.Recipients {
			if kr, ok := at[r]; ok {
				rs = append(rs, kr)
			}
		}
		// A message is drawn when a shown agent sent or received it (or
		// the environment sent it to no one): one from an agent not shown
		// starts on the lane of the environment and the others.
		if !sent && len(rs) == 0 && (m.FromSeat >= 0 || len(m.Recipients) > 0) {
			continue
		}
		if sent {
			m.FromSeat = k
		} else if m.FromSeat >= 0 {
			m.FromSeat = -1
			sub.Others = true
		}
		m.RecipientIDs = nameSome(m.RecipientIDs)
		m.Recipients = rs
		msgAt[j] = len(sub.Messages)
		sub.Messages = append(sub.Messages, m)
	}
	// Inboxes point into the message list: renumber them.
	for k := range sub.Turns {
		t := &sub.Turns[k]
		var in []int
		for _, j := range t.Inbox {
			if n, ok := msgAt[j]; ok {
				in = append(in, n)
			}
		}
		t.Inbox = in
	}
	sub.Transitions = nil
	for _, tr := range e.Transitions {
		if k, ok := at[tr.Seat]; ok {
			tr.Seat = k
			sub.Transitions = append(sub.Transitions, tr)
		}
	}
	return &sub
}

// nameSome keeps the first maxRecipientsNamed names and counts the rest.
func nameSome(ids []string) []string {
	if len(ids) <= maxRecipientsNamed {
		return ids
	}
	out := slices.Clone(ids[:maxRecipientsNamed])
	return append(out, fmt.Sprintf("and %d more", len(ids)-maxRecipientsNamed))
}
