// Package werewolf is a hidden-role social deduction game of two sides: the
// village against the wolves, zero-sum (Werewolf, Mafia).
//
// The episode's seed deals the roles: of `players` seats, `wolves` are
// wolves, `seers` (0 or 1) is the seer, the rest are villagers. The wolves
// and the seer are the team "wolves" and the team "village" of the
// scenario's declared teams (env.Info.Teams), so every allocator credits a
// wolf out of the wolves' reward and a villager out of the village's. The
// roles are hidden: a seat's view and messages name its own role only; the
// wolves are told each other at the start and share the private channel
// #wolves. The record (and so a replay and the viewer) knows every seat's
// role and team.
//
// A day has three steps, every living player of the phase acting at once:
//
//   - night: each wolf names a non-wolf to kill (its choice goes to the
//     #wolves channel); the victim is the one most named, ties to the
//     earliest seat. The seer names a player to inspect and is told, in
//     private, whether that player is a wolf. The victim is announced at
//     dawn, with its role;
//   - discussion: each player accuses another in public ("accuse
//     player-3") or passes;
//   - vote: each player votes for another to be executed, or passes. The
//     one with the most votes is executed and its role announced; a tie,
//     or no vote, executes nobody.
//
// The village wins once no wolf is alive; the wolves win once they are at
// least as many as the others alive. Team rewards: +1 for the winner, -1
// for the loser (zero-sum); 0 each when `days` days pass without a winner.
// Every seat's own score is its team's reward.
//
// An answer outside the legal list counts as a pass, noted "illegal" in
// the turn's notes.
//
// Counterfactuals: the null action of every role, in every state, is
// "pass" (a wolf that names no victim, a seer that looks at nobody, a
// player who accuses and votes for nobody). An absent seat is out of the
// game from the start: it is not among the living, cannot be killed or
// voted for, and counts for no side's numbers (all the wolves absent: the
// village has won at once; all the village absent: the wolves). The
// players answer one another's accusations and votes, so counterfactuals
// re-simulate by default (env.CounterfactualSpec.Resimulate).
//
// The named policy "scripted" (the default) plays every role: a wolf kills
// the non-wolf who accused a wolf last, else one drawn from the turn's
// seed, accuses and votes for a non-wolf (the one the village accuses most,
// if it is not a wolf); the seer inspects a player it has not seen, accuses
// and votes for a wolf it found, and otherwise acts as a villager; a
// villager accuses the player most accused today (the first accusation
// heard wins a tie), and votes for the one most accused, else passes.
//
// The roles' state machine (the wolf's and the seer's start in the night's
// acting states hunting and inspecting, the villager's in sleeping):
//
//	stateDiagram-v2
//	    [*] --> sleeping
//	    discussing --> voting: call
//	    discussing --> dead: die
//	    sleeping --> discussing: dawn
//	    sleeping --> dead: die
//	    voting --> dead: die
//	    voting --> sleeping: dusk
package werewolf

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// Roles, teams, states, events, message kinds and actions of the game.
const (
	RoleVillager = "villager"
	RoleWolf     = "wolf"
	RoleSeer     = "seer"

	// Village and Wolves index the declared teams (env.Info.Teams).
	Village, Wolves = 0, 1

	Sleeping   agents.State = "sleeping"   // a villager's night
	Hunting    agents.State = "hunting"    // a wolf's night: it names a victim
	Inspecting agents.State = "inspecting" // the seer's night: it names a player to inspect
	Discussing agents.State = "discussing"
	Voting     agents.State = "voting"
	Dead       agents.State = "dead"

	Dawn agents.Event = "dawn"
	Call agents.Event = "call"
	Dusk agents.Event = "dusk"
	Die  agents.Event = "die"

	// KindPack tells each wolf, at the start, who the wolves are.
	KindPack = "pack"
	// KindHunt is a wolf's choice of victim, on the #wolves channel.
	KindHunt = "hunt"
	// KindVision tells the seer, in private, what it saw: "player-3 is a
	// wolf" or "player-3 is not a wolf".
	KindVision = "vision"
	// KindDeath announces the night's victim, with its role ("player-3,
	// a villager"), or "nobody".
	KindDeath = "death"
	// KindAccuse is a player's public accusation: the accused player's id.
	KindAccuse = "accuse"
	// KindVotes announces the day's votes, "voter>voted" in seat order,
	// and KindExecuted whom they executed, with its role, or "nobody".
	KindVotes    = "votes"
	KindExecuted = "executed"
	// KindResult announces the winner at the end.
	KindResult = "result"

	// Pass is every role's null action.
	Pass = "pass"

	// channel is the wolves' private channel.
	channel = "wolves"
)

