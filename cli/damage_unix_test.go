//go:build unix

package cli_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/trajectories/durable"
)

// damages are what TestKillAndDamageResume does to an output file after a
// kill: each either ends in a byte-identical resume or in a refusal that
// names the damage.
var damages = []struct {
	name string
	says string // what a refusal says of it
}{
	{"none", ""},
	{"delete", "the file is missing"},
	{"empty", "shorter than its checkpoint"},
	{"truncate", "shorter than its checkpoint"},
	{"flip", "do not match the checkpoint"},
	{"digit", "do not match the checkpoint"},
}

// damage applies damage to the file at path and returns the offset of the
// first byte it changed (or cut, or the file's length for a delete), -1
// when it changed nothing.
func damage(t *testing.T, rng *rand.Rand, name, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return -1
	}
	require.NoError(t, err)
	n := int64(len(data))
	switch name {
	case "delete":
		require.NoError(t, os.Remove(path))
		return 0
	case "empty":
		require.NoError(t, os.Truncate(path, 0))
		return 0
	case "truncate":
		if n == 0 {
			return -1
		}
		at := rng.Int64N(n)
		require.NoError(t, os.Truncate(path, at))
		return at
	case "flip":
		if n == 0 {
			return -1
		}
		at := rng.Int64N(n)
		data[at] ^= 1 << rng.IntN(8)
		require.NoError(t, os.WriteFile(path, data, 0o644))
		return at
	case "digit":
		var digits []int64
		for i, c := range data {
			if '0' <= c && c <= '9' {
				digits = append(digits, int64(i))
			}
		}
		if len(digits) == 0 {
			return -1
		}
		at := digits[rng.IntN(len(digits))]
		data[at] = '0' + (data[at]-'0'+1+byte(rng.IntN(9)))%10
		require.NoError(t, os.WriteFile(path, data, 0o644))
		return at
	}
	return -1
}

