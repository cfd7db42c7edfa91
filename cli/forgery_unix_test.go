//go:build unix

package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories/durable"
)

// forgery is an edit of a stopped run's progress file: troupe run --resume
// must refuse it naming says, or, says empty, resume it to the
// uninterrupted run's bytes.
type forgery struct {
	name string
	// field is the field a single-field forgery edits: two that edit
	// the same one are not paired (they may undo each other).
	field string
	edit  func(f *forger, p *durable.Progress)
	raw   func(data []byte) []byte // an edit of the encoded file, after edit
	says  string
	// checkOK: troupe check, which knows no command line, rightly finds
	// nothing wrong with the forged file (a path, another run's spec
	// that the files fit).
	checkOK bool
}

// forger knows the stopped run: its files, its spec, where its groups end.
type forger struct {
	t     *testing.T
	out   string
	spec  *runspec.Spec
	orig  *durable.Progress
	files [2]string
}

// digest is the digest of the first n bytes of file i.
func (f *forger) digest(i int, n int64) string {
	fh, err := os.Open(f.files[i])
	require.NoError(f.t, err)
	defer fh.Close()
	d := durable.NewDigest()
	require.NoError(f.t, d.Extend(fh, n))
	return d.String()
}

// boundary is where file i's lines of episodes before rollout_id base+k
// end: the offset, and the samples (lines of the flat samples file)
// before it.
func (f *forger) boundary(i int, episodes int64) (offset, lines int64) {
	fh, err := os.Open(f.files[i])
	require.NoError(f.t, err)
	defer fh.Close()
	br := bufio.NewReaderSize(fh, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return offset, lines // a cut line, or none
		}
		require.NoError(f.t, err)
		var ids struct {
			RolloutID int64 `json:"rollout_id"`
		}
		require.NoError(f.t, json.Unmarshal(line, &ids))
		if ids.RolloutID >= f.spec.RolloutIDBase+episodes {
			return offset, lines
		}
		offset += int64(len(line))
		lines++
	}
}

// at makes p the checkpoint after the first episodes episodes (counted as
// groups ends the run's groups) in both files, digests recomputed.
func (f *forger) at(p *durable.Progress, groups int, episodes int64) {
	for i := range p.Files {
		n, lines := f.boundary(i, episodes)
		p.Files[i].Bytes, p.Files[i].Digest = n, f.digest(i, n)
		if i == 0 {
			p.Samples = lines
		}
	}
	p.Groups, p.Episodes = groups, episodes
}

// respec replaces p's spec by spec with edit applied, its hash too when
// rehash.
func (f *forger) respec(p *durable.Progress, rehash bool, edit func(s *runspec.Spec)) {
	s, err := runspec.DecodeBytes(f.orig.Spec)
	require.NoError(f.t, err)
	edit(s)
	p.Spec = s.Canonical()
	if rehash {
		p.SpecHash = s.Hash()
	}
}

