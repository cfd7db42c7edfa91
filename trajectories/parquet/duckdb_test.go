//go:build cgo

package parquet_test

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/duckdb/duckdb-go/v2" // and its "duckdb" database/sql driver
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/parquet"
)

// TestDuckDBReadsEveryBuiltinScenario plays every built-in scenario with a
// reward under two allocators (a dict reward: team, and a counterfactual
// one where the scenario allows it), writes its samples and episode records
// as troupe run does, exports both files as Parquet from the JSONL, and
// reads the tables back with DuckDB: every sample row equals its JSONL
// sample, and the aggregates of every table equal those of the JSONL.
func TestDuckDBReadsEveryBuiltinScenario(t *testing.T) {
	reg := scenarios.Builtin()
	db := openDuckDB(t)
	for _, sc := range scenarios.List() {
		name := sc.Info().Name
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			samplesPath, episodesPath := playRun(t, reg, name, dir)
			samples := readSamples(t, samplesPath)
			records, credits := readEpisodes(t, episodesPath)
			require.NotEmpty(t, samples)

			pq := exportFiles(t, samplesPath, episodesPath, dir)
			checkSampleRows(t, db, pq["samples"], samples)
			checkSampleAggregates(t, db, pq["samples"], samples)
			checkEpisodeTables(t, db, pq, records, credits, samples)
			checkAgainstDuckDBJSON(t, db, samplesPath, pq["samples"])
		})
	}
}

func openDuckDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("duckdb", "")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	// One connection: an in-memory database is per connection, and the
	// test's queries are small.
	db.SetMaxOpenConns(1)
	_, err = db.Exec("SET threads TO 1")
	require.NoError(t, err)
	return db
}

// playRun plays 12 episodes (groups of 2) of the scenario as troupe run
// does and writes its samples and episode files into dir.
func playRun(t *testing.T, reg *env.Registry, name, dir string) (samplesPath, episodesPath string) {
	t.Helper()
	var r *runspec.Resolved
	var err error
	for _, allocs := range [][]string{{"team", "leave-one-out"}, {"team", "individual"}, {"team", "grpo"}} {
		spec := runspec.Spec{Scenario: name, Episodes: 12, GroupSize: 2, Seed: 7, Allocators: allocs, RewardFormat: "dict"}
		if r, err = spec.Resolve(runspec.Resolvers{Scenarios: reg}); err == nil {
			break
		}
	}
	require.NoError(t, err)
	samplesPath = filepath.Join(dir, name+".jsonl")
	episodesPath = filepath.Join(dir, name+".episodes.jsonl")
	sf, err := os.Create(samplesPath)
	require.NoError(t, err)
	defer sf.Close()
	ef, err := os.Create(episodesPath)
	require.NoError(t, err)
	defer ef.Close()
	sink := trajectories.Tee(trajectories.NewJSONLWriter(sf, trajectories.Flat), trajectories.NewEpisodeWriter(ef))
	cfg := r.Config
	cfg.Concurrency = 2
	_, err = play.Run(t.Context(), cfg, r.Output(sink))
	require.NoError(t, err)
	return samplesPath, episodesPath
}

func readSamples(t *testing.T, path string) []protocol.Sample {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	samples, err := trajectories.ReadAll(f)
	require.NoError(t, err)
	return samples
}

func readEpisodes(t *testing.T, path string) ([]*episode.Record, []*trajectories.Credit) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rd := trajectories.NewEpisodeReader(f)
	var recs []*episode.Record
	var credits []*trajectories.Credit
	for {
		rec, c, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return recs, credits
		}
		require.NoError(t, err)
		recs, credits = append(recs, rec), append(credits, c)
	}
}

