package durable_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/trajectories/durable"
)

// TestReopenCutsBackToTheCheckpoint: what follows the checkpoint (more
// lines, a cut one) goes; a file shorter than its checkpoint, or whose
// checkpoint does not end a line, is refused.
func TestReopenCutsBackToTheCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	require.NoError(t, os.WriteFile(path, []byte("one\ntwo\nthr"), 0o644))
	var last string
	f, err := durable.Reopen(nil, durable.File{Path: path, Bytes: 8}, func(line []byte) error { last = string(line); return nil })
	require.NoError(t, err)
	_, err = f.Write([]byte("four\n"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.Equal(t, "two", last)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "one\ntwo\nfour\n", string(got))

	_, err = durable.Reopen(nil, durable.File{Path: path, Bytes: 100}, nil)
	assert.ErrorIs(t, err, durable.ErrShortFile)
	_, err = durable.Reopen(nil, durable.File{Path: path, Bytes: 6}, nil)
	assert.ErrorIs(t, err, durable.ErrBadProgress, "not at a line's end")
	wrong := errors.New("not the checkpoint's line")
	_, err = durable.Reopen(nil, durable.File{Path: path, Bytes: 4}, func([]byte) error { return wrong })
	assert.ErrorIs(t, err, wrong)
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "one\ntwo\nfour\n", string(got), "a refused reopen leaves the file alone")

	// Killed before the file was created: a checkpoint at 0 creates it.
	f, err = durable.Reopen(nil, durable.File{Path: filepath.Join(t.TempDir(), "new.jsonl")}, nil)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func TestCheckNamesTheDifferences(t *testing.T) {
	p := &durable.Progress{SpecHash: "a", Spec: json.RawMessage(`{"episodes":10,"params":{"agents":"5","nights":"7"}}`),
		Files: []durable.File{{Kind: durable.KindSamples, Path: "out/a.jsonl", Layout: "flat"}}}
	same := *p
	same.Files = []durable.File{{Kind: durable.KindSamples, Path: "./out/a.jsonl", Layout: "flat", Bytes: 99}}
	require.NoError(t, p.Check(&same), "progress and spelling of a path are not the run")

	other := &durable.Progress{SpecHash: "b", Spec: json.RawMessage(`{"episodes":20,"params":{"agents":"5"}}`),
		Files: []durable.File{{Kind: durable.KindSamples, Path: "out/a.jsonl", Layout: "nested"}}}
	err := p.Check(other)
	require.ErrorIs(t, err, durable.ErrOtherRun)
	var me *durable.MismatchError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, []durable.Diff{
		{Path: "episodes", Old: "10", Now: "20"},
		{Path: "params.nights", Old: `"7"`, Now: "null"},
		{Path: "files", Old: "samples out/a.jsonl (flat)", Now: "samples out/a.jsonl (nested)"},
	}, me.Diffs)
}

// TestVerifyNamesTheDamage: a file is verified up to its checkpoint against
// the digest of what was written; bytes after it do not count, and a
// missing, short or changed file is refused, naming the file.
func TestVerifyNamesTheDamage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.jsonl")
	data := []byte("one\ntwo\nthree\n")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	fh, err := os.Open(path)
	require.NoError(t, err)
	d := durable.NewDigest()
	require.NoError(t, d.Extend(fh, 4))
	require.NoError(t, d.Extend(fh, 8)) // running: the same as at once
	fh.Close()
	f := durable.File{Path: path, Bytes: 8, Digest: d.String()}

	got, err := durable.Verify(nil, f)
	require.NoError(t, err)
	assert.Equal(t, d.String(), got.String())
	assert.Equal(t, int64(8), got.Len())

	require.NoError(t, os.WriteFile(path, []byte("one\ntwX\nthree\n"), 0o644))
	_, err = durable.Verify(nil, f)
	assert.ErrorIs(t, err, durable.ErrDamaged)
	assert.ErrorContains(t, err, path+": the bytes up to offset 8 do not match the checkpoint")

	require.NoError(t, os.WriteFile(path, []byte("one\ntwo\nXXXXX"), 0o644))
	_, err = durable.Verify(nil, f)
	assert.NoError(t, err, "bytes after the checkpoint are not vouched for")

	require.NoError(t, os.Truncate(path, 6))
	_, err = durable.Verify(nil, f)
	assert.ErrorIs(t, err, durable.ErrShortFile)
	assert.ErrorContains(t, err, path+": the file has 6 bytes, shorter than its checkpoint (8 bytes)")

	require.NoError(t, os.Remove(path))
	_, err = durable.Verify(nil, f)
	assert.ErrorIs(t, err, durable.ErrDamaged)
	assert.ErrorContains(t, err, path+": the file is missing")
	_, err = durable.Verify(nil, durable.File{Path: path, Digest: durable.NewDigest().String()})
	assert.NoError(t, err, "killed before the file was created")

	_, err = durable.Verify(nil, durable.File{Path: path, Bytes: 8})
	assert.ErrorIs(t, err, durable.ErrUnverifiable)
}

// TestReadDigests: a v3 or v2 progress file's files carry a well-formed
// digest, a v1 file's none.
func TestReadDigests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	good := durable.NewDigest().String()
	for _, tc := range []struct {
		format, digest string
		ok             bool
	}{
		{durable.Format, good, true},
		{durable.Format, "", false},
		{durable.Format, "sha256:" + good[len(durable.DigestPrefix):], false},
		{durable.Format, good[:len(good)-1], false},
		{durable.FormatV2, good, true},
		{durable.FormatV2, "", false},
		{durable.FormatV1, "", true},
		{durable.FormatV1, good, false},
	} {
		p := durable.Progress{Format: tc.format, Files: []durable.File{{Kind: durable.KindSamples, Path: "a.jsonl", Digest: tc.digest}}}
		require.NoError(t, p.Write(nil, path))
		_, err := durable.Read(nil, path)
		if tc.ok {
			assert.NoError(t, err, "%s %q", tc.format, tc.digest)
		} else {
			assert.ErrorIs(t, err, durable.ErrBadProgress, "%s %q", tc.format, tc.digest)
		}
	}
}

// TestWriterKeepsTheDigest: the writer's digest is the file's, read back or
// not; a cut below what it hashed (a failed write cut back) spoils it.
func TestWriterKeepsTheDigest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w := durable.NewWriter(f, nil)
	for _, s := range []string{"one\n", "two\n", "three\n"} {
		_, err := w.Write([]byte(s))
		require.NoError(t, err)
	}
	n, digest, err := w.Digest()
	require.NoError(t, err)
	assert.Equal(t, int64(14), n)
	d, err := durable.Verify(nil, durable.File{Path: path, Bytes: n, Digest: digest})
	require.NoError(t, err)
	assert.Equal(t, digest, d.String())

	require.NoError(t, w.Truncate(10))
	_, _, err = w.Digest()
	assert.Error(t, err)
}