// forgeries are the edits TestForgedProgressIsNeverBelieved makes: each
// field alone, then consistent combinations, the counts of a finished run
// among them.
func forgeries(total int) []forgery {
	const hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	return []forgery{
		{name: "none"},
		{name: "complete", field: "complete", edit: func(f *forger, p *durable.Progress) { p.Complete = true }, says: `"complete" is true`},
		{name: "episodes=spec", field: "episodes", edit: func(f *forger, p *durable.Progress) { p.Episodes = int64(total) }, says: `"episodes" is`},
		{name: "episodes+group", field: "episodes", edit: func(f *forger, p *durable.Progress) { p.Episodes += 2 }, says: `"episodes" is`},
		{name: "episodes-group", field: "episodes", edit: func(f *forger, p *durable.Progress) { p.Episodes -= 2 }, says: `"episodes" is`},
		{name: "episodes-1", field: "episodes", edit: func(f *forger, p *durable.Progress) { p.Episodes-- }, says: `"episodes" is`},
		{name: "groups+1", field: "groups", edit: func(f *forger, p *durable.Progress) { p.Groups++ }, says: `"groups" is`},
		{name: "groups-1", field: "groups", edit: func(f *forger, p *durable.Progress) { p.Groups-- }, says: `"groups" is`},
		{name: "groups=spec", field: "groups", edit: func(f *forger, p *durable.Progress) { p.Groups = total / 2 }, says: `"groups" is`},
		{name: "samples+1", field: "samples", edit: func(f *forger, p *durable.Progress) { p.Samples++ }, says: `"samples" is`},
		{name: "samples-1", field: "samples", edit: func(f *forger, p *durable.Progress) { p.Samples-- }, says: `"samples" is`},
		{name: "negative samples", field: "samples", edit: func(f *forger, p *durable.Progress) { p.Samples = -1 }, says: "negative counts"},
		{name: "format v1", field: "format", edit: func(f *forger, p *durable.Progress) { p.Format = durable.FormatV1 }, says: "in a troupe.progress/v1 progress file"},
		{name: "format v4", field: "format", edit: func(f *forger, p *durable.Progress) { p.Format = "troupe.progress/v4" }, says: `format "troupe.progress/v4"`},
		// A run without stateful allocators needs nothing v3 added.
		{name: "format v2", field: "format", edit: func(f *forger, p *durable.Progress) { p.Format = durable.FormatV2 }},
		{name: "unknown field", field: "unknown", raw: func(b []byte) []byte { return bytes.Replace(b, []byte("{"), []byte(`{"verified": true,`), 1) }, says: `unknown field "verified"`},
		{name: "spec_hash", field: "spec_hash", edit: func(f *forger, p *durable.Progress) { p.SpecHash = hex }, says: "spec_hash: " + hex},
		{name: "spec", field: "spec", edit: func(f *forger, p *durable.Progress) {
			f.respec(p, false, func(s *runspec.Spec) { s.Episodes = int(p.Episodes) })
		}, says: `"spec_hash" is`},
		{name: "spec+hash", field: "spec", edit: func(f *forger, p *durable.Progress) {
			f.respec(p, true, func(s *runspec.Spec) { s.Seed++ })
		}, says: "written by another run: seed: ", checkOK: true},
		{name: "files[0].bytes-1", field: "files[0].bytes", edit: func(f *forger, p *durable.Progress) { p.Files[0].Bytes-- }, says: "do not match the checkpoint"},
		{name: "files[0].bytes+1", field: "files[0].bytes", edit: func(f *forger, p *durable.Progress) { p.Files[0].Bytes++ }, says: "do not match the checkpoint|shorter than its checkpoint"},
		{name: "files[0].digest", field: "files[0].digest", edit: func(f *forger, p *durable.Progress) { p.Files[0].Digest = durable.DigestPrefix + hex }, says: "do not match the checkpoint"},
		{name: "files[0].path", field: "files[0].path", edit: func(f *forger, p *durable.Progress) { p.Files[0].Path += ".other" }, says: "written by another run: files: ", checkOK: true},
		{name: "files[0].layout", field: "files[0].layout", edit: func(f *forger, p *durable.Progress) { p.Files[0].Layout = "nested" }, says: "written by another run: files: "},
		{name: "files[0].kind", field: "files[0].kind", edit: func(f *forger, p *durable.Progress) { p.Files[0].Kind = durable.KindEpisodes }, says: "no samples file"},
		{name: "files[1].bytes+1", field: "files[1].bytes", edit: func(f *forger, p *durable.Progress) { p.Files[1].Bytes++ }, says: "do not match the checkpoint|shorter than its checkpoint"},
		{name: "files[1].digest", field: "files[1].digest", edit: func(f *forger, p *durable.Progress) { p.Files[1].Digest = durable.DigestPrefix + hex }, says: "do not match the checkpoint"},
		{name: "files[1] dropped", field: "files[1]", edit: func(f *forger, p *durable.Progress) { p.Files = p.Files[:1] }, says: "written by another run: files: ", checkOK: true},
		{name: "allocator_states", field: "allocator_states", edit: func(f *forger, p *durable.Progress) {
			p.States = append(p.States, durable.State{Allocator: "rae", State: json.RawMessage(`{"version":1,"baselines":[]}`)})
		}, says: `"allocator_states" holds the states of [rae]`},

		// Consistent combinations.
		{name: "finished counts", edit: func(f *forger, p *durable.Progress) {
			p.Complete, p.Groups, p.Episodes, p.Samples = true, total/2, int64(total), p.Samples*int64(total)/p.Episodes
		}, says: `"episodes" is`},
		{name: "finished counts, whole files", edit: func(f *forger, p *durable.Progress) {
			p.Complete, p.Groups, p.Episodes, p.Samples = true, total/2, int64(total), p.Samples*int64(total)/p.Episodes
			for i := range p.Files {
				fi, err := os.Stat(f.files[i])
				require.NoError(f.t, err)
				p.Files[i].Bytes, p.Files[i].Digest = fi.Size(), f.digest(i, fi.Size())
			}
		}, says: `"episodes" is`},
		{name: "complete run of its episodes", edit: func(f *forger, p *durable.Progress) {
			f.respec(p, true, func(s *runspec.Spec) { s.Episodes = int(p.Episodes) })
			p.Complete = true
		}, says: "written by another run: episodes: ", checkOK: true},
		{name: "samples file a group back", edit: func(f *forger, p *durable.Progress) {
			n, lines := f.boundary(0, p.Episodes-2)
			p.Files[0].Bytes, p.Files[0].Digest, p.Samples = n, f.digest(0, n), lines
		}, says: `"episodes" is`},
		{name: "counts a group back", edit: func(f *forger, p *durable.Progress) {
			_, lines := f.boundary(0, p.Episodes-2)
			p.Groups, p.Episodes, p.Samples = p.Groups-1, p.Episodes-2, lines
		}, says: `the bytes its checkpoint vouches for`},
		{name: "mid-group checkpoint", edit: func(f *forger, p *durable.Progress) { f.at(p, p.Groups-1, p.Episodes-1) }, says: `"episodes" is`},
		{name: "mid-line checkpoint", edit: func(f *forger, p *durable.Progress) {
			p.Files[0].Bytes -= 7
			p.Files[0].Digest = f.digest(0, p.Files[0].Bytes)
		}, says: "files[0]"},
		{name: "checkpoint ten groups back", edit: func(f *forger, p *durable.Progress) { f.at(p, p.Groups-10, p.Episodes-20) }},
		{name: "checkpoint at the start", edit: func(f *forger, p *durable.Progress) { f.at(p, 0, 0) }},
	}
}