// exportFiles exports the two files from their JSONL into dir, as troupe
// export does (NAME.TABLE.parquet), and returns the tables' paths by
// table.
func exportFiles(t *testing.T, samplesPath, episodesPath, dir string) map[string]string {
	t.Helper()
	paths := map[string]string{}
	name := strings.TrimSuffix(filepath.Base(samplesPath), ".jsonl")
	create := func(table string) *os.File {
		p := filepath.Join(dir, name+"."+table+".parquet")
		paths[table] = p
		f, err := os.Create(p)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	sw, err := parquet.NewSampleWriter(create("samples"))
	require.NoError(t, err)
	for _, s := range readSamples(t, samplesPath) {
		require.NoError(t, sw.Write(&s))
	}
	require.NoError(t, sw.Close())

	ew, err := parquet.NewEpisodeWriter(parquet.EpisodeTables{
		Episodes: create("episodes"), Turns: create("turns"), Messages: create("messages"), Transitions: create("transitions"),
	})
	require.NoError(t, err)
	recs, credits := readEpisodes(t, episodesPath)
	for i := range recs {
		require.NoError(t, ew.Write(recs[i], credits[i]))
	}
	require.NoError(t, ew.Close())
	return paths
}

// checkSampleRows reads every sample row back with DuckDB and compares it,
// field by field, with the JSONL's sample of the same index.
func checkSampleRows(t *testing.T, db *sql.DB, path string, samples []protocol.Sample) {
	t.Helper()
	rows, err := db.Query(`SELECT group_index, index, rollout_id, prompt, chat, len(tokens), response, response_length,
		label, reward, rewards, remove_sample, status, scenario, seed, episode, agent, role, turn, step, state,
		team, team_reward, agent_score, allocator, text_only, "end", error, action, placeholder, extra
		FROM read_parquet(?) ORDER BY index`, path)
	require.NoError(t, err)
	defer rows.Close()
	i := 0
	for rows.Next() {
		var (
			group, index, rollout, episodeN     int64
			prompt, response, status, scen      string
			agent, role, state, allocator, end  string
			chat, remove, textOnly, placeholder bool
			ntokens, respLen, turn, step        int
			seed                                uint64
			teamReward                          float64
			label, errText, action, extra       sql.NullString
			team                                sql.NullString
			reward, agentScore                  sql.NullFloat64
			rewards                             any
		)
		require.NoError(t, rows.Scan(&group, &index, &rollout, &prompt, &chat, &ntokens, &response, &respLen,
			&label, &reward, &rewards, &remove, &status, &scen, &seed, &episodeN, &agent, &role, &turn, &step, &state,
			&team, &teamReward, &agentScore, &allocator, &textOnly, &end, &errText, &action, &placeholder, &extra))
		require.Less(t, i, len(samples), "more rows than samples")
		s := &samples[i]
		m := &s.Metadata
		at := fmt.Sprintf("sample %d", s.Index)
		assert.Equal(t, []int64{s.GroupIndex, s.Index, s.RolloutID, m.Episode}, []int64{group, index, rollout, episodeN}, at)
		assert.Equal(t, s.Prompt.Messages != nil, chat, at)
		if !chat {
			assert.Equal(t, s.Prompt.Text, prompt, at)
		}
		assert.Equal(t, []int{len(s.Tokens), s.ResponseLength, m.Turn, m.Step}, []int{ntokens, respLen, turn, step}, at)
		assert.Equal(t, []string{s.Response, string(s.Status), m.Scenario, m.Agent, m.Role, m.State, m.Allocator, m.End},
			[]string{response, status, scen, agent, role, state, allocator, end}, at)
		assert.Equal(t, []bool{s.RemoveSample, m.TextOnly, trajectories.IsPlaceholder(s)}, []bool{remove, textOnly, placeholder}, at)
		assert.Equal(t, m.Seed, seed, at)
		assert.Equal(t, m.TeamReward, teamReward, at)
		assert.Equal(t, m.Team, team.String, at)
		assert.Equal(t, m.Team != "", team.Valid, at)
		assert.Equal(t, !s.Label.IsNull(), label.Valid, at)
		if label.Valid {
			assert.JSONEq(t, s.Label.JSON(), label.String, at)
		}
		assert.Equal(t, m.AgentScore != nil, agentScore.Valid, at)
		if m.AgentScore != nil {
			assert.Equal(t, *m.AgentScore, agentScore.Float64, at)
		}
		assert.Equal(t, m.Error, errText.String, at)
		assert.Equal(t, m.Action, action.String, at)
		assert.Equal(t, len(m.Extra) > 0, extra.Valid, at)
		switch s.Reward.Kind {
		case protocol.RewardDict:
			assert.False(t, reward.Valid, at)
			assert.Equal(t, s.Reward.Dict, duckMap(t, rewards), at)
		default:
			assert.Equal(t, s.Reward.Value, reward.Float64, at)
			assert.Nil(t, rewards, at)
		}
		i++
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, len(samples), i, "rows")
}

// duckMap converts a MAP(VARCHAR, DOUBLE) as the driver scans it.
func duckMap(t *testing.T, v any) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	switch m := v.(type) {
	case duckdb.OrderedMap:
		for i, k := range m.Keys() {
			out[k.(string)] = m.Values()[i].(float64)
		}
	default:
		t.Fatalf("a map scans as %T", v)
	}
	return out
}