var teamNames = []string{"village", "wolves"}

// Scenario is the werewolf game. Its zero value is not usable; use New.
type Scenario struct {
	info *env.Info
}

// New returns the werewolf scenario.
func New() *Scenario {
	night := map[string]agents.State{RoleVillager: Sleeping, RoleWolf: Hunting, RoleSeer: Inspecting}
	role := func(name, doc string) *agents.Role {
		n := string(night[name])
		acting := []agents.State{Discussing, Voting}
		if name != RoleVillager {
			acting = append([]agents.State{night[name]}, acting...)
		}
		return &agents.Role{
			Name: name, Doc: doc, Initial: night[name],
			Events: fsm.Events{
				agents.Edge(night[name], Dawn, Discussing),
				agents.Edge(Discussing, Call, Voting),
				agents.Edge(Voting, Dusk, night[name]),
				{Name: string(Die), Src: []string{n, string(Discussing), string(Voting)}, Dst: string(Dead)},
			},
			Terminal: []agents.State{Dead},
			Acting:   acting,
		}
	}
	s := &Scenario{}
	s.info = &env.Info{
		Name:    "werewolf",
		Summary: "hidden roles, village against wolves: night kills on the wolves' channel, day accusations and votes; zero-sum",
		Doc: "Simultaneous, three steps a day. The seed deals the roles: wolves, a seer, villagers; the wolves know each other " +
			"and talk on #wolves. Night: the wolves name a victim (the most named dies), the seer inspects a player. Day: " +
			"everyone alive accuses another or passes, then votes; the most voted is executed (a tie executes nobody). " +
			"The village wins when no wolf is left, the wolves when they are as many as the others. Teams village and " +
			"wolves: +1 to the winner, -1 to the loser, 0 each after `days` days. Null action: pass. An absent seat is out of " +
			"the game from the start.",
		Schedule: env.Simultaneous,
		Roles: []*agents.Role{
			role(RoleVillager, "sleeps at night; accuses and votes by day"),
			role(RoleWolf, "names a victim at night with the other wolves; accuses and votes by day"),
			role(RoleSeer, "inspects a player at night and learns whether it is a wolf; accuses and votes by day"),
		},
		Teams: teamNames,
		Params: []env.ParamSpec{
			env.Int("players", 8, 3, 16, "players, wolves and seer included"),
			env.Int("wolves", 2, 1, 5, "wolves among them"),
			env.Int("seers", 1, 0, 1, "seers among them"),
			env.Int("days", 6, 1, 32, "days (a night and a day each) before a draw"),
		},
		Policies:      map[string]env.PolicyMaker{"scripted": scripted},
		DefaultPolicy: "scripted",
		Counterfactual: &env.CounterfactualSpec{
			NullAction: map[string]string{RoleVillager: Pass, RoleWolf: Pass, RoleSeer: Pass},
			AbsentOK:   true,
			Doc: "pass: a wolf names no victim, the seer inspects nobody, a player accuses and votes for nobody; an absent " +
				"seat is out of the game from the start (not among the living, counted on no side)",
			// The players answer each other's accusations and votes.
			Resimulate: true,
		},
		CheckParams: func(p env.Params) error {
			w, n, seers := p.Int("wolves"), p.Int("players"), p.Int("seers")
			if 2*w >= n {
				return fmt.Errorf("wolves=%d of players=%d: the wolves would win before the first night; they must be fewer than half", w, n)
			}
			if w+seers >= n {
				return fmt.Errorf("wolves=%d and seers=%d leave no villager among players=%d", w, seers, n)
			}
			return nil
		},
	}
	return s
}

// Info implements env.Scenario.
func (s *Scenario) Info() *env.Info { return s.info }

