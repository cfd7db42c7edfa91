package werewolf

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
)

// policyStream is the second word of the PCG a scripted turn draws from.
const policyStream = 0x7363_7269_7074_6564

// scripted makes the "scripted" policy of a role (see the package doc). It
// reads only what the seat was told (its messages and legal actions), so
// it plays a hidden role as a player would.
func scripted(req env.PolicyRequest) (agents.Policy, error) {
	switch req.Role {
	case RoleVillager, RoleWolf, RoleSeer:
	default:
		return nil, fmt.Errorf("werewolf: no scripted policy for role %q", req.Role)
	}
	return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		if len(obs.Legal) == 0 {
			return agents.Action{}, fmt.Errorf("agent %q: %w", obs.Agent, agents.ErrNoLegalActions)
		}
		k := read(obs)
		rng := rand.New(rand.NewPCG(obs.Seed, policyStream))
		var choice string
		switch obs.State {
		case Hunting:
			choice = k.hunt(obs, rng)
		case Inspecting:
			choice = k.inspect(obs, rng)
		case Discussing:
			if id := k.suspect(obs); id != "" {
				choice = "accuse " + id
			}
		case Voting:
			choice = k.suspect(obs)
		}
		if choice == "" || !slices.Contains(obs.Legal, choice) {
			choice = Pass
		}
		return agents.Action{Text: choice}, nil
	}), nil
}

// knowledge is what a seat's messages told it.
type knowledge struct {
	pack     []string // the wolves (told to wolves only)
	wolves   []string // players the seer saw to be wolves
	seen     []string // players the seer inspected
	accusers []string // every accusation, in order: who accused
	accused  []string // and whom
	today    int      // accusations[today:] are today's
	// liars are the players revealed (killed or executed) to be wolves,
	// and those who accused someone later revealed not to be one.
	liars []string
}

func read(obs *agents.Observation) *knowledge {
	k := &knowledge{}
	for _, m := range obs.Seen {
		switch m.Kind {
		case KindPack:
			k.pack = strings.Split(m.Payload, ", ")
		case KindVision:
			id, rest, _ := strings.Cut(m.Payload, " ")
			k.seen = append(k.seen, id)
			if rest == "is a wolf" {
				k.wolves = append(k.wolves, id)
			}
		case KindAccuse:
			k.accusers, k.accused = append(k.accusers, m.From), append(k.accused, m.Payload)
		case KindDeath, KindExecuted:
			if m.Kind == KindDeath {
				k.today = len(k.accused)
			}
			id, role, _ := strings.Cut(m.Payload, ", a ")
			switch role {
			case "":
			case RoleWolf:
				k.lie(id)
			default:
				for j, a := range k.accused {
					if a == id {
						k.lie(k.accusers[j])
					}
				}
			}
		}
	}
	return k
}

// lie counts id among the liars.
func (k *knowledge) lie(id string) {
	if !slices.Contains(k.liars, id) {
		k.liars = append(k.liars, id)
	}
}

// other reports whether id is a living player the seat may name (one of
// its legal targets, in either form).
func other(obs *agents.Observation, id string) bool {
	return slices.Contains(obs.Legal, id) || slices.Contains(obs.Legal, "accuse "+id)
}

// hunt names the last living accuser of a wolf, else a random non-wolf.
func (k *knowledge) hunt(obs *agents.Observation, rng *rand.Rand) string {
	for j := len(k.accused) - 1; j >= 0; j-- {
		if slices.Contains(k.pack, k.accused[j]) && slices.Contains(obs.Legal, k.accusers[j]) {
			return k.accusers[j]
		}
	}
	return pick(obs.Legal, rng)
}

// inspect names a living player the seer has not seen yet.
func (k *knowledge) inspect(obs *agents.Observation, rng *rand.Rand) string {
	var fresh []string
	for _, id := range obs.Legal {
		if id != Pass && !slices.Contains(k.seen, id) {
			fresh = append(fresh, id)
		}
	}
	return pick(fresh, rng)
}

// suspect names whom the seat accuses and votes for: for the seer a wolf
// it saw; for a wolf the village's favourite suspect when not a wolf,
// else a random non-wolf; for everyone else the most accused today (or,
// before today's accusations, over all days), ties drawn at random, not
// counting the accusations of liars (revealed wolves, and who accused a
// player later revealed not to be a wolf), and else a living liar; ""
// for none.
func (k *knowledge) suspect(obs *agents.Observation) string {
	for _, id := range k.wolves {
		if other(obs, id) {
			return id
		}
	}
	from := k.today
	if obs.State == Discussing {
		from = 0
	}
	var named []string
	for j := from; j < len(k.accused); j++ {
		id := k.accused[j]
		if other(obs, id) && !slices.Contains(k.pack, id) && !slices.Contains(k.liars, k.accusers[j]) {
			named = append(named, id)
		}
	}
	rng := rand.New(rand.NewPCG(obs.Seed, policyStream))
	best := pick(mostNamed(named), rng)
	if best == "" && k.pack == nil {
		for _, id := range k.liars {
			if other(obs, id) {
				return id
			}
		}
	}
	if best == "" && k.pack != nil {
		var prey []string
		for _, id := range obs.Legal {
			id = strings.TrimPrefix(id, "accuse ")
			if id != Pass && !slices.Contains(k.pack, id) {
				prey = append(prey, id)
			}
		}
		return pick(prey, rng)
	}
	return best
}

// mostNamed returns the ids named most often in names, in the order they
// were first named.
func mostNamed(names []string) []string {
	count := map[string]int{}
	top := 0
	for _, id := range names {
		count[id]++
		top = max(top, count[id])
	}
	var out []string
	for _, id := range names {
		if count[id] == top && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// pick returns one of list other than a pass, drawn from rng; "" for none.
func pick(list []string, rng *rand.Rand) string {
	var named []string
	for _, id := range list {
		if id != Pass {
			named = append(named, id)
		}
	}
	if len(named) == 0 {
		return ""
	}
	return named[rng.IntN(len(named))]
}
