package trajectories_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

var update = flag.Bool("update", false, "rewrite the golden episode lines in testdata")

// played runs n episodes of a built-in scenario under team and individual
// credit (dict rewards) and returns the samples and episode files it wrote.
func played(t testing.TB, name string, n int) (samples, episodes []byte) {
	t.Helper()
	return playedTree(t, name, n, nil)
}

// playedTree is played with tree sampling (nil: none) and, with a tree,
// the at-grpo allocator too.
func playedTree(t testing.TB, name string, n int, tree *episode.Tree) (samples, episodes []byte) {
	t.Helper()
	sc, err := scenarios.Builtin().Lookup(name)
	require.NoError(t, err)
	params, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	def := sc.Info().DefaultPolicy
	if def == "" {
		def = "random"
	}
	policy, err := scenariotest.NamedPolicy(sc, params, def)
	require.NoError(t, err)
	var sb, eb bytes.Buffer
	allocs := []trajectories.Allocator{credit.Team{}, credit.Individual{}}
	if tree != nil {
		allocs = append(allocs, credit.NewATGRPO())
	}
	sum, err := play.Run(context.Background(), play.Config{
		Play: env.Play{Scenario: sc, Params: params, Policy: policy}, Drive: env.Drive{Tree: tree},
		Episodes:    n,
		GroupSize:   2,
		Seed:        3,
		Concurrency: 2,
	}, &trajectories.Output{Sink: trajectories.Tee(trajectories.NewJSONLWriter(&sb, trajectories.Flat), trajectories.NewEpisodeWriter(&eb)), Allocators: allocs, Format: trajectories.RewardDict})
	require.NoError(t, err)
	require.Equal(t, n, sum.Episodes)
	return sb.Bytes(), eb.Bytes()
}

func readEpisodes(t testing.TB, data []byte) ([]*episode.Record, []*trajectories.Credit) {
	t.Helper()
	r := trajectories.NewEpisodeReader(bytes.NewReader(data))
	var recs []*episode.Record
	var credits []*trajectories.Credit
	for {
		rec, c, err := r.Next()
		if errors.Is(err, io.EOF) {
			return recs, credits
		}
		require.NoError(t, err)
		recs = append(recs, rec)
		credits = append(credits, c)
	}
}

// TestEpisodeFileProjectsToTheSamples reads an episode file back and
// projects it: the samples are those the run wrote, byte for byte. The
// sample is a projection of the record and its credit.
func TestEpisodeFileProjectsToTheSamples(t *testing.T) {
	for _, name := range []string{"tictactoe", "signal", "committee", "negotiation", "tree-tictactoe", "tree-negotiation"} {
		t.Run(name, func(t *testing.T) {
			var tree *episode.Tree
			if scenario, ok := strings.CutPrefix(name, "tree-"); ok {
				name, tree = scenario, &episode.Tree{K: 3, Alpha: 0.5}
			}
			samples, episodes := playedTree(t, name, 6, tree)
			require.Equal(t, 6, bytes.Count(episodes, []byte("\n")), "one line per episode")
			recs, credits := readEpisodes(t, episodes)
			require.Len(t, recs, 6)
			var again bytes.Buffer
			w := trajectories.NewJSONLWriter(&again, trajectories.Flat)
			index := int64(0)
			for i, rec := range recs {
				assert.Equal(t, int64(i), rec.Index, "episodes in order")
				ep := trajectories.NewEpisode(rec)
				trajectories.ApplyCredit(ep, credits[i], trajectories.RewardDict)
				for k := range ep.Samples {
					ep.Samples[k].Index = index
					index++
				}
				require.NoError(t, w.WriteEpisode(ep))
			}
			require.NoError(t, w.Flush())
			assert.Equal(t, string(samples), again.String())
		})
	}
}

// TestEpisodeLineRoundTrip: a decoded line encodes to the same bytes.
func TestEpisodeLineRoundTrip(t *testing.T) {
	for _, name := range []string{"signal", "werewolf"} {
		_, episodes := played(t, name, 4)
		recs, credits := readEpisodes(t, episodes)
		var out []byte
		for i, rec := range recs {
			var err error
			out, err = trajectories.AppendEpisodeJSON(out, rec, credits[i])
			require.NoError(t, err)
		}
		assert.Equal(t, string(episodes), string(out), name)
	}
}