// dealStream is the second word of the PCG that deals the roles.
const dealStream = 0x7765_7265_776f_6c66

// New implements env.Scenario: the seed deals the roles.
func (s *Scenario) New(p env.Params, seed uint64) (env.Game, error) {
	n := p.Int("players")
	g := &game{
		seats: make([]env.Seat, n),
		alive: make([]bool, n),
		in:    make([]bool, n),
		days:  p.Int("days"),
		kills: make([]int, n),
		votes: make([]int, n),
	}
	rng := rand.New(rand.NewPCG(seed, dealStream))
	deal := rng.Perm(n)
	w, seers := p.Int("wolves"), p.Int("seers")
	for k, i := range deal {
		seat := env.Seat{ID: "player-" + strconv.Itoa(i), Role: RoleVillager, Team: Village}
		switch {
		case k < w:
			seat.Role, seat.Team = RoleWolf, Wolves
		case k < w+seers:
			seat.Role = RoleSeer
		}
		g.seats[i] = seat
	}
	return g, nil
}

type game struct {
	seats  []env.Seat
	in     []bool // per seat: it takes part (it is not absent)
	alive  []bool
	day    int // from 1; the night before day d belongs to it
	days   int
	phase  agents.State // Hunting (the night), Discussing or Voting
	winner int          // Village or Wolves, -1 for none yet
	done   bool

	kills, votes []int    // per seat: the night's kill picks, the day's votes
	accused      []int    // today's accusations, in seat order: accused seats
	seen         []string // the seer's visions so far, in order
	inspected    []int    // the seats the seer inspected, in order: seen's
}

func (g *game) Seats() []env.Seat { return g.seats }

// Start seats the living, tells the wolves their pack and opens the first
// night, unless a side has won already (absent seats are out of the game).
func (g *game) Start(s *env.Step) error {
	g.day, g.phase, g.winner = 1, Hunting, -1
	var pack []string
	for i, seat := range g.seats {
		g.alive[i] = !s.Absent(i)
		g.in[i] = g.alive[i]
		if g.alive[i] && seat.Team == Wolves {
			pack = append(pack, seat.ID)
			s.Join(i, channel)
		}
	}
	for i, seat := range g.seats {
		if g.alive[i] && seat.Team == Wolves {
			if err := s.Tell(i, KindPack, strings.Join(pack, ", ")); err != nil {
				return err
			}
		}
	}
	return g.settle(s)
}

// settle ends the episode when a side has won or the days are over.
func (g *game) settle(s *env.Step) error {
	wolves, others := 0, 0
	for i, a := range g.alive {
		if !a {
			continue
		}
		if g.seats[i].Team == Wolves {
			wolves++
		} else {
			others++
		}
	}
	switch {
	case wolves == 0:
		g.winner = Village
	case wolves >= others:
		g.winner = Wolves
	case g.day > g.days:
	default:
		return nil
	}
	g.done = true
	s.End()
	result := "draw: no side won in " + strconv.Itoa(g.days) + " days"
	if g.winner >= 0 {
		result = teamNames[g.winner] + " win"
	}
	return s.Announce(KindResult, result)
}

// living lists the living players' ids, other than seat (-1: none left
// out) and, when notTeam is a team, its members.
func (g *game) living(seat, notTeam int) []string {
	var out []string
	for i, a := range g.alive {
		if a && i != seat && g.seats[i].Team != notTeam {
			out = append(out, g.seats[i].ID)
		}
	}
	return out
}

func (g *game) ObserveIn(seat int, state agents.State) env.View {
	me := g.seats[seat]
	var b strings.Builder
	fmt.Fprintf(&b, "Werewolf, day %d. You are %s, a %s (team %s). The village wins when no wolf is alive; the wolves win "+
		"when they are as many as the others alive.\nAlive: %s\n", g.day, me.ID, me.Role, teamNames[me.Team],
		strings.Join(g.living(-1, -1), ", "))
	if me.Team == Wolves {
		fmt.Fprintf(&b, "The wolves: %s\n", strings.Join(g.pack(), ", "))
	}
	if me.Role == RoleSeer && len(g.seen) > 0 {
		fmt.Fprintf(&b, "Your visions: %s\n", strings.Join(g.seen, "; "))
	}
	var legal []string
	switch state {
	case Hunting:
		b.WriteString("Night: name the player the wolves should kill, or pass.")
		legal = g.living(seat, Wolves)
	case Inspecting:
		b.WriteString("Night: name a player to inspect, or pass.")
		legal = g.living(seat, -1)
	case Discussing:
		b.WriteString("Day: accuse a player in public, or pass.")
		for _, id := range g.living(seat, -1) {
			legal = append(legal, "accuse "+id)
		}
	case Voting:
		b.WriteString("Day: vote for the player to execute, or pass.")
		legal = g.living(seat, -1)
	}
	return env.View{Text: b.String(), Legal: append(legal, Pass)}
}

