// Package durable makes a run's output files resumable after any
// interruption, a SIGKILL or the OOM killer included.
//
// A run writes its output files (samples, and episode records with
// --episodes-out) as whole groups, always a prefix of what the run
// uninterrupted writes (play.Run, trajectories.GroupSink). Beside them it
// keeps a progress file (Progress: format troupe.progress/v3), written
// atomically (a temporary file renamed into place) at checkpoints: the run
// spec's hash and canonical form, each file's length at the checkpoint and
// the digest (HighwayHash-256) of its bytes up to there (a running digest, extended at each
// checkpoint with what was written since),
// the groups, episodes and samples written before it, and the state of the
// stateful allocators (RAE's baselines) after them. Output, which wraps a
// run's output stage, takes the checkpoints: at the start, at group ends
// at most every Every, and when the run ends, however it ends.
//
// To resume, a run reads the progress file, refuses it unless it is the
// same run (Progress.Check names the differences), verifies each file's
// bytes up to its checkpoint against the digest (Verify: a file deleted,
// emptied, cut or changed after the run wrote it is refused, a finished
// run's too), cuts each file back to
// its checkpointed length (Reopen: dropping what a kill left after it, a
// cut line included), restores the allocators' state and plays on from
// the next group. Since every byte before the checkpoint is what the
// uninterrupted run writes, and the rest is played again from the same
// seeds, the resumed file is byte-identical to an uninterrupted run's.
package durable

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/internal/atomicfile"
	"github.com/troupe-rl/troupe/internal/vfs"
)

// Format is the version of the progress file: v3 added the stateful
// allocators' states at the run's start (Progress.StartStates), v2 each
// file's digest (File.Digest).
const Format = "troupe.progress/v3"

// FormatV2 is the version before v3: no states at the start. Read accepts
// it; a resume refuses it when the run has a stateful allocator and an
// episode file (its states cannot be verified: Audit).
const FormatV2 = "troupe.progress/v2"

// FormatV1 is the version before v2: files without digests. Read accepts it
// (troupe check reports on it); a resume refuses it (Verify).
const FormatV1 = "troupe.progress/v1"

// Suffix is appended to the samples file's path to name its progress file.
const Suffix = ".progress.json"

// PathOf returns the progress file of the samples file out.
func PathOf(out string) string { return out + Suffix }

// File kinds.
const (
	KindSamples  = "samples"  // slime samples, in Layout
	KindEpisodes = "episodes" // troupe.episode/v2 records
)

// File is one output file of a run at a checkpoint.
type File struct {
	Kind   string `json:"kind"`             // KindSamples or KindEpisodes
	Path   string `json:"path"`             // as given on the command line
	Layout string `json:"layout,omitempty"` // samples: flat or nested, then ", merged turns" with troupe run --merge-turns
	Bytes  int64  `json:"bytes"`            // its length at the checkpoint
	// Digest is the digest of its first Bytes bytes (v2; empty in v1):
	// DigestPrefix and the hex HighwayHash-256.
	Digest string `json:"digest,omitempty"`
}

// State is a stateful allocator's state at a checkpoint.
type State struct {
	Allocator string          `json:"allocator"`
	State     json.RawMessage `json:"state"`
}

// Progress is a progress file: which run wrote the files, and how far it
// got at its last checkpoint.
type Progress struct {
	Format string `json:"format"`
	// SpecHash is the run spec's hash (runspec.Spec.Hash); Spec its
	// canonical JSON, to name what differs when a resume is refused.
	SpecHash string          `json:"spec_hash"`
	Spec     json.RawMessage `json:"spec"`
	// Files are the run's output files, the samples first.
	Files []File `json:"files"`
	// Groups, Episodes and Samples were written, whole, before the
	// checkpoint (placeholders count as samples). Groups of the run are
	// Groups..., continuing from there.
	Groups   int   `json:"groups"`
	Episodes int64 `json:"episodes"`
	Samples  int64 `json:"samples"`
	// States are the stateful allocators' states after those groups, in
	// the run's allocator order.
	States []State `json:"allocator_states"`
	// StartStates are their states when the run began (v3): replaying the
	// episode file's records from them gives States, and each record's
	// credit, or the progress file was edited (Audit).
	StartStates []State `json:"allocator_states_at_start,omitempty"`
	// Complete is true once every group of the run was written.
	Complete bool `json:"complete"`
}

// ErrNoProgress is wrapped by Read's error when there is no progress file.
var ErrNoProgress = errors.New("no progress file")

// ErrBadProgress is wrapped by the errors about a progress file that is not
// one, or that does not fit the files beside it.
var ErrBadProgress = errors.New("bad progress file")

// ErrOtherRun is wrapped by Check's error: the files belong to another run.
var ErrOtherRun = errors.New("the output belongs to another run")