// checkSampleAggregates compares the aggregates a researcher computes
// first, by DuckDB over the Parquet, with the same computed in Go over the
// JSONL's samples.
func checkSampleAggregates(t *testing.T, db *sql.DB, path string, samples []protocol.Sample) {
	t.Helper()
	type agg struct {
		n, placeholders int
		team            float64
		rewards         map[string]float64
	}
	want := map[string]*agg{} // by status
	for i := range samples {
		s := &samples[i]
		a := want[string(s.Status)]
		if a == nil {
			a = &agg{rewards: map[string]float64{}}
			want[string(s.Status)] = a
		}
		a.n++
		if trajectories.IsPlaceholder(s) {
			a.placeholders++
		}
		a.team += s.Metadata.TeamReward
		for k, v := range s.Reward.Dict {
			a.rewards[k] += v
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range want[string(samples[0].Status)].rewards {
			if !yield(k) {
				return
			}
		}
	})
	for _, key := range keys {
		rows, err := db.Query(`SELECT status, count(*), count(*) FILTER (placeholder), sum(team_reward), sum(rewards[?])
			FROM read_parquet(?) GROUP BY status ORDER BY status`, key, path)
		require.NoError(t, err)
		got := 0
		for rows.Next() {
			var status string
			var n, ph int
			var team, r float64
			require.NoError(t, rows.Scan(&status, &n, &ph, &team, &r))
			w := want[status]
			require.NotNil(t, w, "status %s", status)
			assert.Equal(t, w.n, n, status)
			assert.Equal(t, w.placeholders, ph, status)
			assertClose(t, w.team, team, "%s team_reward", status)
			assertClose(t, w.rewards[key], r, "%s reward %s", status, key)
			got++
		}
		require.NoError(t, rows.Err())
		rows.Close()
		assert.Equal(t, len(want), got, "statuses")
	}
}