// TestKillAndDamageResume is the kill-and-damage loop: a run with
// --episodes-out is killed (SIGKILL) at a random moment, or let finish;
// then one of its files is deleted, emptied, cut, or has a byte flipped or
// a digit changed, at random; then --resume. It must end in the
// uninterrupted run's bytes, in both files, or in a refusal (exit 2) that
// names the file and the damage, and it must refuse whenever the damage
// touched the bytes the checkpoint vouches for: never exit 0 with damaged
// output. troupe check must call a refused run's files a problem.
// TROUPE_KILL_SEED repeats a test's moments.
func TestKillAndDamageResume(t *testing.T) {
	bin := buildTroupe(t)
	rng := killRand(t, 1)

	dir := t.TempDir()
	args := func(out string) []string {
		return []string{"run", "elfarol", "-n", "400", "-g", "2", "-p", "agents=20", "-a", "rae,team",
			"-c", "2", "-q", "--checkpoint-every", "20ms", "-o", out, "--episodes-out", out + ".episodes"}
	}
	ref := filepath.Join(dir, "ref.jsonl")
	// The faster of two runs: the first may pay for a cold cache, and kills
	// past the end of a run test less.
	elapsed := time.Duration(1 << 62)
	for range 2 {
		start := time.Now()
		res := runBin(t, bin, args(ref)...)
		require.Equal(t, 0, res.code, res.stderr)
		elapsed = min(elapsed, time.Since(start))
	}
	t.Logf("an uninterrupted run takes %v", elapsed)
	want := [2][]byte{readFile(t, ref), readFile(t, ref+".episodes")}

	moments := 2 * 2 * len(damages) // every damage to either file, twice
	if testing.Short() {
		moments = 2 * len(damages)
	}
	var refused, resumed, complete int
	defer func() {
		t.Logf("%d moments: %d resumed byte-identical, %d refused; %d runs had finished", moments, resumed, refused, complete)
	}()
	for m := range moments {
		dmg := damages[m%len(damages)]
		which := (m / len(damages)) % 2 // 0: samples, 1: episodes
		out := filepath.Join(dir, fmt.Sprintf("run%d.jsonl", m))
		paths := [2]string{out, out + ".episodes"}

		cmd := exec.Command(bin, args(out)...)
		require.NoError(t, cmd.Start())
		// A quarter of the runs finish: a complete run is verified too.
		at := time.Duration(rng.Int64N(int64(elapsed)))
		if m%4 != 3 {
			time.Sleep(at)
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
		_ = cmd.Wait()
		// Killed before its first checkpoint, the run vouches for nothing.
		var vouched int64
		finished := false
		if prog, err := durable.Read(nil, durable.PathOf(out)); err == nil {
			vouched, finished = prog.Files[which].Bytes, prog.Complete
		} else {
			require.ErrorIs(t, err, durable.ErrNoProgress)
		}
		if finished {
			complete++
		}
		at2 := damage(t, rng, dmg.name, paths[which])
		inPrefix := at2 >= 0 && at2 < vouched
		name := fmt.Sprintf("%d: kill at %v (complete %v), %s %s at %d of the %d bytes vouched for", m, at.Round(time.Millisecond), finished, dmg.name, paths[which], at2, vouched)

		res := runBin(t, bin, append(args(out), "--resume")...)
		if res.code == 0 {
			resumed++
			require.False(t, inPrefix, "%s: resumed over damage: %s", name, res.stderr)
			for i := range paths {
				require.True(t, bytes.Equal(want[i], readFile(t, paths[i])), "%s: exit 0, but %s differs from the uninterrupted run's", name, paths[i])
			}
			continue
		}
		refused++
		require.Equal(t, 2, res.code, "%s: %s", name, res.stderr)
		require.True(t, inPrefix, "%s: refused damage the checkpoint does not vouch for: %s", name, res.stderr)
		assert.Contains(t, res.stderr, paths[which]+": ", name)
		assert.Contains(t, res.stderr, dmg.says, name)
		assert.Contains(t, res.stderr, "remove "+out+" and "+durable.PathOf(out), name)
		assert.NotContains(t, res.stderr, "nothing to resume", name)
		check := runBin(t, bin, "check", out)
		assert.Equal(t, 1, check.code, "%s: troupe check: %s", name, check.stdout)

		// The remedy works: without the progress file and the samples,
		// --resume starts the run again.
		if m%3 == 0 {
			require.NoError(t, os.Remove(durable.PathOf(out)))
			_ = os.Remove(out)
			res := runBin(t, bin, append(args(out), "--resume")...)
			require.Equal(t, 0, res.code, "%s: after the remedy: %s", name, res.stderr)
			for i := range paths {
				require.True(t, bytes.Equal(want[i], readFile(t, paths[i])), "%s: after the remedy, %s differs", name, paths[i])
			}
		}
	}
}

// TestResumeRefusesADamagedCompleteRun is the case: a finished
// run whose output was deleted, emptied, overwritten or cut is not
// "nothing to resume".
func TestResumeRefusesADamagedCompleteRun(t *testing.T) {
	bin := buildTroupe(t)
	out := filepath.Join(t.TempDir(), "r.jsonl")
	args := []string{"run", "elfarol", "-n", "30", "-q", "-o", out}
	res := runBin(t, bin, args...)
	require.Equal(t, 0, res.code, res.stderr)
	want := readFile(t, out)

	random := make([]byte, len(want))
	for i := range random {
		random[i] = byte(i*131 + 7)
	}
	for _, tc := range []struct {
		name   string
		damage func()
		says   string
	}{
		{"rm", func() { require.NoError(t, os.Remove(out)) }, out + ": the file is missing"},
		{"empty", func() { require.NoError(t, os.WriteFile(out, nil, 0o644)) }, out + ": the file has 0 bytes, shorter than its checkpoint"},
		{"random", func() { require.NoError(t, os.WriteFile(out, random, 0o644)) }, out + ": the bytes up to offset " + strconv.Itoa(len(want)) + " do not match the checkpoint"},
		{"cut", func() { require.NoError(t, os.WriteFile(out, want[:len(want)/2], 0o644)) }, "shorter than its checkpoint"},
	} {
		tc.damage()
		res := runBin(t, bin, append(args, "--resume")...)
		assert.Equal(t, 2, res.code, "%s: %s", tc.name, res.stderr)
		assert.Contains(t, res.stderr, tc.says, tc.name)
		assert.NotContains(t, res.stderr, "nothing to resume", tc.name)
		require.NoError(t, os.WriteFile(out, want, 0o644))
	}
	// Restored, it is complete again; bytes a kill could not have left
	// after the end are cut.
	require.NoError(t, os.WriteFile(out, append(append([]byte{}, want...), "{\"cut"...), 0o644))
	res = runBin(t, bin, append(args, "--resume")...)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Equal(t, want, readFile(t, out))
}

// TestResumeRefusesAV1ProgressFile: a progress file without digests (the
// format before) cannot vouch for its files: --resume refuses it, saying
// so; troupe check notes that the files are not verified.
func TestResumeRefusesAV1ProgressFile(t *testing.T) {
	bin := buildTroupe(t)
	out := filepath.Join(t.TempDir(), "r.jsonl")
	args := []string{"run", "elfarol", "-n", "10", "-q", "-o", out}
	res := runBin(t, bin, args...)
	require.Equal(t, 0, res.code, res.stderr)
	prog, err := durable.Read(nil, durable.PathOf(out))
	require.NoError(t, err)
	prog.Format, prog.Files[0].Digest, prog.Complete = durable.FormatV1, "", false
	require.NoError(t, prog.Write(nil, durable.PathOf(out)))
	res = runBin(t, bin, append(args, "--resume")...)
	assert.Equal(t, 2, res.code, res.stderr)
	assert.Contains(t, res.stderr, out+": its checkpoint")
	assert.Contains(t, res.stderr, "has no digest (a troupe.progress/v1 progress file")
	check := runBin(t, bin, "check", out)
	assert.Contains(t, check.stdout, "not verified")
}
