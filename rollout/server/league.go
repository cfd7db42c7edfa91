package server

import (
	"maps"
	"slices"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
)

// Matcher is a self-play league behind the service (troupe serve
// --league; package league's Service): every rollout request is a match
// in which the request's policy, the model being trained, plays the
// learner's role, and the league's matchmaking chooses the players of the
// other roles. Implementations must be safe for concurrent use.
type Matcher interface {
	// Match draws the match of a request of n episodes of a scenario:
	// the learner's role and each other role's opponent. An error refuses
	// the request (400 bad_policy, with the error's text).
	Match(info *env.Info, n int) (*league.ServedMatch, error)
	// Played hands the league the match's episodes, in order, once they
	// are played, to rate (their records: their samples are not
	// projected); eps nil: the request was refused after Match, and the
	// match is void. An error is logged; the answer stands.
	Played(m *league.ServedMatch, eps []*trajectories.Episode) error
	// MakePolicy makes the opponents' policies that the scenario does not
	// own (a learner snapshot, a model at another endpoint): an
	// env.PolicyMaker, asked before Config.Policies, which returns
	// env.ErrUnknownPolicy for a policy it does not know.
	MakePolicy(req env.PolicyRequest) (agents.Policy, error)
}

// Metadata keys of a league match's samples.
const (
	// MetaLeagueMatch is the league's number of the sample's episode.
	MetaLeagueMatch = "league_match"
	// MetaLearner and MetaLearnerRole name the learner and its role.
	MetaLearner     = "league_learner"
	MetaLearnerRole = "league_learner_role"
	// MetaOpponent names the opponent of a two-player match; MetaOpponents
	// maps every other role to its player.
	MetaOpponent  = "league_opponent"
	MetaOpponents = "league_opponents"
)

// leagueMatch draws the request's match and puts its players into the
// spec: the request names the learner's policy only (policy), every other
// role is the league's, and, unless the request says whose turns it
// wants, only the learner's are emitted.
func (s *Server) leagueMatch(req *rollout.Request, info *env.Info, p *plan) *rollout.Error {
	if len(req.Policies) > 0 {
		return badRequest(rollout.CodeBadPolicy, "policies: the service plays a league (troupe serve --league), which chooses the player of every role: give the learner's policy as policy")
	}
	m, err := s.cfg.League.Match(info, p.n)
	if err != nil {
		return badRequest(rollout.CodeBadPolicy, "league: %v", err)
	}
	p.match = m
	return nil
}

// leagueSpec puts the match's players into the request's spec.
func leagueSpec(spec *runspec.Spec, p *plan) {
	m := p.match
	if spec.Policies == nil {
		spec.Policies = map[string]runspec.Policy{}
	}
	for role, o := range m.Opponents {
		spec.Policies[role] = o.Policy
	}
	if len(spec.Emit) == 0 {
		spec.Emit = []string{m.LearnerRole}
	}
}

// voidMatch tells the league that a request it matched was refused.
func (s *Server) voidMatch(p *plan) {
	if p == nil || p.match == nil {
		return
	}
	if err := s.cfg.League.Played(p.match, nil); err != nil {
		s.cfg.Logger.Error("league: a void match was not recorded", "match", p.match.Index, "error", err)
	}
	p.match = nil
}

// leaguePlayed hands the league the played episodes (their records: the
// league rates the outcomes, not the samples).
func (s *Server) leaguePlayed(p *plan, group []*episode.Record) {
	m := p.match
	if m == nil {
		return
	}
	p.match = nil
	eps := make([]*trajectories.Episode, len(group))
	for i, rec := range group {
		eps[i] = trajectories.RecordOnly(rec)
	}
	if err := s.cfg.League.Played(m, eps); err != nil {
		s.cfg.Logger.Error("league: the match's results were not recorded", "match", m.Index, "error", err)
	}
}

// leagueSink names the match's players in the metadata of every sample
// of the episodes it is given, and hands them on to next: the sink of a
// league request's answer.
type leagueSink struct {
	m         *league.ServedMatch
	opponents map[string]any // role -> player
	next      trajectories.Sink
}

func newLeagueSink(m *league.ServedMatch, next trajectories.Sink) *leagueSink {
	opponents := make(map[string]any, len(m.Opponents))
	for role, o := range m.Opponents {
		opponents[role] = o.Player
	}
	return &leagueSink{m: m, opponents: opponents, next: next}
}

// WriteEpisode implements trajectories.Sink.
func (l *leagueSink) WriteEpisode(ep *trajectories.Episode) error {
	m := l.m
	for k := range ep.Samples {
		sm := &ep.Samples[k]
		// A copy: a sample's Extra may be its turn's Notes.
		extra := maps.Clone(sm.Metadata.Extra)
		if extra == nil {
			extra = make(map[string]any, 5)
		}
		// The request's episodes are the match's, in order.
		extra[MetaLeagueMatch] = m.Index + ep.Index
		extra[MetaLearner] = m.Learner
		extra[MetaLearnerRole] = m.LearnerRole
		extra[MetaOpponents] = l.opponents
		if len(m.Opponents) == 1 {
			for _, role := range slices.Collect(maps.Keys(m.Opponents)) {
				extra[MetaOpponent] = m.Opponents[role].Player
			}
		}
		sm.Metadata.Extra = extra
	}
	return l.next.WriteEpisode(ep)
}

var _ Matcher = (*league.Service)(nil)
