package trajectories_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

var layouts = []struct {
	name   string
	layout trajectories.Layout
}{
	{"flat", trajectories.Flat},
	{"nested", trajectories.Nested},
}

// recorder is an io.Writer that keeps a copy of every Write call.
type recorder struct {
	writes [][]byte
}

func (r *recorder) Write(p []byte) (int, error) {
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

func (r *recorder) all() []byte { return bytes.Join(r.writes, nil) }

// writeAll writes eps with a fresh writer in layout and returns the output.
func writeAll(t testing.TB, layout trajectories.Layout, eps []*trajectories.Episode) []byte {
	t.Helper()
	var buf bytes.Buffer
	jw := trajectories.NewJSONLWriter(&buf, layout)
	for _, ep := range eps {
		require.NoError(t, jw.WriteEpisode(ep))
	}
	require.NoError(t, jw.Flush())
	return buf.Bytes()
}

// lines splits data into its lines, without their newlines.
func lines(data []byte) []string {
	s := strings.TrimSuffix(string(data), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestJSONLWriterFlat(t *testing.T) {
	eps := fxEpisodes(3, 0, 1, 4)
	data := writeAll(t, trajectories.Flat, eps)
	flat, rollouts := fxSamplesOf(eps)

	require.True(t, bytes.HasSuffix(data, []byte("\n")), "output must end with a whole line")
	ls := lines(data)
	require.Len(t, ls, len(flat), "one line per sample")
	for i, l := range ls {
		assert.Equal(t, string(flat[i].AppendJSON(nil)), l, "line %d", i+1)
	}

	all, err := trajectories.ReadAll(bytes.NewReader(data))
	require.NoError(t, err)
	assert.Equal(t, flat, all)

	got, err := trajectories.ReadRollouts(bytes.NewReader(data))
	require.NoError(t, err)
	assert.Equal(t, rollouts, got)
}

func TestJSONLWriterNested(t *testing.T) {
	eps := fxEpisodes(3, 0, 1, 4)
	data := writeAll(t, trajectories.Nested, eps)
	flat, rollouts := fxSamplesOf(eps)

	require.True(t, bytes.HasSuffix(data, []byte("\n")))
	ls := lines(data)
	require.Len(t, ls, len(rollouts), "one line per non-empty episode")
	for i, l := range ls {
		var raw []json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(l), &raw), "line %d is not a JSON list", i+1)
		require.Len(t, raw, len(rollouts[i]))
		for j := range raw {
			assert.Equal(t, string(rollouts[i][j].AppendJSON(nil)), string(raw[j]))
		}
	}

	all, err := trajectories.ReadAll(bytes.NewReader(data))
	require.NoError(t, err)
	assert.Equal(t, flat, all)

	got, err := trajectories.ReadRollouts(bytes.NewReader(data))
	require.NoError(t, err)
	assert.Equal(t, rollouts, got)
}

func TestJSONLWriterEmptyEpisodeWritesNothing(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			var rec recorder
			jw := trajectories.NewJSONLWriter(&rec, l.layout)
			empty := fxEpisode(1, 0, 0, 0)
			jw.Prepare(empty)
			require.NoError(t, jw.WriteEpisode(empty))
			require.NoError(t, jw.WriteEpisode(&trajectories.Episode{}))
			require.NoError(t, jw.Flush())
			assert.Empty(t, rec.writes, "Flush of nothing must not call Write")
		})
	}
}

func TestJSONLWriterPrepareIsByteIdentical(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			want := writeAll(t, l.layout, fxEpisodes(5, 1, 0, 7))

			eps := fxEpisodes(5, 1, 0, 7)
			var buf bytes.Buffer
			jw := trajectories.NewJSONLWriter(&buf, l.layout)
			// The runner prepares on worker goroutines, concurrently.
			var wg sync.WaitGroup
			for _, ep := range eps {
				wg.Go(func() { jw.Prepare(ep) })
			}
			wg.Wait()
			for _, ep := range eps {
				require.NoError(t, jw.WriteEpisode(ep))
			}
			require.NoError(t, jw.Flush())
			assert.Equal(t, string(want), buf.String())
		})
	}
}