// TestForgedProgressIsNeverBelieved edits the progress file of a stopped
// run (SIGKILL) field by field, alone and in consistent combinations,
// digests recomputed where the edit moves a checkpoint: troupe run
// --resume must refuse each forgery naming the field (exit 2), or resume
// to the uninterrupted run's bytes when the forgery describes an earlier
// checkpoint of the same bytes; troupe check must call a refused one a
// problem. Every pair of the single-field forgeries is tried too.
func TestForgedProgressIsNeverBelieved(t *testing.T) {
	bin := buildTroupe(t)
	dir := t.TempDir()
	const total = 3000
	args := func(out string) []string {
		return []string{"run", "elfarol", "-n", fmt.Sprint(total), "-g", "2", "-p", "agents=5", "-a", "team",
			"-c", "1", "-q", "--checkpoint-every", "1ms", "-o", out, "--episodes-out", out + ".episodes"}
	}
	ref := filepath.Join(dir, "ref.jsonl")
	res := runBin(t, bin, args(ref)...)
	require.Equal(t, 0, res.code, res.stderr)
	want := [2][]byte{readFile(t, ref), readFile(t, ref+".episodes")}

	out := filepath.Join(dir, "run.jsonl")
	f := &forger{t: t, out: out, files: [2]string{out, out + ".episodes"}}
	f.orig = stopRun(t, bin, args(out), durable.PathOf(out), total)
	spec, err := runspec.DecodeBytes(f.orig.Spec)
	require.NoError(t, err)
	f.spec = spec
	t.Logf("stopped at group %d: %d of %d episodes", f.orig.Groups, f.orig.Episodes, total)
	saved := [3][]byte{readFile(t, out), readFile(t, out+".episodes"), readFile(t, durable.PathOf(out))}

	cases := forgeries(total)
	// Pairs of the single-field forgeries (those before "finished counts").
	singles := cases[1:slices.IndexFunc(cases, func(c forgery) bool { return c.name == "finished counts" })]
	if !testing.Short() {
		for i, a := range singles {
			for _, b := range singles[i+1:] {
				if strings.HasPrefix(a.field, b.field) || strings.HasPrefix(b.field, a.field) {
					continue
				}
				says := a.says + "|" + b.says
				if strings.HasPrefix(a.name, "spec") || strings.HasPrefix(b.name, "spec") {
					says += "|written by another run" // the spec's fields differ from the command line's
				}
				cases = append(cases, forgery{name: a.name + " + " + b.name, says: says, checkOK: (a.checkOK || a.says == "") && (b.checkOK || b.says == ""),
					edit: func(f *forger, p *durable.Progress) {
						for _, e := range []forgery{a, b} {
							if e.edit != nil {
								e.edit(f, p)
							}
						}
					},
					raw: func(data []byte) []byte {
						for _, e := range []forgery{a, b} {
							if e.raw != nil {
								data = e.raw(data)
							}
						}
						return data
					},
				})
			}
		}
	}

	var refused, repaired int
	defer func() {
		t.Logf("%d forgeries: %d refused naming the field, %d resumed byte-identical", len(cases), refused, repaired)
	}()
	for _, fc := range cases {
		for i, path := range []string{out, out + ".episodes", durable.PathOf(out)} {
			require.NoError(t, os.WriteFile(path, saved[i], 0o644))
		}
		p, err := durable.Read(nil, durable.PathOf(out))
		require.NoError(t, err)
		if fc.edit != nil {
			fc.edit(f, p)
		}
		data, err := json.MarshalIndent(p, "", "  ")
		require.NoError(t, err)
		if fc.raw != nil {
			data = fc.raw(data)
		}
		require.NoError(t, os.WriteFile(durable.PathOf(out), data, 0o644))

		check := runBin(t, bin, "check", out)
		res := runBin(t, bin, append(args(out), "--resume")...)
		if fc.says == "" {
			require.Equal(t, 0, res.code, "%s: %s", fc.name, res.stderr)
			for i, path := range f.files {
				require.True(t, bytes.Equal(want[i], readFile(t, path)), "%s: exit 0, but %s differs from the uninterrupted run's", fc.name, path)
			}
			assert.NotContains(t, check.stdout, "refuses it", "%s: troupe check: %s", fc.name, check.stdout)
			repaired++
			continue
		}
		require.Equal(t, 2, res.code, "%s: believed: %s", fc.name, res.stderr)
		assert.NotContains(t, res.stderr, "nothing to resume", fc.name)
		named := false
		for _, s := range strings.Split(fc.says, "|") {
			named = named || s != "" && strings.Contains(res.stderr, s)
		}
		assert.True(t, named, "%s: the refusal names none of %q: %s", fc.name, fc.says, res.stderr)
		for i, path := range []string{out, out + ".episodes", durable.PathOf(out)} {
			assert.True(t, bytes.Equal(readFile(t, path), map[bool][]byte{true: data, false: saved[i]}[i == 2]), "%s: a refusal changed %s", fc.name, path)
		}
		if !fc.checkOK {
			assert.Equal(t, 1, check.code, "%s: troupe check believes it: %s", fc.name, check.stdout)
			assert.True(t, strings.Contains(check.stdout, "refuses it") || strings.Contains(check.stdout, "progress file: "),
				"%s: troupe check finds something else wrong, not the forgery: %s", fc.name, check.stdout)
		}
		refused++
	}
}

