package parquet

import (
	"io"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// Columns of the samples table, in order: its schema is sampleSchema.
const (
	sGroupIndex = iota
	sIndex
	sRolloutID
	sPrompt
	sChat
	sTokens
	sResponse
	sResponseLength
	sLabel
	sReward
	sRewards
	sLossMask
	sLogProbs
	sRemove
	sStatus
	sScenario
	sSeed
	sEpisode
	sAgent
	sRole
	sTurn
	sStep
	sState
	sTeamReward
	sAgentScore
	sAllocator
	sTextOnly
	sEnd
	sError
	sAction
	sPlaceholder
	sExtra
)

func sampleSchema() []field {
	return []field{
		i64("group_index"), i64("index"), i64("rollout_id"),
		str("prompt"), boolean("chat"),
		listOf("tokens", kInt32, false),
		str("response"), i32("response_length"),
		optStr("label"),
		optF64("reward"), mapOf("rewards", kFloat64),
		listOf("loss_mask", kInt32, true),
		listOf("rollout_log_probs", kFloat64, true),
		boolean("remove_sample"), str("status"),
		str("scenario"), u64("seed"), i64("episode"), str("agent"), str("role"),
		i32("turn"), i32("step"), str("state"),
		f64("team_reward"), optF64("agent_score"), str("allocator"), boolean("text_only"),
		str("end"), optStr("error"), optStr("action"),
		boolean("placeholder"), optStr("extra"),
	}
}

// SampleWriter writes samples as the samples table: one row per sample,
// slime's fields then the metadata's, each typed key a column of its own.
type SampleWriter struct {
	t *table
	n int64
}

// NewSampleWriter returns a writer of the samples table to w. Close writes
// the file's footer; until then w holds an incomplete file.
func NewSampleWriter(w io.Writer) (*SampleWriter, error) {
	t, err := newTable(w, sampleSchema())
	if err != nil {
		return nil, err
	}
	return &SampleWriter{t: t}, nil
}

// Write appends one sample's row.
func (sw *SampleWriter) Write(s *protocol.Sample) error {
	if sw.t.err != nil {
		return sw.t.err
	}
	f := sw.t.cols
	size := 0
	f[sGroupIndex].int64(s.GroupIndex)
	f[sIndex].int64(s.Index)
	f[sRolloutID].int64(s.RolloutID)
	if s.Prompt.Messages != nil {
		chat, err := marshal(s.Prompt.Messages)
		if err != nil {
			return err
		}
		size += appendStr(f[sPrompt], string(chat))
	} else {
		size += appendStr(f[sPrompt], s.Prompt.Text)
	}
	f[sChat].boolean(s.Prompt.Messages != nil)
	size += appendInts(f[sTokens], s.Tokens, false)
	size += appendStr(f[sResponse], s.Response)
	f[sResponseLength].int32(int32(s.ResponseLength))
	if s.Label.IsNull() {
		f[sLabel].null()
	} else {
		size += appendStr(f[sLabel], s.Label.JSON())
	}
	switch s.Reward.Kind {
	case protocol.RewardDict:
		f[sReward].null()
		size += appendFloatMap(f[sRewards], s.Reward.Dict)
	default:
		f[sReward].float64(s.Reward.Value)
		f[sRewards].null()
	}
	size += appendInts(f[sLossMask], s.LossMask, true)
	size += appendFloats(f[sLogProbs], s.RolloutLogProbs, true)
	f[sRemove].boolean(s.RemoveSample)
	size += appendStr(f[sStatus], string(s.Status))
	m := &s.Metadata
	size += appendStr(f[sScenario], m.Scenario)
	f[sSeed].uint64(m.Seed)
	f[sEpisode].int64(m.Episode)
	size += appendStr(f[sAgent], m.Agent)
	size += appendStr(f[sRole], m.Role)
	f[sTurn].int32(int32(m.Turn))
	f[sStep].int32(int32(m.Step))
	size += appendStr(f[sState], m.State)
	f[sTeamReward].float64(m.TeamReward)
	appendOptF64(f[sAgentScore], m.AgentScore)
	size += appendStr(f[sAllocator], m.Allocator)
	f[sTextOnly].boolean(m.TextOnly)
	size += appendStr(f[sEnd], m.End)
	size += appendOptStr(f[sError], m.Error)
	size += appendOptStr(f[sAction], m.Action)
	f[sPlaceholder].boolean(trajectories.IsPlaceholder(s))
	size += appendJSON(f[sExtra], m.Extra)
	sw.n++
	return sw.t.endRow(size)
}

// Rows returns the number of rows written.
func (sw *SampleWriter) Rows() int64 { return sw.n }

// Close writes the last row group and the footer. It does not close the
// io.Writer.
func (sw *SampleWriter) Close() error { return sw.t.close() }
