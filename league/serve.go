package league

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
)

// Service is a league behind the rollout service (troupe serve --league):
// a the rollout service's Matcher (package rollout/server). The league's learner is a player of policy external,
// the model slime trains: every rollout request of n episodes is a match,
// the request's policy in the learner's role, each other role's player
// drawn by the matchmaking rule, and its n episodes are the league's
// matches Index to Index+n-1, rated and logged once played. Matches that
// finish out of order wait for the earlier ones, so that the log is in
// match order; a request refused after its draw logs its matches as
// aborted (not rated). Every update is committed before Played returns.
//
// Matchmaking draws from the league's seed and the match number, and
// PFSP's weights from the results logged when the draw is made: with
// requests one at a time, the same requests meet the same opponents.
type Service struct {
	mu   sync.Mutex
	l    *League
	rule Rule
	// next is the number of the next match to draw; done holds the
	// results of finished matches that wait for earlier ones.
	next int64
	done map[int64][]Result
}

// NewService serves l, whose learner must be an external player, with
// matchmaking rule (""; the league's).
func NewService(l *League, rule string) (*Service, error) {
	lp := l.Learner()
	if lp == nil || lp.Policy.Name != PolicyExternal {
		return nil, fmt.Errorf("%w: league %s has no learner of policy %s, the model troupe serve trains: add one (troupe league add DIR NAME %s)",
			ErrBadLeague, l.state.Name, PolicyExternal, PolicyExternal)
	}
	if rule == "" {
		rule = l.state.Rule
	}
	r, err := ParseRule(rule)
	if err != nil {
		return nil, err
	}
	return &Service{l: l, rule: r, next: l.state.Matches, done: map[int64][]Result{}}, nil
}

// Match implements rollout/server's Matcher.
func (s *Service) Match(info *env.Info, n int) (*ServedMatch, error) {
	if info.Name != s.l.info.Name {
		return nil, fmt.Errorf("league %s plays %s, not %s", s.l.state.Name, s.l.info.Name, info.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.l.Draw(s.rule, "", s.next)
	if err != nil {
		return nil, err
	}
	s.next += int64(n)
	out := &ServedMatch{Index: m.Index, N: n, Learner: m.Focal, LearnerRole: m.FocalRole, Opponents: map[string]Opponent{}}
	for role, name := range m.Roles {
		if role != m.FocalRole {
			out.Opponents[role] = Opponent{Player: name, Policy: s.l.Player(name).Policy}
		}
	}
	return out, nil
}

// Played implements rollout/server's Matcher.
func (s *Service) Played(m *ServedMatch, eps []*trajectories.Episode) error {
	match := Match{Index: m.Index, Rule: s.rule.String(), Focal: m.Learner, FocalRole: m.LearnerRole, Roles: map[string]string{m.LearnerRole: m.Learner}}
	for role, o := range m.Opponents {
		match.Roles[role] = o.Player
	}
	n := m.N
	if eps != nil && len(eps) != n {
		return fmt.Errorf("league: match %d: %d episodes played, %d drawn", m.Index, len(eps), n)
	}
	results := make([]Result, 0, n)
	var firstErr error
	for i := range n {
		mi := match
		mi.Index = m.Index + int64(i)
		var r Result
		if eps == nil {
			r = Result{Match: mi.Index, Rule: mi.Rule, Focal: mi.Focal, FocalRole: mi.FocalRole, Roles: mi.Roles, Scores: map[string]float64{}, Status: protocol.StatusAborted}
		} else {
			var err error
			if r, err = s.l.ResultOf(&mi, &eps[i].Record); err != nil {
				r.Status = protocol.StatusFailed
				firstErr = cmp.Or(firstErr, err)
			}
			id := eps[i].RolloutID
			r.RolloutID = &id
		}
		results = append(results, r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done[m.Index] = results
	flushed := false
	for {
		rs, ok := s.done[s.l.state.Matches]
		if !ok {
			break
		}
		delete(s.done, s.l.state.Matches)
		if err := s.l.appendResults(rs); err != nil {
			return err
		}
		flushed = true
	}
	if flushed {
		if err := s.l.commit(); err != nil {
			return err
		}
	}
	return firstErr
}

// sameJSON reports whether a and b are the same JSON value, whatever
// their key order and spacing (a resolved spec may re-encode settings).
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// MakePolicy implements rollout/server's Matcher: the policy of the league player
// whose policy and settings the request names; env.ErrUnknownPolicy for
// any other (the learner's llm policy, made by the service).
func (s *Service) MakePolicy(req env.PolicyRequest) (agents.Policy, error) {
	switch req.Name {
	case PolicySnapshot, PolicyLLM, PolicyLearner:
	default:
		return nil, env.ErrUnknownPolicy
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.l.state.Players {
		p := &s.l.state.Players[i]
		if p.Policy.Name == req.Name && sameJSON(p.Policy.Settings, req.Settings) {
			return s.l.pols.policy(p, req.Role)
		}
	}
	// Not a league player's: the learner's own (an llm policy with the
	// service's settings), the service's to make.
	return nil, env.ErrUnknownPolicy
}

// ServedMatch is one league match served as a rollout request (troupe
// serve --league): the request's roles and players.
type ServedMatch struct {
	// Index is the league's number of the match; the request's N
	// episodes are its matches Index to Index+N-1.
	Index int64
	N     int
	// Learner is the learner's player name, LearnerRole its role.
	Learner, LearnerRole string
	// Opponents are the other roles' players, by role.
	Opponents map[string]Opponent
}

// Opponent is a league player in one role of a match.
type Opponent struct {
	Player string
	Policy runspec.Policy
}