// Observe implements env.Game; the engine calls ObserveIn.
func (g *game) Observe(seat int) env.View { return g.ObserveIn(seat, g.phase) }

// pack lists every wolf, dead or alive, that is in the game.
func (g *game) pack() []string {
	var out []string
	for i, seat := range g.seats {
		if seat.Team == Wolves && g.in[i] {
			out = append(out, seat.ID)
		}
	}
	return out
}

// target returns the seat whose id text names, if it is one of legal; -1
// and a note otherwise (the move then counts as a pass).
func target(s *env.Step, m env.Move, legal []string, prefix string) int {
	text := strings.TrimSpace(m.Action.Text)
	if text == Pass {
		return -1
	}
	if !slices.Contains(legal, text) {
		s.Note(m.Seat, "illegal", true)
		return -1
	}
	i, err := strconv.Atoi(strings.TrimPrefix(text, prefix+"player-"))
	if err != nil {
		return -1
	}
	return i
}

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	switch g.phase {
	case Hunting:
		return g.night(s, moves)
	case Discussing:
		return g.discuss(s, moves)
	default:
		return g.vote(s, moves)
	}
}

// most returns the seat with the highest count, ties to the earliest; -1
// when every count is 0. With unique, a tie is -1 too.
func most(counts []int, unique bool) int {
	best, tied := -1, false
	for i, c := range counts {
		switch {
		case c == 0:
		case best < 0 || c > counts[best]:
			best, tied = i, false
		case c == counts[best]:
			tied = true
		}
	}
	if unique && tied {
		return -1
	}
	return best
}

func (g *game) night(s *env.Step, moves []env.Move) error {
	clear(g.kills)
	for _, m := range moves {
		me := g.seats[m.Seat]
		legal := g.ObserveIn(m.Seat, Hunting).Legal
		if me.Role == RoleSeer {
			legal = g.ObserveIn(m.Seat, Inspecting).Legal
		}
		t := target(s, m, legal, "")
		if t < 0 {
			continue
		}
		if me.Role == RoleSeer {
			what := " is not a wolf"
			if g.seats[t].Team == Wolves {
				what = " is a wolf"
			}
			g.seen = append(g.seen, g.seats[t].ID+what)
			g.inspected = append(g.inspected, t)
			if err := s.Tell(m.Seat, KindVision, g.seats[t].ID+what); err != nil {
				return err
			}
			continue
		}
		g.kills[t]++
		if err := s.Send(me.ID, protocol.Channel(channel), KindHunt, g.seats[t].ID); err != nil {
			return err
		}
	}
	if err := g.eliminate(s, most(g.kills, false), KindDeath); err != nil {
		return err
	}
	if err := g.settle(s); err != nil || g.done {
		return err
	}
	g.phase, g.accused = Discussing, g.accused[:0]
	return g.fireLiving(s, Dawn)
}

// eliminate takes seat v (none when v < 0) out of the living and
// announces it, with its role, as a message of kind.
func (g *game) eliminate(s *env.Step, v int, kind string) error {
	if v < 0 {
		return s.Announce(kind, "nobody")
	}
	g.alive[v] = false
	if g.seats[v].Team == Wolves {
		s.Leave(v, channel)
	}
	if err := s.Fire(v, Die); err != nil {
		return err
	}
	return s.Announce(kind, g.seats[v].ID+", a "+g.seats[v].Role)
}

func (g *game) fireLiving(s *env.Step, ev agents.Event) error {
	for i, a := range g.alive {
		if a {
			if err := s.Fire(i, ev); err != nil {
				return err
			}
		}
	}
	return nil
}