// TestJSONLWriterStitchesIndexes prepares episodes before their indexes are
// known, as the runner does, and checks the indexes written are the ones set
// afterwards.
func TestJSONLWriterStitchesIndexes(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			eps := fxEpisodes(3, 2)
			var buf bytes.Buffer
			jw := trajectories.NewJSONLWriter(&buf, l.layout)
			for _, ep := range eps {
				for i := range ep.Samples {
					ep.Samples[i].Index, ep.Samples[i].GroupIndex = 0, 0
				}
				jw.Prepare(ep)
			}
			// 1 first (the zero writer's last is 0, but it has no digits
			// to count up), then over a gap, counted up across a digit
			// (the writer counts in decimal digits), then down, to 0, in
			// two groups.
			index := []int64{1, 999, 1000, 9, 0}
			group := []int64{9, 9, 9, 10, 10}
			k := 0
			for _, ep := range eps {
				for i := range ep.Samples {
					ep.Samples[i].Index, ep.Samples[i].GroupIndex = index[k], group[k]
					k++
				}
				require.NoError(t, jw.WriteEpisode(ep))
			}
			require.NoError(t, jw.Flush())

			all, err := trajectories.ReadAll(&buf)
			require.NoError(t, err)
			require.Len(t, all, 5)
			for i, s := range all {
				assert.Equal(t, index[i], s.Index)
				assert.Equal(t, group[i], s.GroupIndex)
			}
			flat, _ := fxSamplesOf(eps)
			assert.Equal(t, flat, all)
		})
	}
}

// TestJSONLWriterStalePrepare changes an episode's samples after Prepare:
// the writer must not write the stale encoding when the sample count no
// longer matches.
func TestJSONLWriterStalePrepare(t *testing.T) {
	ep := fxEpisode(4, 0, 2, 0)
	var buf bytes.Buffer
	jw := trajectories.NewJSONLWriter(&buf, trajectories.Flat)
	jw.Prepare(ep)
	ep.Samples = append(ep.Samples, fxSample(4, 0, 2))
	ep.Samples[2].Index = 2
	require.NoError(t, jw.WriteEpisode(ep))
	require.NoError(t, jw.Flush())
	all, err := trajectories.ReadAll(&buf)
	require.NoError(t, err)
	assert.Equal(t, ep.Samples, all)
}

// TestJSONLWriterWritesWholeGroups writes several times flushThreshold, in
// groups of four episodes, and checks that the writer holds everything back
// until a group ends past the threshold, and that every Write call ends
// exactly at a group boundary.
func TestJSONLWriterWritesWholeGroups(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			var rec recorder
			jw := trajectories.NewJSONLWriter(&rec, l.layout)
			boundaries := map[int]bool{}
			var want []byte
			written := 0
			for i := range 800 {
				ep := fxEpisode(int64(i), int64(i/4), 1+i%7, int64(i*8))
				ep.Samples[0].Prompt = protocol.TextPrompt(strings.Repeat("padding ", 200+i%50))
				// Episode sizes vary; the expected bytes come from a separate
				// writer that holds this episode alone.
				want = append(want, writeAll(t, l.layout, []*trajectories.Episode{ep})...)
				writesBefore := len(rec.writes)
				require.NoError(t, jw.WriteEpisode(ep))
				require.Len(t, rec.writes, writesBefore, "nothing is written inside a group")
				if i%4 != 3 {
					continue
				}
				boundaries[len(want)] = true
				require.NoError(t, jw.EndGroup())
				if len(rec.writes) == writesBefore {
					require.Less(t, len(want)-written, trajectories.FlushThreshold, "the writer holds more than the threshold")
				} else {
					require.Len(t, rec.writes, writesBefore+1, "one Write per flush")
					require.GreaterOrEqual(t, len(rec.writes[writesBefore]), trajectories.FlushThreshold, "wrote before reaching the threshold")
					written += len(rec.writes[writesBefore])
				}
			}
			require.NoError(t, jw.Flush())
			require.GreaterOrEqual(t, len(rec.writes), 3, "want several threshold flushes; grow the test")

			end := 0
			for i, w := range rec.writes {
				end += len(w)
				assert.True(t, boundaries[end], "Write %d ends at byte %d, inside a group", i, end)
				assert.True(t, bytes.HasSuffix(w, []byte("\n")), "Write %d does not end a line", i)
			}
			assert.Equal(t, len(want), end)
			assert.True(t, bytes.Equal(want, rec.all()), "concatenated writes differ from the episodes' encodings")
		})
	}
}

