//go:build !fuzzing

// This file, like every file of package viewer_test, is left out of make
// fuzz's builds (-tags fuzzing): their imports (the cli, which builds the
// fixtures, and a browser driver) would have the fuzzer instrument some
// 480 packages that the fuzz targets, all in package viewer, never reach,
// which costs their coverage bookkeeping 97% of the executions.

package viewer_test

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/httpedge"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/viewer"
)

// TestIndexAgreesWithTheReaders: for every built-in scenario, in both
// forms, the index pass finds the episodes the strict readers read, with
// their identity, outcome and mean rewards, and Load decodes each.
func TestIndexAgreesWithTheReaders(t *testing.T) {
	_, runs := fixtures(t)
	for _, r := range runs {
		t.Run(r.Name, func(t *testing.T) {
			recs, credits := readRecords(t, r.Records)
			f, err := os.Open(r.Samples)
			require.NoError(t, err)
			rollouts, err := trajectories.ReadRollouts(f)
			f.Close()
			require.NoError(t, err)
			for _, path := range []string{r.Records, r.Samples} {
				x := openFiles(t, path)[0]
				require.Zero(t, x.ProblemCount, "%v", x.Problems)
				require.Equal(t, len(recs), x.Len())
				for k := range x.Len() {
					e := x.Info(k)
					rec := recs[k]
					assert.Equal(t, rec.RolloutID, e.RolloutID)
					assert.Equal(t, rec.Index, e.Index)
					assert.Equal(t, rec.GroupIndex, e.GroupIndex)
					assert.Equal(t, string(rec.Status), e.Status)
					assert.Equal(t, rec.End, e.End)
					assert.Equal(t, rec.Score.Team, e.Team)
					assert.Equal(t, rec.Emitted(), e.Samples)
					assert.Len(t, rollouts[k], e.Samples)
					if c := credits[k]; c != nil {
						assert.Equal(t, c.Allocators, e.Allocators)
						for a := range c.Allocators {
							sum := 0.0
							for _, v := range c.Values[a] {
								sum += v
							}
							assert.InDelta(t, sum/float64(len(c.Values[a])), e.Alloc[a], 1e-9)
						}
					}
					ep, err := x.Load(k)
					require.NoError(t, err)
					assert.Equal(t, rec.RolloutID, ep.RolloutID)
					assert.Len(t, ep.Turns, e.Turns)
				}
			}
		})
	}
}

// TestParallelIndexIsTheSequentialOne: however the file is split between
// workers, the index is the same; a flat episode is never split.
func TestParallelIndexIsTheSequentialOne(t *testing.T) {
	_, runs := fixtures(t)
	for _, path := range []string{runs[0].Samples, runs[0].Records, runs[5].Samples} {
		one, err := viewer.OpenWith(path, 1, 1<<40)
		require.NoError(t, err)
		for _, chunk := range []int64{1, 100, 4096} {
			many, err := viewer.OpenWith(path, 7, chunk)
			require.NoError(t, err)
			require.Equal(t, one.Len(), many.Len())
			for k := range one.Len() {
				assert.Equal(t, one.Info(k), many.Info(k), "%s in segments of %d: episode %d", path, chunk, k)
			}
			assert.Equal(t, one.Overview().Roles, many.Overview().Roles, "%s in segments of %d: the sums per role", path, chunk)
			assert.Equal(t, one.Lines, many.Lines)
		}
	}
}

// TestIndexReportsBadLines: an invalid line, a line that is not a sample,
// a repeated rollout_id and a cut last line are problems naming their
// lines; the rest is indexed.
func TestIndexReportsBadLines(t *testing.T) {
	_, runs := fixtures(t)
	data, err := os.ReadFile(runs[1].Samples) // tictactoe
	require.NoError(t, err)
	lines := strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n")
	first := lines[0]
	body := first + "not json\n" + `{"rollout_id":1}` + "\n" + `[1,2]` + "\n" + strings.Join(lines[1:], "") + "\n" + first + first[:20]
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	x := openFiles(t, path)[0]
	var got []string
	for _, p := range x.Problems {
		got = append(got, p.Err)
	}
	require.Len(t, x.Problems, 6, "%q", got)
	for k, want := range []struct {
		line int
		err  string
	}{
		{2, "neither a sample"},
		{3, "status is missing"},
		{4, "want '{'"},
		{5, "rollout_id 0 is used again (first at line 1)"},
		{len(lines) + 4, "rollout_id 0 is used again"},
		{len(lines) + 5, "cut"},
	} {
		assert.Equal(t, want.line, x.Problems[k].Line, "problem %d", k)
		assert.Contains(t, x.Problems[k].Err, want.err, "problem %d", k)
	}
	assert.Equal(t, x.ProblemCount, 6)
	assert.Equal(t, []int{0, 1, 5}, x.Lookup(0), "rollout_id 0's episodes, in file order")
	assert.Equal(t, 6, x.Len(), "the 4 episodes, the first one in two parts, and the repeated line")
}

