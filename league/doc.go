// Package league is self-play with a population: a league is a named set
// of players of one scenario (scripted policies, a tabular learner trained
// in the league and frozen snapshots of it, models behind OpenAI-compatible
// endpoints, the external model of a rollout service), the matches they
// played and their ratings, kept in a directory.
//
// # Matches
//
// A match is drawn for a focal player (the learner, by default): it takes a
// role drawn uniformly, and every other role gets an opponent chosen by a
// matchmaking Rule (ParseRule: uniform, self, latest, pfsp, fixed, mix).
// Every draw and every episode seed derives from the league's seed and the
// match number, so the same league history always gives the same matches.
// Play plays matches in batches (Config.Batch): drawn from the league as it
// stood at the batch's start, played concurrently, then, in match order,
// learned by the learner, logged and rated. Service plays them for the
// rollout service instead (troupe serve --league), one request a match.
//
// # Ratings
//
// Each completed match updates an Elo and a Glicko-2 rating of its
// players; an n-player match counts as the two-player games its ranking
// implies (see Elo and Glicko). Ratings, the payoff matrix (Payoff) and the
// ratings over time (History, PlotRatings) are replayed from the match
// log.
//
// # Exploitability
//
// NashConv measures a joint policy exactly in a small two-sided game (two
// teams, or two seats): each side's value, its best response against the
// other side's policies, searched on its information sets over the whole
// game tree (sequential or simultaneous moves, hidden information, chance
// over stated seeds), and the gains summed. League.NashConv measures a
// player in self-play; Exploitability is NashConv/2 of one policy.
//
// # Files
//
// The directory holds league.json (the configuration, the players and the
// progress: the commit point, replaced atomically), matches.jsonl (one
// Result a line), learner-N.json (the learner's values after N matches)
// and snapshots/. Open cuts back what a killed run wrote after its last
// commit, so a league resumed and played on ends byte-identical to one
// that was never interrupted.
package league