// TestJSONLWriterDropGroup: a dropped group's episodes are never written;
// the ended groups before it are.
func TestJSONLWriterDropGroup(t *testing.T) {
	var rec recorder
	jw := trajectories.NewJSONLWriter(&rec, trajectories.Flat)
	first := fxEpisode(0, 0, 2, 0)
	require.NoError(t, jw.WriteEpisode(first))
	require.NoError(t, jw.EndGroup())
	require.NoError(t, jw.WriteEpisode(fxEpisode(1, 1, 2, 2)))
	jw.DropGroup()
	require.NoError(t, jw.Flush())
	assert.Equal(t, string(writeAll(t, trajectories.Flat, []*trajectories.Episode{first})), string(rec.all()))
}

// TestJSONLWriterHugeEpisode writes one episode larger than the threshold as
// a group of its own: it is written in one call, as soon as the group ends.
func TestJSONLWriterHugeEpisode(t *testing.T) {
	var rec recorder
	jw := trajectories.NewJSONLWriter(&rec, trajectories.Nested)
	ep := fxEpisode(1, 0, 3, 0)
	ep.Samples[1].Prompt = protocol.TextPrompt(strings.Repeat("x", trajectories.FlushThreshold))
	require.NoError(t, jw.WriteEpisode(ep))
	require.NoError(t, jw.EndGroup())
	require.Len(t, rec.writes, 1)
	assert.Equal(t, string(writeAll(t, trajectories.Nested, []*trajectories.Episode{ep})), string(rec.writes[0]))
	require.NoError(t, jw.Flush())
	assert.Len(t, rec.writes, 1)
}

// failAfter accepts limit bytes in total, then fails; calls counts Write
// calls.
type failAfter struct {
	limit int
	err   error // nil: short write without an error
	got   []byte
	calls int
}

func (f *failAfter) Write(p []byte) (int, error) {
	f.calls++
	n := min(len(p), f.limit-len(f.got))
	f.got = append(f.got, p[:n]...)
	if n < len(p) {
		return n, f.err
	}
	return n, nil
}

var errMedium = errors.New("medium failed")

func TestJSONLWriterStickyError(t *testing.T) {
	first := writeAll(t, trajectories.Flat, fxEpisodes(2))
	w := &failAfter{limit: len(first) + 10, err: errMedium}
	jw := trajectories.NewJSONLWriter(w, trajectories.Flat)
	eps := fxEpisodes(2, 3)
	require.NoError(t, jw.WriteEpisode(eps[0]))
	require.NoError(t, jw.Flush())
	require.NoError(t, jw.WriteEpisode(eps[1]))
	err := jw.Flush()
	require.ErrorIs(t, err, errMedium)
	assert.Contains(t, err.Error(), "write samples")
	calls := w.calls

	// Every later call reports the same failure and writes nothing.
	assert.ErrorIs(t, jw.WriteEpisode(fxEpisode(9, 9, 1, 99)), errMedium)
	assert.ErrorIs(t, jw.Flush(), errMedium)
	jw.Prepare(fxEpisode(9, 9, 1, 99)) // harmless
	assert.ErrorIs(t, jw.Flush(), errMedium)
	assert.Equal(t, calls, w.calls, "a failed writer must not write again")
	assert.Equal(t, string(first), string(w.got[:len(first)]))
}