// A scenario with teams: the line names them, each seat's and each
// team's reward, and the decoder reads them back; it refuses teams that
// do not add up.
func TestEpisodeTeams(t *testing.T) {
	_, episodes := played(t, "werewolf", 1)
	recs, _ := readEpisodes(t, episodes)
	rec := recs[0]
	assert.Equal(t, []string{"village", "wolves"}, rec.Teams)
	require.Len(t, rec.Score.Teams, 2)
	assert.Equal(t, 0.0, rec.Score.Teams[0]+rec.Score.Teams[1])
	for _, s := range rec.Seats {
		assert.Equal(t, s.Role == "wolf", s.Team == 1, s.ID)
	}
	line := string(bytes.TrimSpace(episodes))
	assert.Contains(t, line, `,"teams":["village","wolves"],"seats":[{"id":"player-0","role":`)
	for name, tc := range map[string]struct{ old, new, text string }{
		"unknown team":     {`"team":"wolves"}`, `"team":"sheep"}`, `is on team "sheep", not one of the teams`},
		"a seat teamless":  {`,"team":"village"}`, `}`, `is on team "", not one of the teams`},
		"one team":         {`"teams":["village","wolves"]`, `"teams":["village"]`, "1 teams declared"},
		"same name twice":  {`"teams":["village","wolves"]`, `"teams":["village","village"]`, `team 1 is called "village"`},
		"a reward short":   {`"teams":[` + jsonNumber(rec.Score.Teams[0]) + `,`, `"teams":[`, "the score has 1 team rewards for 2 teams"},
		"rewards, no team": {`"teams":["village","wolves"],`, ``, "declares no teams"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := strings.Replace(line, tc.old, tc.new, 1)
			require.NotEqual(t, line, bad, "the test's replacement")
			_, _, err := trajectories.DecodeEpisode([]byte(bad))
			require.ErrorIs(t, err, trajectories.ErrEpisodeLine)
			assert.ErrorContains(t, err, tc.text)
		})
	}
}

