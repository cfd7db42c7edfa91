package parquet

import (
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

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
	sTeam
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

func sampleSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		i64("group_index"), i64("index"), i64("rollout_id"),
		str("prompt"), boolean("chat"),
		listOf("tokens", arrow.PrimitiveTypes.Int32, false),
		str("response"), i32("response_length"),
		optStr("label"),
		optF64("reward"), mapOf("rewards", arrow.PrimitiveTypes.Float64),
		listOf("loss_mask", arrow.PrimitiveTypes.Int32, true),
		listOf("rollout_log_probs", arrow.PrimitiveTypes.Float64, true),
		boolean("remove_sample"), str("status"),
		str("scenario"), u64("seed"), i64("episode"), str("agent"), str("role"),
		i32("turn"), i32("step"), str("state"), optStr("team"),
		f64("team_reward"), optF64("agent_score"), str("allocator"), boolean("text_only"),
		str("end"), optStr("error"), optStr("action"),
		boolean("placeholder"), optStr("extra"),
	}, nil)
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
	f := sw.t.b.Fields()
	size := 0
	f[sGroupIndex].(*array.Int64Builder).Append(s.GroupIndex)
	f[sIndex].(*array.Int64Builder).Append(s.Index)
	f[sRolloutID].(*array.Int64Builder).Append(s.RolloutID)
	if s.Prompt.Messages != nil {
		chat, err := marshal(s.Prompt.Messages)
		if err != nil {
			return err
		}
		size += appendStr(f[sPrompt], string(chat))
	} else {
		size += appendStr(f[sPrompt], s.Prompt.Text)
	}
	f[sChat].(*array.BooleanBuilder).Append(s.Prompt.Messages != nil)
	size += appendInts(f[sTokens], s.Tokens, false)
	size += appendStr(f[sResponse], s.Response)
	f[sResponseLength].(*array.Int32Builder).Append(int32(s.ResponseLength))
	if s.Label.IsNull() {
		f[sLabel].AppendNull()
	} else {
		size += appendStr(f[sLabel], s.Label.JSON())
	}
	switch s.Reward.Kind {
	case protocol.RewardDict:
		f[sReward].AppendNull()
		size += appendFloatMap(f[sRewards], s.Reward.Dict)
	default:
		f[sReward].(*array.Float64Builder).Append(s.Reward.Value)
		f[sRewards].AppendNull()
	}
	size += appendInts(f[sLossMask], s.LossMask, true)
	size += appendFloats(f[sLogProbs], s.RolloutLogProbs, true)
	f[sRemove].(*array.BooleanBuilder).Append(s.RemoveSample)
	size += appendStr(f[sStatus], string(s.Status))
	m := &s.Metadata
	size += appendStr(f[sScenario], m.Scenario)
	f[sSeed].(*array.Uint64Builder).Append(m.Seed)
	f[sEpisode].(*array.Int64Builder).Append(m.Episode)
	size += appendStr(f[sAgent], m.Agent)
	size += appendStr(f[sRole], m.Role)
	f[sTurn].(*array.Int32Builder).Append(int32(m.Turn))
	f[sStep].(*array.Int32Builder).Append(int32(m.Step))
	size += appendStr(f[sState], m.State)
	size += appendOptStr(f[sTeam], m.Team)
	f[sTeamReward].(*array.Float64Builder).Append(m.TeamReward)
	appendOptF64(f[sAgentScore], m.AgentScore)
	size += appendStr(f[sAllocator], m.Allocator)
	f[sTextOnly].(*array.BooleanBuilder).Append(m.TextOnly)
	size += appendStr(f[sEnd], m.End)
	size += appendOptStr(f[sError], m.Error)
	size += appendOptStr(f[sAction], m.Action)
	f[sPlaceholder].(*array.BooleanBuilder).Append(trajectories.IsPlaceholder(s))
	size += appendJSON(f[sExtra], m.Extra)
	sw.n++
	return sw.t.endRow(size)
}

// Rows returns the number of rows written.
func (sw *SampleWriter) Rows() int64 { return sw.n }

// Close writes the last row group and the footer. It does not close the
// io.Writer.
func (sw *SampleWriter) Close() error { return sw.t.close() }