func TestLoadNamesALineTheStrictDecoderRefuses(t *testing.T) {
	// The index pass reads what it needs; the page's strict decode finds
	// the unknown field and says which line.
	_, runs := fixtures(t)
	data, err := os.ReadFile(runs[2].Records)
	require.NoError(t, err)
	line := strings.Replace(strings.SplitAfter(string(data), "\n")[0], `"view":`, `"view" :`, 1)
	line = strings.Replace(line, `"emit":true}`, `"emit":true,"extra":1}`, 1)
	path := filepath.Join(t.TempDir(), "odd.episodes.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(line), 0o644))
	x := openFiles(t, path)[0]
	require.Equal(t, 1, x.Len())
	_, err = x.Load(0)
	require.ErrorIs(t, err, trajectories.ErrEpisodeLine)
	assert.Contains(t, err.Error(), "line 1")
}

func TestHandlerServesOnlyItsPages(t *testing.T) {
	_, runs := fixtures(t)
	v, err := viewer.New(openFiles(t, runs[2].Records), scenarios.Builtin())
	require.NoError(t, err)
	srv := httptest.NewServer(v.Handler("", true))
	defer srv.Close()
	get := func(path string, mod func(*http.Request)) *http.Response {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if mod != nil {
			mod(req)
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	ok := get("/run-0/ep-1.html", nil)
	assert.Equal(t, http.StatusOK, ok.StatusCode)
	assert.Contains(t, ok.Header.Get("Content-Security-Policy"), "script-src 'self'")
	assert.Contains(t, ok.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	assert.Equal(t, "nosniff", ok.Header.Get("X-Content-Type-Options"))
	for _, p := range []string{"/run-0/ep-99.html", "/run-1/index.html", "/assets/", "/assets/../viewer.go", "/../go.mod", "/" + filepath.Base(runs[2].Records), "/run-0/../../etc/passwd", "/run-0/ep--1.html"} {
		assert.Equal(t, http.StatusNotFound, get(p, nil).StatusCode, p)
	}
	assert.Equal(t, http.StatusOK, get("/assets/app.js", nil).StatusCode)
	rebound := get("/", func(r *http.Request) { r.Host = "evil.example:80" })
	assert.Equal(t, http.StatusMisdirectedRequest, rebound.StatusCode, "a rebound DNS name is refused")
	jump := get("/run-0/episode?rollout_id=2", nil)
	assert.Equal(t, http.StatusSeeOther, jump.StatusCode)
	assert.Equal(t, "/run-0/ep-2.html", jump.Header.Get("Location"))

	tok := httptest.NewServer(v.Handler("s3cret", false))
	defer tok.Close()
	for _, c := range []struct {
		mod  func(*http.Request)
		want int
	}{
		{nil, http.StatusUnauthorized},
		{func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong") }, http.StatusUnauthorized},
		{func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") }, http.StatusOK},
		{func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "troupe_view_token", Value: "s3cret"}) }, http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, tok.URL+"/", nil)
		if c.mod != nil {
			c.mod(req)
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, c.want, resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, tok.URL+"/run-0/index.html?token=s3cret", nil)
	resp, err := http.DefaultTransport.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode, "the printed URL's token becomes a cookie")
	assert.Equal(t, "/run-0/index.html", resp.Header.Get("Location"))
	require.NotEmpty(t, resp.Cookies())
	assert.True(t, resp.Cookies()[0].HttpOnly)
}

func TestServeRefusesAnExposedAddressWithoutAToken(t *testing.T) {
	_, runs := fixtures(t)
	v, err := viewer.New(openFiles(t, runs[2].Records), nil)
	require.NoError(t, err)
	err = viewer.Serve(t.Context(), v, viewer.ServeConfig{Addr: "0.0.0.0:0"})
	require.ErrorIs(t, err, viewer.ErrExposed)
	err = viewer.Serve(t.Context(), v, viewer.ServeConfig{Addr: "127.0.0.1:0", Token: "short"})
	require.ErrorIs(t, err, httpedge.ErrShortToken, "a token of fewer than 16 bytes is refused")
}

func TestEpisodeOfAnUnknownScenarioSaysThereIsNoDiagram(t *testing.T) {
	_, runs := fixtures(t)
	v, err := viewer.New(openFiles(t, runs[2].Records), nil)
	require.NoError(t, err)
	srv := httptest.NewServer(v.Handler("", true))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/run-0/ep-0.html")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), "without a scenario registry")
	assert.NotContains(t, string(body), `class="role-diagram"`)
	assert.Contains(t, string(body), `class="timeline"`, "the timelines need no registry")
}

// The sample files' counterfactual note is derived exactly: G − D_i.
func TestCounterfactualValuesAreDerivedFromTheCredit(t *testing.T) {
	_, runs := fixtures(t)
	x := openFiles(t, runs[0].Records)[0] // elfarol with difference
	ep, err := x.Load(0)
	require.NoError(t, err)
	k := -1
	for a, name := range ep.Allocators {
		if strings.HasPrefix(name, "difference") {
			k = a
		}
	}
	require.GreaterOrEqual(t, k, 0)
	for _, s := range ep.Seats {
		c := s.Credit[k]
		require.Positive(t, c.N)
		assert.Contains(t, c.Counterfactual, "null action")
		assert.False(t, math.IsNaN(c.Mean()))
	}
}