// Read reads the progress file at path on fsys (nil: the operating
// system's), strictly.
func Read(fsys vfs.FS, path string) (*Progress, error) {
	data, err := vfs.ReadFile(vfs.Or(fsys), path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoProgress, path)
	}
	if err != nil {
		return nil, err
	}
	var p Progress
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadProgress, path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: %s: more than one JSON value", ErrBadProgress, path)
	}
	if p.Format != Format && p.Format != FormatV2 && p.Format != FormatV1 {
		return nil, fmt.Errorf("%w: %s: format %q, this build reads %q", ErrBadProgress, path, p.Format, Format)
	}
	switch {
	case p.Groups < 0 || p.Episodes < 0 || p.Samples < 0:
		return nil, fmt.Errorf("%w: %s: negative counts", ErrBadProgress, path)
	case len(p.Files) == 0 || p.Files[0].Kind != KindSamples:
		return nil, fmt.Errorf("%w: %s: no samples file", ErrBadProgress, path)
	}
	for _, f := range p.Files {
		if f.Bytes < 0 || f.Kind != KindSamples && f.Kind != KindEpisodes {
			return nil, fmt.Errorf("%w: %s: file %q: kind %q, %d bytes", ErrBadProgress, path, f.Path, f.Kind, f.Bytes)
		}
		if digested := p.Format != FormatV1; digested != validDigest(f.Digest) {
			return nil, fmt.Errorf("%w: %s: file %q: digest %q in a %s progress file", ErrBadProgress, path, f.Path, f.Digest, p.Format)
		}
	}
	return &p, nil
}

// validDigest reports whether s is a digest: DigestPrefix and 64 lower-case
// hex digits.
func validDigest(s string) bool {
	s, ok := strings.CutPrefix(s, DigestPrefix)
	if !ok || len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Write writes p to path on fsys (nil: the operating system's)
// atomically and durably: to a temporary file in the same directory,
// synced, renamed over path, and the directory synced, so that whenever
// the process dies or the power fails, path holds the previous progress
// or this one, never half of one, and this one once Write returned.
func (p *Progress) Write(fsys vfs.FS, path string) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("progress: %w", err)
	}
	data = append(data, '\n')
	if err := atomicfile.Write(fsys, path, data, 0o644, true); err != nil {
		return fmt.Errorf("progress %s: %w", path, err)
	}
	return nil
}

// Check reports whether p is the progress of the run want describes (its
// spec hash and spec, its files' kinds, paths and layouts; progress
// ignored). Its error is a *MismatchError naming every difference.
func (p *Progress) Check(want *Progress) error {
	var diffs []Diff
	if p.SpecHash != want.SpecHash {
		diffs = DiffJSON(p.Spec, want.Spec)
		if len(diffs) == 0 {
			diffs = []Diff{{Path: "spec_hash", Old: p.SpecHash, Now: want.SpecHash}}
		}
	}
	files := func(fs []File) string {
		var out []string
		for _, f := range fs {
			s := f.Kind + " " + filepath.Clean(f.Path)
			if f.Layout != "" {
				s += " (" + f.Layout + ")"
			}
			out = append(out, s)
		}
		return strings.Join(out, ", ")
	}
	if had, now := files(p.Files), files(want.Files); had != now {
		diffs = append(diffs, Diff{Path: "files", Old: had, Now: now})
	}
	if len(diffs) > 0 {
		return &MismatchError{Diffs: diffs}
	}
	return nil
}

// MismatchError is Check's error: the files belong to another run. It
// wraps ErrOtherRun.
type MismatchError struct {
	Diffs []Diff
}

func (e *MismatchError) Error() string {
	parts := make([]string, len(e.Diffs))
	for i, d := range e.Diffs {
		parts[i] = d.String()
	}
	return ErrOtherRun.Error() + ": " + strings.Join(parts, "; ")
}

// Unwrap returns ErrOtherRun.
func (e *MismatchError) Unwrap() error { return ErrOtherRun }

// Diff is one difference between two runs: a spec field by its JSON path
// ("episodes", "params.agents"), or "files", and its values, the one the
// files were written with and the one now asked for.
type Diff struct {
	Path, Old, Now string
}

func (d Diff) String() string { return fmt.Sprintf("%s: %s, now %s", d.Path, d.Old, d.Now) }

// DiffJSON lists the differences between two JSON values, objects key by
// key (a path joins the keys from the top with dots), other values whole.
func DiffJSON(old, now json.RawMessage) []Diff {
	var a, b any
	if json.Unmarshal(old, &a) != nil || json.Unmarshal(now, &b) != nil {
		return nil
	}
	var out []Diff
	diffValues("", a, b, &out)
	return out
}

func diffValues(path string, a, b any, out *[]Diff) {
	ma, oka := a.(map[string]any)
	mb, okb := b.(map[string]any)
	if oka && okb {
		keys := make([]string, 0, len(ma)+len(mb))
		for k := range ma {
			keys = append(keys, k)
		}
		for k := range mb {
			if _, ok := ma[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			sub := k
			if path != "" {
				sub = path + "." + k
			}
			diffValues(sub, ma[k], mb[k], out)
		}
		return
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		*out = append(*out, Diff{Path: path, Old: string(ja), Now: string(jb)})
	}
}