func (g *game) discuss(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		t := target(s, m, g.ObserveIn(m.Seat, Discussing).Legal, "accuse ")
		if t < 0 {
			continue
		}
		g.accused = append(g.accused, t)
		if err := s.Send(g.seats[m.Seat].ID, protocol.Broadcast, KindAccuse, g.seats[t].ID); err != nil {
			return err
		}
	}
	g.phase = Voting
	return g.fireLiving(s, Call)
}

func (g *game) vote(s *env.Step, moves []env.Move) error {
	clear(g.votes)
	var tally []string
	for _, m := range moves {
		t := target(s, m, g.ObserveIn(m.Seat, Voting).Legal, "")
		if t < 0 {
			continue
		}
		g.votes[t]++
		tally = append(tally, g.seats[m.Seat].ID+">"+g.seats[t].ID)
	}
	if err := s.Announce(KindVotes, strings.Join(tally, ", ")); err != nil {
		return err
	}
	if err := g.eliminate(s, most(g.votes, true), KindExecuted); err != nil {
		return err
	}
	g.day++
	if err := g.settle(s); err != nil || g.done {
		return err
	}
	g.phase = Hunting
	return g.fireLiving(s, Dusk)
}

// Resample implements env.HiddenState: it re-deals, from rng, the roles
// seat does not know among the living, keeping every role seat knows: its
// own, the dead's (announced with their roles), the pack for a wolf, the
// seats the seer inspected for the seer (with one seer, "not a wolf" is a
// villager). The re-dealt wolves join #wolves and the others leave it; the
// seer's visions are those of the seats inspected so far, told afresh. The
// messages already delivered (the pack, the hunts, the visions) are not
// rewritten: only seat's are sure to hold.
func (g *game) Resample(s *env.Step, seat int, rng *rand.Rand) error {
	me := g.seats[seat]
	var unknown []int
	for i := range g.seats {
		switch {
		case i == seat, !g.in[i], !g.alive[i]:
		case me.Team == Wolves && g.seats[i].Team == Wolves:
		case me.Role == RoleSeer && slices.Contains(g.inspected, i):
		default:
			unknown = append(unknown, i)
		}
	}
	dealt := make([]env.Seat, len(unknown))
	for k, i := range unknown {
		dealt[k] = g.seats[i]
	}
	rng.Shuffle(len(dealt), func(a, b int) { dealt[a], dealt[b] = dealt[b], dealt[a] })
	for k, i := range unknown {
		was := g.seats[i].Team
		g.seats[i].Role, g.seats[i].Team = dealt[k].Role, dealt[k].Team
		switch now := g.seats[i].Team; {
		case was == Wolves && now != Wolves:
			s.Leave(i, channel)
		case was != Wolves && now == Wolves:
			s.Join(i, channel)
		}
	}
	g.seen = g.seen[:0:0]
	for _, t := range g.inspected {
		what := " is not a wolf"
		if g.seats[t].Team == Wolves {
			what = " is a wolf"
		}
		g.seen = append(g.seen, g.seats[t].ID+what)
	}
	return nil
}

// MetricNames implements env.EpisodeMetricer: each team's reward, so that
// an experiment reports the sides apart (the team reward, their sum, is 0),
// and the days played.
func (s *Scenario) MetricNames(env.Params) []string {
	return []string{"village_reward", "wolves_reward", "days"}
}

// EpisodeMetrics implements env.EpisodeMetricer.
func (s *Scenario) EpisodeMetrics(_ env.Params, rec *episode.Record, dst []float64) {
	dst[0], dst[1] = rec.Score.Of(Village), rec.Score.Of(Wolves)
	// Three steps a day, the last one perhaps cut short by a win.
	dst[2] = float64((rec.Steps + 2) / 3)
}

// Score gives the winner +1 and the loser -1; nobody anything in a draw.
// A seat's own score is its team's reward.
func (g *game) Score() env.Score {
	teams := make([]float64, 2)
	if g.winner >= 0 {
		teams[g.winner], teams[1-g.winner] = 1, -1
	}
	agents := make([]float64, len(g.seats))
	for i, seat := range g.seats {
		agents[i] = teams[seat.Team]
	}
	return env.Score{Teams: teams, Agents: agents}
}

