package parquet

import (
	"errors"
	"io"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// Columns of the episodes table.
const (
	eScenario = iota
	eParams
	eSeed
	ePolicySeed
	eEpisode
	eRolloutID
	eGroupIndex
	eStatus
	eEnd
	eError
	eStack
	eSteps
	eLabel
	eSeats
	eRoles
	eTurns
	eSamples
	eMessages
	eTransitions
	eTeamScore
	eAgentScores
	eAllocators
	eCreditNotes
)

func episodeSchema() []field {
	return []field{
		str("scenario"), mapOf("params", kString),
		u64("seed"), u64("policy_seed"), i64("episode"), i64("rollout_id"), i64("group_index"),
		str("status"), str("end"), optStr("error"), optStr("stack"), i32("steps"), optStr("label"),
		listOf("seats", kString, false), listOf("roles", kString, false),
		i32("turns"), i32("samples"), i32("messages"), i32("transitions"),
		f64("team_score"), listOf("agent_scores", kFloat64, true),
		listOf("allocators", kString, true), optStr("credit_notes"),
	}
}

// Columns of the turns table.
const (
	tRolloutID = iota
	tEpisode
	tPosition
	tSeat
	tAgent
	tRole
	tStep
	tTurn
	tState
	tSeed
	tView
	tLegal
	tInbox
	tAction
	tCompletion
	tPrompt
	tPromptTokens
	tResponseTokens
	tLogProbs
	tLossMask
	tInvalid
	tNotes
	tEmit
	tSample
	tCredit
)

func turnSchema() []field {
	return []field{
		i64("rollout_id"), i64("episode"), i32("position"),
		i32("seat"), str("agent"), str("role"), i32("step"), i32("turn"), str("state"), u64("seed"),
		str("view"), listOf("legal", kString, true), listOf("inbox", kInt32, false),
		str("action"), optStr("completion"), optStr("prompt"),
		listOf("prompt_tokens", kInt32, true), listOf("response_tokens", kInt32, true),
		listOf("log_probs", kFloat64, true), listOf("loss_mask", kInt32, true),
		optStr("invalid"), optStr("notes"), boolean("emit"), optI32("sample"),
		mapOf("credit", kFloat64),
	}
}

// Columns of the messages table.
const (
	mRolloutID = iota
	mEpisode
	mSeq
	mTime
	mFrom
	mTo
	mKind
	mPayload
	mRecipients
	mQuiet
)

func messageSchema() []field {
	return []field{
		i64("rollout_id"), i64("episode"), i32("seq"), i32("time"),
		str("from"), str("to"), str("kind"), str("payload"),
		listOf("recipients", kInt32, false), boolean("quiet"),
	}
}

// Columns of the transitions table.
const (
	xRolloutID = iota
	xEpisode
	xStep
	xSeat
	xAgent
	xEvent
	xFrom
	xTo
)

func transitionSchema() []field {
	return []field{
		i64("rollout_id"), i64("episode"), i32("step"), i32("seat"), str("agent"),
		str("event"), str("from"), str("to"),
	}
}

// EpisodeTables are where an EpisodeWriter writes its four tables. A nil
// writer leaves its table out.
type EpisodeTables struct {
	Episodes, Turns, Messages, Transitions io.Writer
}

// EpisodeWriter writes episode records (what `troupe run --episodes-out`
// writes, or what a run hands its sinks) as four tables: one row per
// episode, per turn, per bus message and per transition.
type EpisodeWriter struct {
	episodes, turns, messages, transitions *table
	rows                                   EpisodeRows
	credit                                 map[string]float64 // reused per turn
}

// EpisodeRows counts the rows of each table an EpisodeWriter wrote.
type EpisodeRows struct {
	Episodes, Turns, Messages, Transitions int64
}

// NewEpisodeWriter returns a writer of the tables of dst. Close writes their
// footers; until then the writers hold incomplete files.
func NewEpisodeWriter(dst EpisodeTables) (*EpisodeWriter, error) {
	ew := &EpisodeWriter{}
	for _, t := range []struct {
		w      io.Writer
		schema func() []field
		into   **table
	}{
		{dst.Episodes, episodeSchema, &ew.episodes},
		{dst.Turns, turnSchema, &ew.turns},
		{dst.Messages, messageSchema, &ew.messages},
		{dst.Transitions, transitionSchema, &ew.transitions},
	} {
		if t.w == nil {
			continue
		}
		tab, err := newTable(t.w, t.schema())
		if err != nil {
			return nil, err
		}
		*t.into = tab
	}
	return ew, nil
}

// Write appends the rows of one episode and its credit (nil without
// allocators) to the tables.
func (ew *EpisodeWriter) Write(rec *episode.Record, credit *trajectories.Credit) error {
	if ew.episodes != nil {
		if err := ew.writeEpisode(rec, credit); err != nil {
			return err
		}
	}
	if ew.turns != nil {
		if err := ew.writeTurns(rec, credit); err != nil {
			return err
		}
	}
	if ew.messages != nil {
		if err := ew.writeMessages(rec); err != nil {
			return err
		}
	}
	if ew.transitions != nil {
		return ew.writeTransitions(rec)
	}
	return nil
}

func (ew *EpisodeWriter) writeEpisode(rec *episode.Record, credit *trajectories.Credit) error {
	t := ew.episodes
	if t.err != nil {
		return t.err
	}
	f := t.cols
	size := appendStr(f[eScenario], rec.Scenario)
	size += appendStrMap(f[eParams], nonNil(rec.Params))
	f[eSeed].uint64(rec.Seed)
	f[ePolicySeed].uint64(rec.PolicySeed)
	f[eEpisode].int64(rec.Index)
	f[eRolloutID].int64(rec.RolloutID)
	f[eGroupIndex].int64(rec.GroupIndex)
	size += appendStr(f[eStatus], string(rec.Status))
	size += appendStr(f[eEnd], rec.End)
	size += appendOptStr(f[eError], rec.Err)
	size += appendOptStr(f[eStack], rec.Stack)
	f[eSteps].int32(int32(rec.Steps))
	size += appendOptStr(f[eLabel], rec.Label)
	ids, roles := make([]string, len(rec.Seats)), make([]string, len(rec.Seats))
	for i, s := range rec.Seats {
		ids[i], roles[i] = s.ID, s.Role
	}
	size += appendStrs(f[eSeats], ids, false)
	size += appendStrs(f[eRoles], roles, false)
	f[eTurns].int32(int32(len(rec.Turns)))
	f[eSamples].int32(int32(rec.Emitted()))
	f[eMessages].int32(int32(len(rec.Messages)))
	f[eTransitions].int32(int32(len(rec.Transitions)))
	f[eTeamScore].float64(rec.Score.Team)
	size += appendFloats(f[eAgentScores], rec.Score.Agents, true)
	if credit == nil {
		f[eAllocators].null()
		f[eCreditNotes].null()
	} else {
		size += appendStrs(f[eAllocators], credit.Allocators, false)
		size += appendJSON(f[eCreditNotes], credit.Notes)
	}
	ew.rows.Episodes++
	return t.endRow(size)
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (ew *EpisodeWriter) writeTurns(rec *episode.Record, credit *trajectories.Credit) error {
	t := ew.turns
	k := 0 // the emitted turns' count so far: the next sample's number
	for pos := range rec.Turns {
		if t.err != nil {
			return t.err
		}
		tn := &rec.Turns[pos]
		f := t.cols
		f[tRolloutID].int64(rec.RolloutID)
		f[tEpisode].int64(rec.Index)
		f[tPosition].int32(int32(pos))
		f[tSeat].int32(int32(tn.Seat))
		agent, role := seat(rec, tn.Seat)
		size := appendStr(f[tAgent], agent)
		size += appendStr(f[tRole], role)
		f[tStep].int32(int32(tn.Step))
		f[tTurn].int32(int32(tn.Turn))
		size += appendStr(f[tState], string(tn.State))
		f[tSeed].uint64(tn.Seed)
		size += appendStr(f[tView], tn.View)
		size += appendStrs(f[tLegal], tn.Legal, true)
		size += appendInts(f[tInbox], tn.Inbox, false)
		size += appendStr(f[tAction], tn.Action)
		g := tn.Generated()
		size += appendOptStr(f[tCompletion], g.Completion)
		if g.Prompt == nil {
			f[tPrompt].null()
		} else if g.Prompt.Messages != nil {
			chat, err := marshal(g.Prompt.Messages)
			if err != nil {
				return err
			}
			size += appendStr(f[tPrompt], string(chat))
		} else {
			size += appendStr(f[tPrompt], g.Prompt.Text)
		}
		if g.Tokens == nil {
			for _, c := range []int{tPromptTokens, tResponseTokens, tLogProbs, tLossMask} {
				f[c].null()
			}
		} else {
			size += appendInts(f[tPromptTokens], g.Tokens.Prompt, false)
			size += appendInts(f[tResponseTokens], g.Tokens.Response, false)
			size += appendFloats(f[tLogProbs], g.Tokens.LogProbs, true)
			size += appendInts(f[tLossMask], g.Tokens.LossMask, true)
		}
		size += appendOptStr(f[tInvalid], tn.Invalid)
		size += appendJSON(f[tNotes], tn.Notes)
		f[tEmit].boolean(tn.Emit)
		if tn.Emit {
			f[tSample].int32(int32(k))
			size += appendFloatMap(f[tCredit], ew.creditOf(credit, k))
			k++
		} else {
			f[tSample].null()
			f[tCredit].null()
		}
		ew.rows.Turns++
		if err := t.endRow(size); err != nil {
			return err
		}
	}
	return nil
}

// creditOf returns the values of emitted turn k under each allocator, nil
// without credit. The map is reused from turn to turn.
func (ew *EpisodeWriter) creditOf(credit *trajectories.Credit, k int) map[string]float64 {
	if credit == nil {
		return nil
	}
	if ew.credit == nil {
		ew.credit = make(map[string]float64, len(credit.Allocators))
	}
	clear(ew.credit)
	for a, name := range credit.Allocators {
		if v, ok := credit.Value(a, k); ok {
			ew.credit[name] = v
		}
	}
	return ew.credit
}

// seat returns the id and role of seat i, empty when the record has no
// such seat (a decoded record is checked, one handed over in Go may not be).
func seat(rec *episode.Record, i int) (id, role string) {
	if i < 0 || i >= len(rec.Seats) {
		return "", ""
	}
	return rec.Seats[i].ID, rec.Seats[i].Role
}

func (ew *EpisodeWriter) writeMessages(rec *episode.Record) error {
	t := ew.messages
	for i := range rec.Messages {
		if t.err != nil {
			return t.err
		}
		m := &rec.Messages[i]
		f := t.cols
		f[mRolloutID].int64(rec.RolloutID)
		f[mEpisode].int64(rec.Index)
		f[mSeq].int32(int32(m.Seq))
		f[mTime].int32(int32(m.Time))
		size := appendStr(f[mFrom], m.From)
		size += appendStr(f[mTo], string(m.To))
		size += appendStr(f[mKind], m.Kind)
		size += appendStr(f[mPayload], m.Payload)
		size += appendInts(f[mRecipients], m.Recipients, false)
		f[mQuiet].boolean(m.Quiet)
		ew.rows.Messages++
		if err := t.endRow(size); err != nil {
			return err
		}
	}
	return nil
}

func (ew *EpisodeWriter) writeTransitions(rec *episode.Record) error {
	t := ew.transitions
	for i := range rec.Transitions {
		if t.err != nil {
			return t.err
		}
		x := &rec.Transitions[i]
		f := t.cols
		f[xRolloutID].int64(rec.RolloutID)
		f[xEpisode].int64(rec.Index)
		f[xStep].int32(int32(x.Step))
		f[xSeat].int32(int32(x.Seat))
		agent, _ := seat(rec, x.Seat)
		size := appendStr(f[xAgent], agent)
		size += appendStr(f[xEvent], string(x.Event))
		size += appendStr(f[xFrom], string(x.From))
		size += appendStr(f[xTo], string(x.To))
		ew.rows.Transitions++
		if err := t.endRow(size); err != nil {
			return err
		}
	}
	return nil
}

// Rows returns the number of rows written to each table.
func (ew *EpisodeWriter) Rows() EpisodeRows { return ew.rows }

// Close writes the last row group and the footer of each table. It does
// not close the io.Writers.
func (ew *EpisodeWriter) Close() error {
	var errs []error
	for _, t := range []*table{ew.episodes, ew.turns, ew.messages, ew.transitions} {
		if t != nil {
			errs = append(errs, t.close())
		}
	}
	return errors.Join(errs...)
}