func jsonNumber(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// TestEpisodeLastStepMessages: the message the last step sends (the
// result) is in the log, with its recipients.
func TestEpisodeLastStepMessages(t *testing.T) {
	_, episodes := played(t, "tictactoe", 2)
	recs, _ := readEpisodes(t, episodes)
	for _, rec := range recs {
		last := rec.Messages[len(rec.Messages)-1]
		assert.Equal(t, rec.Steps, last.Time)
		assert.Equal(t, "result", last.Kind)
		assert.Equal(t, []int{0, 1}, last.Recipients)
	}
}

func TestEpisodeGolden(t *testing.T) {
	for _, name := range []string{"tictactoe", "signal", "tree-tictactoe", "werewolf"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", "episode-"+name+".jsonl")
			var tree *episode.Tree
			if scenario, ok := strings.CutPrefix(name, "tree-"); ok {
				name, tree = scenario, &episode.Tree{K: 2, Alpha: 0.5}
			}
			_, episodes := playedTree(t, name, 1, tree)
			if *update {
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				require.NoError(t, os.WriteFile(path, episodes, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -update to write it")
			assert.Equal(t, string(want), string(episodes), "the episode form changed: if on purpose, bump EpisodeFormat where old readers break, and rerun with -update")
		})
	}
}

func TestEpisodeReaderErrors(t *testing.T) {
	_, episodes := played(t, "tictactoe", 2)
	first, _, _ := bytes.Cut(episodes, []byte("\n"))
	line := string(first)
	for name, tc := range map[string]struct {
		input string
		want  error
		text  string
	}{
		"cut last line":  {input: string(episodes[:len(episodes)-10]), want: trajectories.ErrTruncated, text: "line 2"},
		"unknown key":    {input: line + "\n" + strings.Replace(line, `"steps":`, `"stepz":1,"steps":`, 1) + "\n", want: trajectories.ErrEpisodeLine, text: "line 2"},
		"other format":   {input: strings.Replace(line, "troupe.episode/v2", "troupe.episode/v9", 1) + "\n", want: trajectories.ErrEpisodeLine, text: "v9"},
		"no format":      {input: `{"scenario":"x"}` + "\n", want: trajectories.ErrEpisodeLine, text: "no format"},
		"not an object":  {input: "[1]\n", want: trajectories.ErrEpisodeLine, text: "line 1"},
		"trailing data":  {input: line + " {}\n", want: trajectories.ErrEpisodeLine, text: "after top-level value"},
		"bad seat":       {input: strings.Replace(line, `"seat":1,`, `"seat":7,`, 1) + "\n", want: trajectories.ErrEpisodeLine, text: "seat 7"},
		"bad status":     {input: strings.Replace(line, `"status":"completed"`, `"status":"COMPLETED"`, 1) + "\n", want: trajectories.ErrEpisodeLine, text: "COMPLETED"},
		"bad inbox":      {input: strings.Replace(line, `"inbox":[0]`, `"inbox":[99]`, 1) + "\n", want: trajectories.ErrEpisodeLine, text: "message 99"},
		"credit too few": {input: strings.Replace(line, `"values":[[`, `"values":[[1],[`, 1) + "\n", want: trajectories.ErrEpisodeLine, text: "value lists"},
	} {
		t.Run(name, func(t *testing.T) {
			r := trajectories.NewEpisodeReader(strings.NewReader(tc.input))
			var err error
			for err == nil {
				_, _, err = r.Next()
			}
			require.ErrorIs(t, err, tc.want)
			assert.ErrorContains(t, err, tc.text)
		})
	}
}

// FuzzEpisodeDecode decodes arbitrary lines: never a panic, and what
// decodes encodes to a line that decodes to the same encoding.
func FuzzEpisodeDecode(f *testing.F) {
	_, episodes := played(f, "signal", 2)
	for line := range bytes.Lines(episodes) {
		f.Add(bytes.TrimSpace(line))
	}
	f.Add([]byte(`{"format":"troupe.episode/v2","status":"completed","score":{"team":"NaN","agents":["+Inf"]}}`))
	f.Add([]byte(`{"format":"troupe.episode/v2","status":"failed","seats":[{"id":"a","role":"r"}],"turns":[{"seat":0,"prompt":[{"role":"user","content":"hi"}],"tokens":{"prompt":[1],"response":[2],"log_probs":["-Inf"],"loss_mask":null}}],"credit":{"allocators":["team"],"values":[[]],"notes":{"k":1}}}`))
	f.Add([]byte(`{"format":"troupe.episode/v2"}`))
	f.Add([]byte(`{"format":"troupe.episode/v2","seats":[{"id":"a","role":"r"}],"turns":[{"seat":0,"emit":true}],"tree":{"k":2,"alpha":0.5,"joint":true,"roles":["r"]},"candidates":[{"turn":0,"index":0,"action":"x","chosen":true,"team":1,"local":"NaN","reward":2},{"turn":0,"index":1,"tokens":{"prompt":[1],"response":[2],"log_probs":null,"loss_mask":null}}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"format":"troupe.episode/v2","status":"completed","teams":["a","b"],"seats":[{"id":"x","role":"r","team":"b"},{"id":"y","role":"r","team":"a"}],"score":{"team":0,"teams":[1,-1],"agents":null}}`))
	f.Add([]byte(`{"format":"troupe.episode/v2","status":"failed","teams":["a","b","c"],"seats":[{"id":"x","role":"r","team":"c"}],"score":{"team":0,"agents":null}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		rec, c, err := trajectories.DecodeEpisode(line)
		if err != nil {
			require.ErrorIs(t, err, trajectories.ErrEpisodeLine)
			return
		}
		once, err := trajectories.AppendEpisodeJSON(nil, rec, c)
		require.NoError(t, err)
		rec2, c2, err := trajectories.DecodeEpisode(bytes.TrimSpace(once))
		require.NoError(t, err, "%s", once)
		twice, err := trajectories.AppendEpisodeJSON(nil, rec2, c2)
		require.NoError(t, err)
		require.Equal(t, string(once), string(twice))
	})
}

// TestRecordOnlyRunsGiveTheSameCredit: a run whose sinks need no samples
// projects none, and its allocators, reading the emitted turns, give the
// credit a run with samples gives.
func TestRecordOnlyRunsGiveTheSameCredit(t *testing.T) {
	sc, err := scenarios.Builtin().Lookup("tictactoe")
	require.NoError(t, err)
	params, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	var allocs []trajectories.Allocator
	for _, spec := range []string{"team", "individual", "equal-split-sample", "discount:of=individual,gamma=0.5", "discount:unit=step,gamma=0.9", "rloo:base=individual,key=role"} {
		a, err := credit.Builtin().Parse(spec)
		require.NoError(t, err)
		allocs = append(allocs, a)
	}
	run := func(samples trajectories.Sink) (string, play.Summary) {
		var eb bytes.Buffer
		sum, err := play.Run(context.Background(), play.Config{
			Play:      env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random()), Emit: env.EmitRoles("x")},
			Episodes:  12,
			GroupSize: 4,
			Seed:      5,
		}, &trajectories.Output{Sink: trajectories.Tee(samples, trajectories.NewEpisodeWriter(&eb)), Allocators: allocs, Format: trajectories.RewardDict})
		require.NoError(t, err)
		return eb.String(), sum
	}
	withSamples, sum1 := run(trajectories.NewJSONLWriter(io.Discard, trajectories.Flat))
	recordOnly, sum2 := run(trajectories.Discard)
	assert.Equal(t, withSamples, recordOnly)
	assert.Equal(t, sum1.Samples, sum2.Samples, "samples are counted, projected or not")
	assert.Positive(t, sum2.Samples)
}

func TestNeedsSamples(t *testing.T) {
	assert.False(t, trajectories.NeedsSamples(trajectories.Discard))
	assert.False(t, trajectories.NeedsSamples(trajectories.NewEpisodeWriter(io.Discard)))
	assert.False(t, trajectories.NeedsSamples(trajectories.Tee(trajectories.Discard, trajectories.NewEpisodeWriter(io.Discard))))
	assert.True(t, trajectories.NeedsSamples(trajectories.Tee(trajectories.Discard, &trajectories.Collector{})))
	assert.True(t, trajectories.NeedsSamples(trajectories.NewJSONLWriter(io.Discard, trajectories.Flat)))
}

// A quiet message (one that informs without waking) keeps its flag in the
// episode file; a plain one writes no "quiet" key.
func TestEpisodeLineKeepsQuietMessages(t *testing.T) {
	rec := &episode.Record{
		Scenario: "s", Status: protocol.StatusCompleted, End: "terminated",
		Seats: []episode.Seat{{ID: "a", Role: "r"}, {ID: "b", Role: "r"}},
		Messages: []episode.Message{
			{Message: protocol.Message{From: "a", To: protocol.To("b"), Kind: "k", Payload: "loud", Time: 1, Seq: 0}, Recipients: []int{1}},
			{Message: protocol.Message{From: protocol.EnvSender, To: protocol.To("a"), Kind: "hint", Payload: "quiet", Time: 1, Seq: 1, Quiet: true}, Recipients: []int{0}},
		},
	}
	line, err := trajectories.AppendEpisodeJSON(nil, rec, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(line), `"quiet":true`), "%s", line)
	got, _, err := trajectories.DecodeEpisode(line)
	require.NoError(t, err)
	require.Len(t, got.Messages, 2)
	assert.False(t, got.Messages[0].Quiet)
	assert.True(t, got.Messages[1].Quiet)
}

// A note JSON cannot encode (NaN, a channel) does not stop the episode
// file: it is written as the samples write it.
func TestEpisodeLineWritesUnencodableNotes(t *testing.T) {
	rec := &episode.Record{
		Scenario: "s", Status: protocol.StatusCompleted, End: "terminated",
		Seats: []episode.Seat{{ID: "a", Role: "r"}},
		Turns: []episode.Turn{{Seat: 0, Step: 1, Action: "x", Emit: true, Notes: map[string]any{"nan": math.NaN(), "ok": 1, "ch": make(chan int)}}},
	}
	line, err := trajectories.AppendEpisodeJSON(nil, rec, &trajectories.Credit{Allocators: []string{"team"}, Values: [][]float64{{1}}, Notes: map[string]any{"inf": math.Inf(1)}})
	require.NoError(t, err)
	assert.Contains(t, string(line), `"nan":"unencodable: json: unsupported value: NaN"`)
	assert.Contains(t, string(line), `"ch":"unencodable: json: unsupported type: chan int"`)
	assert.Contains(t, string(line), `"ok":1`)
	assert.Contains(t, string(line), `"inf":"unencodable:`)
	_, _, err = trajectories.DecodeEpisode(line[:len(line)-1])
	require.NoError(t, err, "the line reads back")
	assert.True(t, math.IsNaN(rec.Turns[0].Notes["nan"].(float64)), "the record itself is left alone")
}
