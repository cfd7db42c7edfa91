package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
	"github.com/troupe-rl/troupe/trajectories/durable"
)

// TestCheckJudgesEveryPrefix writes a small run (flat and nested, with its
// episode file and progress file) and checks every prefix of each samples
// file at a line boundary, and cuts inside every line, with each set of
// companion files: none, the episode file, the progress file alone, and
// both. The judgement (how the file ends) must be exactly what the bytes
// say: a cut line, a partial episode, a partial group or whole episodes
// where the companions prove it, unproven where nothing can.
func TestCheckJudgesEveryPrefix(t *testing.T) {
	dir := t.TempDir()
	for _, layout := range []string{"flat", "nested"} {
		t.Run(layout, func(t *testing.T) {
			out := filepath.Join(dir, layout+".jsonl")
			eps := out + ".episodes"
			// 7 episodes in groups of 3 (the last group is the run's, of 1),
			// 4 samples each.
			res := troupe(t, "run", "elfarol", "-n", "7", "-g", "3", "-p", "agents=4", "-q",
				"--layout", layout, "-o", out, "--episodes-out", eps)
			require.Equal(t, ExitOK, res.code, res.stderr)
			full := readFile(t, out)
			prog, err := durable.Read(nil, durable.PathOf(out))
			require.NoError(t, err)
			require.True(t, prog.Complete)
			progOnly := *prog
			progOnly.Files = prog.Files[:1]

			// Where lines, episodes and groups end in the whole file.
			lineEnd, epEnd, groupEnd := map[int]bool{0: true}, map[int]bool{0: true}, map[int]bool{0: true}
			var lastRollout, lastGroup int64 = -1, -1
			off := 0
			for line := range bytes.Lines(full) {
				samples, err := trajectories.NewReader(bytes.NewReader(line)).Next()
				require.NoError(t, err)
				if s := samples[0]; off > 0 && s.RolloutID != lastRollout {
					epEnd[off] = true
					if s.GroupIndex != lastGroup {
						groupEnd[off] = true
					}
				}
				lastRollout, lastGroup = samples[0].RolloutID, samples[0].GroupIndex
				off += len(line)
				lineEnd[off] = true
			}
			epEnd[off], groupEnd[off] = true, true

			type mode struct {
				name              string
				progress          *durable.Progress
				episodes          string
				provesEpisodes    bool // the episode file is used
				knowsGroups       bool // the group size is the run's
				provesAtFullBytes bool // the checkpoint is the whole file
			}
			modes := []mode{
				{name: "alone"},
				{name: "episode file", episodes: eps, provesEpisodes: true},
				{name: "progress file", progress: &progOnly, knowsGroups: true, provesAtFullBytes: true},
				{name: "both", progress: prog, provesEpisodes: true, knowsGroups: true, provesAtFullBytes: true},
			}
			// Every line boundary, and three cuts inside every line: after
			// its first byte, in its middle, and just before its newline.
			var cuts []int
			start := 0
			for n := 0; n <= len(full); n++ {
				if lineEnd[n] {
					cuts = append(cuts, n)
					if n > start+2 {
						cuts = append(cuts, start+1, (start+n)/2, n-1)
					}
					start = n
				}
			}
			prefix := filepath.Join(dir, layout+"-prefix.jsonl")
			checked := 0
			for _, m := range modes {
				for _, n := range cuts {
					require.NoError(t, os.WriteFile(prefix, full[:n], 0o644))
					_ = os.Remove(durable.PathOf(prefix))
					if m.progress != nil {
						require.NoError(t, m.progress.Write(nil, durable.PathOf(prefix)))
					}
					rep := checkFile(t.Context(), prefix, m.episodes, credit.Builtin())
					require.Empty(t, rep.Error)
					var want string
					switch {
					case !lineEnd[n]:
						want = trajectories.EndCutLine
					case layout == "flat" && !epEnd[n] && m.provesEpisodes:
						want = trajectories.EndPartialEpisode
					case layout == "flat" && !m.provesEpisodes && !(m.provesAtFullBytes && n == len(full)) && n > 0:
						want = trajectories.EndUnproven
					case m.knowsGroups && !groupEnd[n]:
						want = trajectories.EndPartialGroup
					default:
						want = trajectories.EndWhole
					}
					what := fmt.Sprintf("%s, %d of %d bytes: %v; notes %v", m.name, n, len(full), rep.Problems, rep.Notes)
					require.Equal(t, want, rep.Ending, what)
					// Problems: a cut line, a partial episode or group, and a
					// file shorter than its checkpoint are problems; whole and
					// unproven files have none.
					shorter := m.progress != nil && n < len(full)
					wantOK := (want == trajectories.EndWhole || want == trajectories.EndUnproven) && !shorter
					assert.Equal(t, wantOK, rep.OK, what)
					if want == trajectories.EndPartialEpisode {
						assert.Contains(t, strings.Join(rep.Problems, "; "), "a partial episode", what)
					}
					if shorter {
						assert.Contains(t, strings.Join(rep.Problems, "; "), "fewer than the", what)
					}
					checked++
				}
			}
			t.Logf("%d prefixes checked", checked)
		})
	}
}