// stopRun starts a run and SIGKILLs it once its progress file vouches for
// some groups, but not all, and returns that progress.
func stopRun(t *testing.T, bin string, args []string, progress string, total int) *durable.Progress {
	t.Helper()
	cmd := exec.Command(bin, args...)
	require.NoError(t, cmd.Start())
	for {
		if p, err := durable.Read(nil, progress); err == nil && p.Groups >= 20 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	p, err := durable.Read(nil, progress) // a later checkpoint may have been written
	require.NoError(t, err)
	require.False(t, p.Complete, "the run of %d episodes finished before it could be killed", total)
	return p
}

// TestForgedAllocatorStatesAreRefused: a stopped rae run's progress file
// with its allocator's states edited (dropped, renamed, doubled, a
// baseline or an update count changed by the least amount, at the
// checkpoint or at the start, or both) is refused by --resume and troupe
// check, naming the field: replaying the episode file from the states at
// the start must give each record's credit and the states at the
// checkpoint. A v2 progress file (no states at the start) cannot be
// verified, and is refused too.
func TestForgedAllocatorStatesAreRefused(t *testing.T) {
	bin := buildTroupe(t)
	out := filepath.Join(t.TempDir(), "rae.jsonl")
	args := []string{"run", "elfarol", "-n", "3000", "-g", "2", "-p", "agents=5", "-a", "rae,team",
		"-c", "1", "-q", "--checkpoint-every", "1ms", "-o", out, "--episodes-out", out + ".episodes"}
	orig := stopRun(t, bin, args, durable.PathOf(out), 3000)
	require.Len(t, orig.States, 1)
	require.Len(t, orig.StartStates, 1)
	saved := [3][]byte{readFile(t, out), readFile(t, out+".episodes"), readFile(t, durable.PathOf(out))}
	// rae's state, edited: its first baseline's value or update count.
	edited := func(st durable.State, value float64, updates int64) durable.State {
		var rs struct {
			Version   int              `json:"version"`
			Baselines []map[string]any `json:"baselines"`
		}
		require.NoError(t, json.Unmarshal(st.State, &rs))
		if len(rs.Baselines) == 0 {
			rs.Baselines = []map[string]any{{"scenario": "elfarol", "role": "patron", "baseline": 0.0, "updates": 0.0}}
		}
		b := rs.Baselines[0]
		b["baseline"] = math.Nextafter(b["baseline"].(float64), math.Inf(1)) + value
		b["updates"] = b["updates"].(float64) + float64(updates)
		data, err := json.Marshal(rs)
		require.NoError(t, err)
		return durable.State{Allocator: st.Allocator, State: data}
	}
	bump := func(sts []durable.State, value float64, updates int64) []durable.State {
		return []durable.State{edited(sts[0], value, updates)}
	}
	for _, tc := range []struct {
		name string
		edit func(p *durable.Progress)
		says string
	}{
		{"dropped", func(p *durable.Progress) { p.States = nil }, `"allocator_states" holds the states of`},
		{"renamed", func(p *durable.Progress) {
			p.States = []durable.State{{Allocator: "rae:alpha=0.5", State: p.States[0].State}}
		}, `"allocator_states" holds the states of`},
		{"doubled", func(p *durable.Progress) { p.States = append(p.States, p.States[0]) }, `"allocator_states" holds the states of`},
		{"start dropped", func(p *durable.Progress) { p.StartStates = nil }, `"allocator_states_at_start" holds the states of`},
		{"baseline by an ulp", func(p *durable.Progress) { p.States = bump(p.States, 0, 0) }, `"allocator_states": rae's state is not what replaying`},
		{"updates", func(p *durable.Progress) { p.States = bump(p.States, 0, 1) }, `"allocator_states": rae's state is not what replaying`},
		{"start baseline", func(p *durable.Progress) { p.StartStates = bump(p.StartStates, 0.5, 0) }, "other credit than its record"},
		{"start updates", func(p *durable.Progress) { p.StartStates = bump(p.StartStates, 0, 7) }, `"allocator_states": rae's state is not what replaying`},
		{"both", func(p *durable.Progress) {
			p.StartStates, p.States = bump(p.StartStates, 0.5, 0), bump(p.States, 0.5, 0)
		}, "other credit than its record"},
		{"format v2", func(p *durable.Progress) { p.Format, p.StartStates = durable.FormatV2, nil }, "its allocator states cannot be verified: a troupe.progress/v2 progress file"},
	} {
		for i, path := range []string{out, out + ".episodes", durable.PathOf(out)} {
			require.NoError(t, os.WriteFile(path, saved[i], 0o644))
		}
		p := *orig
		tc.edit(&p)
		require.NoError(t, p.Write(nil, durable.PathOf(out)))
		check := runBin(t, bin, "check", out)
		if tc.name != "format v2" {
			assert.Equal(t, 1, check.code, "%s: troupe check: %s", tc.name, check.stdout)
		}
		assert.Contains(t, check.stdout, tc.says, tc.name)
		res := runBin(t, bin, append(args, "--resume")...)
		assert.Equal(t, 2, res.code, "%s: %s", tc.name, res.stderr)
		assert.Contains(t, res.stderr, tc.says, tc.name)
	}
	// Unedited, it resumes to the uninterrupted run's bytes.
	for i, path := range []string{out, out + ".episodes", durable.PathOf(out)} {
		require.NoError(t, os.WriteFile(path, saved[i], 0o644))
	}
	res := runBin(t, bin, append(args, "--resume")...)
	require.Equal(t, 0, res.code, res.stderr)
	ref := filepath.Join(t.TempDir(), "ref.jsonl")
	refArgs := slices.Clone(args)
	refArgs[len(refArgs)-3], refArgs[len(refArgs)-1] = ref, ref+".episodes"
	require.Equal(t, 0, runBin(t, bin, refArgs...).code)
	assert.True(t, bytes.Equal(readFile(t, ref), readFile(t, out)), "the resumed samples differ")
	assert.True(t, bytes.Equal(readFile(t, ref+".episodes"), readFile(t, out+".episodes")), "the resumed episodes differ")
}

// TestResumeOfAV2ProgressFile: a v2 progress file (no states at the
// start) of a rae run without an episode file resumes to the
// uninterrupted run's bytes, and stays v2: a later resume believes it
// as the first did.
func TestResumeOfAV2ProgressFile(t *testing.T) {
	bin := buildTroupe(t)
	dir := t.TempDir()
	args := func(out string) []string {
		return []string{"run", "elfarol", "-n", "3000", "-g", "2", "-p", "agents=5", "-a", "rae,team",
			"-c", "1", "-q", "--checkpoint-every", "1ms", "-o", out}
	}
	ref := filepath.Join(dir, "ref.jsonl")
	require.Equal(t, 0, runBin(t, bin, args(ref)...).code)
	out := filepath.Join(dir, "v2.jsonl")
	p := stopRun(t, bin, args(out), durable.PathOf(out), 3000)
	p.Format, p.StartStates = durable.FormatV2, nil
	require.NoError(t, p.Write(nil, durable.PathOf(out)))
	for range 2 {
		res := runBin(t, bin, append(args(out), "--resume")...)
		require.Equal(t, 0, res.code, res.stderr)
		assert.True(t, bytes.Equal(readFile(t, ref), readFile(t, out)), "the resumed samples differ")
		after, err := durable.Read(nil, durable.PathOf(out))
		require.NoError(t, err)
		assert.Equal(t, durable.FormatV2, after.Format)
		assert.True(t, after.Complete)
	}
}
