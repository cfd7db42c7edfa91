package server

import (
	"errors"
	"strconv"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// errAnswerTooLarge is the answer writer's refusal of an answer past
// MaxAnswerBytes.
var errAnswerTooLarge = errors.New("the answer is larger than the service's limit")

// answerWriter is the sink of a rollout request's run (a
// trajectories.Sink, behind trajectories.Output): it encodes each episode
// it is given as one rollout of the answer (rollout.Response), the
// envelope in rollout.Rollout's key order, the samples with
// protocol.Sample.AppendJSON (the slime encoding, fixed key order, no
// reflection). It refuses an episode (errAnswerTooLarge) as soon as the
// answer grows past max bytes, so that a too large answer costs at most
// max bytes and one sample; end closes the answer.
//
// The envelope is hand-written rather than encoding/json's over
// rollout.Response for three reasons: encoding/json re-validates every
// sample's AppendJSON output (BenchmarkAnswerEncode: about 15x the time
// and 600 allocations where this makes none, for 16 episodes), it
// refuses a NaN or infinite reward where this writes null, and it could
// not stop mid-answer at max bytes. TestAnswerWriterIsEncodingJSON holds
// the two to the same bytes, so that rollout.Rollout stays the one
// definition of the envelope.
type answerWriter struct {
	buf   []byte
	start int // where the answer starts in buf
	max   int64
	n     int // the episodes written
}

// newAnswerWriter starts an answer at the end of buf.
func newAnswerWriter(buf []byte, max int64) *answerWriter {
	w := &answerWriter{buf: buf, start: len(buf), max: max}
	w.buf = append(w.buf, `{"rollouts":[`...)
	return w
}

func (w *answerWriter) over() bool { return int64(len(w.buf)-w.start) > w.max }

// WriteEpisode implements trajectories.Sink: it appends ep's rollout.
func (w *answerWriter) WriteEpisode(ep *trajectories.Episode) error {
	b := w.buf
	if w.n > 0 {
		b = append(b, ',')
	}
	w.n++
	b = append(b, `{"rollout_id":`...)
	b = strconv.AppendInt(b, ep.RolloutID, 10)
	b = append(b, `,"group_index":`...)
	b = strconv.AppendInt(b, ep.GroupIndex, 10)
	b = append(b, `,"episode":`...)
	b = strconv.AppendInt(b, ep.Index, 10)
	b = append(b, `,"seed":`...)
	b = strconv.AppendUint(b, ep.Seed, 10)
	b = append(b, `,"policy_seed":`...)
	b = strconv.AppendUint(b, ep.PolicySeed, 10)
	b = append(b, `,"status":`...)
	b = protocol.AppendString(b, string(ep.Status))
	b = append(b, `,"end":`...)
	b = protocol.AppendString(b, ep.End)
	b = append(b, `,"error":`...)
	b = protocol.AppendString(b, ep.Err)
	b = append(b, `,"team_reward":`...)
	b = protocol.AppendFloat(b, ep.Score.Team)
	b = append(b, `,"teams":`...)
	if ep.Teams == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for t, name := range ep.Teams {
			if t > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"team":`...)
			b = protocol.AppendString(b, name)
			b = append(b, `,"reward":`...)
			b = protocol.AppendFloat(b, ep.Score.Of(t))
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"agent_scores":`...)
	if ep.Score.Agents == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for k, v := range ep.Score.Agents {
			if k > 0 {
				b = append(b, ',')
			}
			b = protocol.AppendFloat(b, v)
		}
		b = append(b, ']')
	}
	b = append(b, `,"seats":[`...)
	for k, seat := range ep.Seats {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = protocol.AppendString(b, seat.ID)
		b = append(b, `,"role":`...)
		b = protocol.AppendString(b, seat.Role)
		if ep.Teams != nil {
			b = append(b, `,"team":`...)
			b = protocol.AppendString(b, ep.TeamName(seat.Team))
		}
		b = append(b, '}')
	}
	b = append(b, `],"steps":`...)
	b = strconv.AppendInt(b, int64(ep.Steps), 10)
	b = append(b, `,"turns":`...)
	b = strconv.AppendInt(b, int64(len(ep.Turns)), 10)
	b = append(b, `,"samples":[`...)
	for k := range ep.Samples {
		if k > 0 {
			b = append(b, ',')
		}
		b = ep.Samples[k].AppendJSON(b)
		if int64(len(b)-w.start) > w.max {
			w.buf = b
			return errAnswerTooLarge
		}
	}
	w.buf = append(b, "]}"...)
	return nil
}

// end closes the answer and returns buf with it; false when it is larger
// than max.
func (w *answerWriter) end() ([]byte, bool) {
	w.buf = append(w.buf, "]}\n"...)
	return w.buf, !w.over()
}