func TestJSONLWriterShortWrite(t *testing.T) {
	w := &failAfter{limit: 5} // short write, no error: a broken io.Writer
	jw := trajectories.NewJSONLWriter(w, trajectories.Flat)
	require.NoError(t, jw.WriteEpisode(fxEpisode(1, 0, 1, 0)))
	assert.ErrorIs(t, jw.Flush(), io.ErrShortWrite)
	assert.ErrorIs(t, jw.WriteEpisode(fxEpisode(2, 0, 1, 1)), io.ErrShortWrite)
}

func TestReaderMixedLayouts(t *testing.T) {
	eps := fxEpisodes(2, 3, 1, 2, 2)
	var in bytes.Buffer
	in.Write(writeAll(t, trajectories.Flat, eps[:2]))
	in.WriteString("\n   \n\t\r\n") // blank lines are skipped
	in.Write(writeAll(t, trajectories.Nested, eps[2:4]))
	in.Write(bytes.ReplaceAll(writeAll(t, trajectories.Flat, eps[4:]), []byte("\n"), []byte("\r\n")))
	flat, rollouts := fxSamplesOf(eps)

	all, err := trajectories.ReadAll(bytes.NewReader(in.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, flat, all)

	got, err := trajectories.ReadRollouts(bytes.NewReader(in.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, rollouts, got)
}

func TestReaderNextAndRollout(t *testing.T) {
	eps := fxEpisodes(2, 1, 3)
	var in bytes.Buffer
	in.Write(writeAll(t, trajectories.Flat, eps[:2]))
	in.Write(writeAll(t, trajectories.Nested, eps[2:]))

	r := trajectories.NewReader(&in)
	// The first rollout reads one line ahead to see where it ends ...
	got, err := r.Rollout()
	require.NoError(t, err)
	assert.Equal(t, eps[0].Samples, got)
	// ... and Next returns that line, not the one after it.
	got, err = r.Next()
	require.NoError(t, err)
	assert.Equal(t, eps[1].Samples, got)
	// Next returns a nested line whole.
	got, err = r.Next()
	require.NoError(t, err)
	assert.Equal(t, eps[2].Samples, got)
	for range 2 {
		_, err = r.Next()
		assert.ErrorIs(t, err, io.EOF)
		_, err = r.Rollout()
		assert.ErrorIs(t, err, io.EOF)
	}
}

// TestReaderFlatRolloutBoundaries checks that a flat rollout ends where the
// rollout_id changes or a nested line starts.
func TestReaderFlatRolloutBoundaries(t *testing.T) {
	a, b := fxEpisode(5, 0, 2, 0), fxEpisode(6, 0, 1, 2)
	c := fxEpisode(5, 0, 1, 3) // rollout 5 again, after 6: a separate run
	var in bytes.Buffer
	in.Write(writeAll(t, trajectories.Flat, []*trajectories.Episode{a, b, c}))
	in.Write(writeAll(t, trajectories.Nested, []*trajectories.Episode{fxEpisode(5, 0, 2, 4)}))
	in.Write(writeAll(t, trajectories.Flat, []*trajectories.Episode{fxEpisode(5, 0, 1, 6)}))

	got, err := trajectories.ReadRollouts(&in)
	require.NoError(t, err)
	var sizes []int
	for _, r := range got {
		sizes = append(sizes, len(r))
		for _, s := range r {
			assert.Equal(t, r[0].RolloutID, s.RolloutID)
		}
	}
	assert.Equal(t, []int{2, 1, 1, 2, 1}, sizes)
}

func TestReaderEmptyInput(t *testing.T) {
	for _, in := range []string{"", "\n", "  \n\n \t "} {
		all, err := trajectories.ReadAll(strings.NewReader(in))
		require.NoError(t, err)
		assert.Empty(t, all)
		rollouts, err := trajectories.ReadRollouts(strings.NewReader(in))
		require.NoError(t, err)
		assert.Empty(t, rollouts)
	}
}

func TestReaderTruncatedLastLine(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			eps := fxEpisodes(2, 2)
			data := writeAll(t, l.layout, eps)
			cut := data[:len(data)-20] // inside the last line

			all, err := trajectories.ReadAll(bytes.NewReader(cut))
			require.ErrorIs(t, err, trajectories.ErrTruncated)
			lastLine := len(lines(data))
			assert.Contains(t, err.Error(), "line "+strconv.Itoa(lastLine)+":")
			// What came before the cut line is returned.
			flat, _ := fxSamplesOf(eps)
			want := flat[:len(flat)-1]
			if l.layout == trajectories.Nested {
				want = flat[:2]
			}
			assert.Equal(t, want, all)

			_, err = trajectories.ReadRollouts(bytes.NewReader(cut))
			assert.ErrorIs(t, err, trajectories.ErrTruncated)

			// A complete last line without its newline is also a cut: the
			// writer always ends lines.
			_, err = trajectories.ReadAll(bytes.NewReader(data[:len(data)-1]))
			assert.ErrorIs(t, err, trajectories.ErrTruncated)
		})
	}
}