// TestCheckExitStatus: a whole file exits 0, a partial one 1, one whose
// last episode nothing proves 3.
func TestCheckExitStatus(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "a.jsonl")
	res := troupe(t, "run", "elfarol", "-n", "6", "-p", "agents=20", "-q", "-o", out, "--episodes-out", out+".episodes")
	require.Equal(t, ExitOK, res.code, res.stderr)
	res = troupe(t, "check", out)
	assert.Equal(t, ExitOK, res.code, res.stdout)
	assert.Contains(t, res.stdout, "ok: 6 episodes")

	// head -n 110: the last episode has 10 of its 20 samples.
	lines := bytes.SplitAfter(readFile(t, out), []byte("\n"))
	head := filepath.Join(dir, "head.jsonl")
	require.NoError(t, os.WriteFile(head, bytes.Join(lines[:110], nil), 0o644))
	res = troupe(t, "check", head)
	assert.Equal(t, ExitUnproven, res.code, res.stdout)
	assert.Contains(t, res.stdout, "unproven")
	assert.Contains(t, res.stdout, "cannot be proven whole")
	res = troupe(t, "check", "--episodes", out+".episodes", head)
	assert.Equal(t, ExitFailure, res.code, res.stdout)
	assert.Contains(t, res.stdout, "rollout 5 has 10 of its 20 samples")
	res = troupe(t, "check", "--json", "--episodes", out+".episodes", head)
	assert.Contains(t, res.stdout, `"ending":"partial_episode"`)
}

// TestCheckRunDirectory: a run's directory, or its two files, are checked
// against each other and the progress file: an episode file cut at a line
// end (a kill or a full disk leaves the two files with different episode
// counts), a changed byte, a deleted file are problems.
func TestCheckRunDirectory(t *testing.T) {
	dir, out, eps, want := runWithEpisodes(t, 20)
	var res result
	for _, args := range [][]string{{dir}, {out, eps}} {
		res = troupe(t, append([]string{"check"}, args...)...)
		assert.Equal(t, ExitOK, res.code, res.stdout)
		assert.Contains(t, res.stdout, out+": ok: 6 episodes")
		assert.Contains(t, res.stdout, eps+": ok: 6 episodes in 6 groups, 120 samples (episode records), complete")
	}

	lines := bytes.SplitAfter(want, []byte("\n"))
	require.NoError(t, os.WriteFile(eps, bytes.Join(lines[:4], nil), 0o644))
	res = troupe(t, "check", dir)
	assert.Equal(t, ExitFailure, res.code, res.stdout)
	assert.Contains(t, res.stdout, eps+": the file has")
	assert.Contains(t, res.stdout, "shorter than its checkpoint")
	assert.Contains(t, res.stdout, "4 episodes, fewer than the 6 of the checkpoint")

	changed := bytes.Clone(want)
	i := bytes.IndexByte(changed, '7')
	require.GreaterOrEqual(t, i, 0)
	changed[i] = '8'
	require.NoError(t, os.WriteFile(eps, changed, 0o644))
	res = troupe(t, "check", out, eps)
	assert.Equal(t, ExitFailure, res.code, res.stdout)
	assert.Contains(t, res.stdout, eps+": the bytes up to offset "+strconv.Itoa(len(want))+" do not match the checkpoint")

	require.NoError(t, os.Remove(eps))
	res = troupe(t, "check", dir)
	assert.Equal(t, ExitFailure, res.code, res.stdout)
	assert.Contains(t, res.stdout, "the episode file "+eps+" its progress file names (--episodes-out) is missing")
}