// checkEpisodeTables compares the episode, turn, message and transition
// tables with the records they came from, and the turns' credit with the
// samples' rewards.
func checkEpisodeTables(t *testing.T, db *sql.DB, pq map[string]string, recs []*episode.Record, credits []*trajectories.Credit, samples []protocol.Sample) {
	t.Helper()
	var turns, emitted, messages, transitions, recipients int
	var team, scores float64
	for _, r := range recs {
		turns += len(r.Turns)
		emitted += r.Emitted()
		messages += len(r.Messages)
		transitions += len(r.Transitions)
		team += r.Score.Team
		for _, s := range r.Score.Agents {
			scores += s
		}
		for _, m := range r.Messages {
			recipients += len(m.Recipients)
		}
	}
	var n, nTurns, nSamples, nMessages, nTransitions int
	var gotTeam float64
	var gotScores sql.NullFloat64
	require.NoError(t, db.QueryRow(`SELECT count(*), sum(turns), sum(samples), sum(messages), sum(transitions), sum(team_score),
		sum(list_sum(agent_scores)) FROM read_parquet(?)`, pq["episodes"]).
		Scan(&n, &nTurns, &nSamples, &nMessages, &nTransitions, &gotTeam, &gotScores))
	assert.Equal(t, []int{len(recs), turns, emitted, messages, transitions}, []int{n, nTurns, nSamples, nMessages, nTransitions})
	assertClose(t, team, gotTeam, "team_score")
	assertClose(t, scores, gotScores.Float64, "agent_scores")

	// A scenario with teams: each seat's team is one of the teams, and
	// the teams' rewards add up to the team score; no teams anywhere
	// otherwise.
	var withTeams, seatsOK, sumsOK int
	require.NoError(t, db.QueryRow(`SELECT count(*) FILTER (teams IS NOT NULL),
		count(*) FILTER (len(seat_teams) = len(seats) AND list_has_all(teams, seat_teams)),
		count(*) FILTER (abs(list_sum(team_scores) - team_score) < 1e-9) FROM read_parquet(?)`, pq["episodes"]).Scan(&withTeams, &seatsOK, &sumsOK))
	want := 0
	if recs[0].Teams != nil {
		want = len(recs)
	}
	assert.Equal(t, []int{want, want, want}, []int{withTeams, seatsOK, sumsOK}, "teams, seat_teams, team_scores")

	var rowsTurns, rowsEmitted, joined int
	require.NoError(t, db.QueryRow(`SELECT count(*), count(*) FILTER (emit),
		count(*) FILTER (t.agent = e.seats[t.seat + 1]) FROM read_parquet(?) t JOIN read_parquet(?) e USING (rollout_id)`,
		pq["turns"], pq["episodes"]).Scan(&rowsTurns, &rowsEmitted, &joined))
	assert.Equal(t, []int{turns, emitted, turns}, []int{rowsTurns, rowsEmitted, joined})

	var rowsMessages, rowsRecipients int
	require.NoError(t, db.QueryRow(`SELECT count(*), coalesce(sum(len(recipients)), 0) FROM read_parquet(?)`, pq["messages"]).
		Scan(&rowsMessages, &rowsRecipients))
	assert.Equal(t, []int{messages, recipients}, []int{rowsMessages, rowsRecipients})
	var rowsTransitions int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM read_parquet(?)`, pq["transitions"]).Scan(&rowsTransitions))
	assert.Equal(t, transitions, rowsTransitions)

	// The credit of each emitted turn is the reward of its sample: join
	// the turns to the samples on (rollout_id, sample number).
	if credits[0] == nil {
		return
	}
	for _, name := range credits[0].Allocators {
		var matched, total int
		require.NoError(t, db.QueryRow(`WITH s AS (SELECT *, row_number() OVER (PARTITION BY rollout_id ORDER BY index) - 1 AS k
			FROM read_parquet(?) WHERE NOT placeholder)
			SELECT count(*) FILTER (t.credit[?] = s.rewards[?]), count(*)
			FROM read_parquet(?) t JOIN s ON t.rollout_id = s.rollout_id AND t.sample = s.k`,
			pq["samples"], name, name, pq["turns"]).Scan(&matched, &total))
		assert.Equal(t, emitted, total, "turns joined to samples")
		assert.Equal(t, total, matched, "turns whose %s credit is their sample's reward", name)
	}
}

// checkAgainstDuckDBJSON has DuckDB read the samples JSONL itself and
// compares its aggregates with those it computes over the Parquet.
func checkAgainstDuckDBJSON(t *testing.T, db *sql.DB, jsonl, pq string) {
	t.Helper()
	const q = `SELECT count(*), count(DISTINCT rollout_id), sum(%s), count(DISTINCT %s) FROM %s`
	var a, b [2]int
	var sa, sb float64
	require.NoError(t, db.QueryRow(fmt.Sprintf(q, "metadata.team_reward", "metadata.agent", "read_json(?, format = 'newline_delimited')"), jsonl).
		Scan(&a[0], &a[1], &sa, new(int)))
	require.NoError(t, db.QueryRow(fmt.Sprintf(q, "team_reward", "agent", "read_parquet(?)"), pq).Scan(&b[0], &b[1], &sb, new(int)))
	assert.Equal(t, a, b)
	assertClose(t, sa, sb, "sum(team_reward): DuckDB on the JSONL and on the Parquet")
}

func assertClose(t *testing.T, want, got float64, format string, args ...any) {
	t.Helper()
	if math.Abs(want-got) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s: want %v, got %v", fmt.Sprintf(format, args...), want, got)
	}
}

// TestDocQueriesRun runs every SQL query of docs/parquet.md against the
// tables of the run the page exports (a smaller one), so that they work as
// written: each must return rows.
func TestDocQueriesRun(t *testing.T) {
	doc, err := os.ReadFile("../../docs/parquet.md")
	require.NoError(t, err)
	queries := regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	require.NotEmpty(t, queries)
	dir := t.TempDir()
	samplesPath, episodesPath := playRun(t, scenarios.Builtin(), "signal", dir)
	exportFiles(t, samplesPath, episodesPath, dir)
	db := openDuckDB(t)
	for _, q := range queries {
		sql := strings.ReplaceAll(q[1], "'out/pq/", "'"+dir+"/")
		rows, err := db.Query(sql)
		require.NoError(t, err, q[1])
		n := 0
		for rows.Next() {
			n++
		}
		require.NoError(t, rows.Err(), q[1])
		rows.Close()
		assert.Positive(t, n, "no rows: %s", q[1])
	}
}