func TestReaderBadLine(t *testing.T) {
	good := string(writeAll(t, trajectories.Flat, fxEpisodes(2)))
	tests := []struct {
		name    string
		line    string
		decode  bool // the error wraps protocol.ErrDecode
		mention string
	}{
		{"garbage", "this is not json", true, ""},
		{"truncated object", `{"rollout_id":1,`, true, ""},
		{"missing status", `{"rollout_id":1}`, true, "status"},
		{"bad status", `{"rollout_id":1,"status":"OK"}`, true, "OK"},
		{"null", `null`, true, "rollout_id"},
		{"garbage list", `[1, 2`, false, ""},
		{"list of numbers", `[1, 2]`, false, ""},
		{"list with a bad sample", `[{"rollout_id":1,"status":"done"}]`, true, "done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := good + "\n" + tt.line + "\n" + good
			_, err := trajectories.ReadAll(strings.NewReader(in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "line 4:", "the error must name the line")
			assert.Contains(t, err.Error(), tt.mention)
			if tt.decode {
				assert.ErrorIs(t, err, protocol.ErrDecode)
			}
			_, err = trajectories.ReadRollouts(strings.NewReader(in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "line 4:")
		})
	}
}

func TestReaderLongLines(t *testing.T) {
	// Lines far longer than the reader's 64 KiB buffer, in both layouts.
	eps := fxEpisodes(1, 3, 1)
	eps[1].Samples[0].Prompt = protocol.TextPrompt(strings.Repeat("long ", 200_000))
	eps[1].Samples[2].Response = strings.Repeat("é", 100_000)
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			data := writeAll(t, l.layout, eps)
			flat, rollouts := fxSamplesOf(eps)
			all, err := trajectories.ReadAll(iotest.HalfReader(bytes.NewReader(data)))
			require.NoError(t, err)
			assert.Equal(t, flat, all)
			got, err := trajectories.ReadRollouts(iotest.OneByteReader(bytes.NewReader(data)))
			require.NoError(t, err)
			assert.Equal(t, rollouts, got)
		})
	}
}

func TestReaderUnderlyingError(t *testing.T) {
	good := writeAll(t, trajectories.Flat, fxEpisodes(2))
	r := io.MultiReader(bytes.NewReader(good), iotest.ErrReader(errMedium))
	all, err := trajectories.ReadAll(r)
	require.ErrorIs(t, err, errMedium)
	assert.Contains(t, err.Error(), "line 3")
	assert.Len(t, all, 2)
}