// TestCheckJudgesTheEpisodeFileBesideSamples: given only the samples file,
// check judges the episode file its progress file names too: records past
// a finished run's end, and a line that does not parse, are problems of
// the samples file's report, naming the episode file. A forged
// "complete" is one too, where it was believed.
func TestCheckJudgesTheEpisodeFileBesideSamples(t *testing.T) {
	_, out, eps, want := runWithEpisodes(t, 5)
	lines := bytes.SplitAfter(want, []byte("\n"))
	require.NoError(t, os.WriteFile(eps, append(bytes.Clone(want), append(lines[5], `{"format":"troupe.episode/v2", cut`...)...), 0o644))
	res := troupe(t, "check", out)
	assert.Equal(t, ExitFailure, res.code, res.stdout)
	assert.Contains(t, res.stdout, eps+": line 7: rollout_id 5 after 5: a duplicate or out of order")
	assert.Contains(t, res.stdout, eps+": line 8: ")
	assert.Contains(t, res.stdout, eps+": 7 episodes, more than the 6 of the finished run")
	assert.NotContains(t, res.stdout, ", complete")

	// A run stopped at 4 of its 6 episodes, its progress file saying it
	// is complete.
	require.NoError(t, os.WriteFile(eps, want, 0o644))
	res = troupe(t, "run", "elfarol", "-n", "4", "-p", "agents=5", "-q", "-o", out, "--episodes-out", eps)
	require.Equal(t, ExitOK, res.code, res.stderr)
	prog, err := durable.Read(nil, durable.PathOf(out))
	require.NoError(t, err)
	forged := *prog
	spec, err := runspec.DecodeBytes(prog.Spec)
	require.NoError(t, err)
	spec.Episodes = 6
	forged.Spec, forged.SpecHash, forged.Complete = spec.Canonical(), spec.Hash(), false
	require.NoError(t, forged.Write(nil, durable.PathOf(out)))
	res = troupe(t, "check", out)
	assert.Equal(t, ExitOK, res.code, "a run stopped at 4 of 6 episodes: %s", res.stdout)
	assert.Contains(t, res.stdout, "incomplete (troupe run --resume continues it)")
	forged.Complete = true
	require.NoError(t, forged.Write(nil, durable.PathOf(out)))
	res = troupe(t, "check", out)
	assert.Equal(t, ExitFailure, res.code, res.stdout)
	assert.Contains(t, res.stdout, `"complete" is true, but 4 of the run's 6 groups (4 of its 6 episodes) were written (troupe run --resume refuses it)`)
	assert.NotContains(t, res.stdout, ", complete")
}

// runWithEpisodes runs 6 episodes of El Farol with agents patrons into a
// directory of its own, with --episodes-out, and returns the directory,
// the samples file, the episode file and the episode file's bytes.
func runWithEpisodes(t *testing.T, agents int) (dir, out, eps string, episodes []byte) {
	t.Helper()
	dir = t.TempDir()
	out = filepath.Join(dir, "a.jsonl")
	eps = out + ".episodes"
	res := troupe(t, "run", "elfarol", "-n", "6", "-p", "agents="+strconv.Itoa(agents), "-q", "-o", out, "--episodes-out", eps)
	require.Equal(t, ExitOK, res.code, res.stderr)
	return dir, out, eps, readFile(t, eps)
}