// roleIndex is a role's index in the features' one-hots.
func roleIndex(role string) int {
	switch role {
	case RoleWolf:
		return 1
	case RoleSeer:
		return 2
	}
	return 0
}

// ObservationSpace implements env.Features: 7+4·N numbers for N players,
// the same for every role: the player's own role one-hot (villager, wolf,
// seer), the share of the days begun, the phase one-hot (night,
// discussion, vote), then per player: alive, known to be a wolf, known
// not to be one, and the share of today's accusations against it. What
// is known is the player's own: a wolf knows the pack, the seer what it
// saw, everyone the roles of the dead (announced) and its own.
func (s *Scenario) ObservationSpace(p env.Params, _ string) env.Space {
	return env.Space{Shape: []int{7 + 4*p.Int("players")}, Low: 0, High: 1}
}

// StateSpace implements env.Features: the true state, 4+5·N numbers: the
// share of the days begun, the phase one-hot, then per player its role
// one-hot (villager, wolf, seer, all zeros for an absent one), alive, and
// the share of today's accusations against it.
func (s *Scenario) StateSpace(p env.Params) env.Space {
	return env.Space{Shape: []int{4 + 5*p.Int("players")}, Low: 0, High: 1}
}

// phaseFeatures writes the day and the phase into dst[:4].
func (g *game) phaseFeatures(dst []float32) {
	dst[0] = min(float32(g.day)/float32(g.days), 1)
	switch g.phase {
	case Hunting:
		dst[1] = 1
	case Discussing:
		dst[2] = 1
	case Voting:
		dst[3] = 1
	}
}

// accusations writes, per player, the share of today's accusations
// against it into dst[i*stride].
func (g *game) accusations(dst []float32, stride int) {
	if len(g.accused) == 0 {
		return
	}
	for _, a := range g.accused {
		dst[a*stride] += 1 / float32(len(g.accused))
	}
}

// ObserveFeatures implements env.FeatureGame.
func (g *game) ObserveFeatures(seat int, dst []float32) {
	clear(dst)
	me := g.seats[seat]
	dst[roleIndex(me.Role)] = 1
	g.phaseFeatures(dst[3:7])
	per := dst[7:]
	for i, other := range g.seats {
		row := per[4*i : 4*i+4]
		if g.alive[i] {
			row[0] = 1
		}
		wolf := other.Team == Wolves
		known := i == seat || // itself
			(g.in[i] && !g.alive[i]) || // the dead, announced with their roles
			(me.Team == Wolves && g.in[i]) // a wolf knows the pack, and so the rest
		if me.Role == RoleSeer && slices.Contains(g.inspected, i) {
			known = true // its visions
		}
		switch {
		case !known || !g.in[i]:
		case wolf:
			row[1] = 1
		default:
			row[2] = 1
		}
	}
	g.accusations(per[3:], 4)
}

// WriteState implements env.FeatureGame.
func (g *game) WriteState(dst []float32) {
	clear(dst)
	g.phaseFeatures(dst[:4])
	per := dst[4:]
	for i, seat := range g.seats {
		row := per[5*i : 5*i+5]
		if g.in[i] {
			row[roleIndex(seat.Role)] = 1
		}
		if g.alive[i] {
			row[3] = 1
		}
	}
	g.accusations(per[4:], 5)
}

// ActionSet implements env.ActionSets: every role gets one set, since the
// seed deals the roles and a learner's action space must not tell its
// seat's: each player's id (a victim, a player to inspect, a vote), each
// "accuse " and id, and pass. A turn's legal actions are the living
// others' (and pass), of the kind its phase asks for.
func (s *Scenario) ActionSet(p env.Params, role string) []string {
	if role != RoleVillager && role != RoleWolf && role != RoleSeer {
		return nil
	}
	n := p.Int("players")
	out := make([]string, 0, 2*n+1)
	for i := range n {
		out = append(out, "player-"+strconv.Itoa(i))
	}
	for i := range n {
		out = append(out, "accuse player-"+strconv.Itoa(i))
	}
	return append(out, Pass)
}
