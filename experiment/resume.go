package experiment

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/troupe-rl/troupe/internal/atomicfile"
	"github.com/troupe-rl/troupe/internal/vfs"
	"github.com/troupe-rl/troupe/trajectories/durable"
)

// ManifestJSON is the file in Out that says which experiment the
// directory holds: everything its cells and outputs depend on. Run writes
// it before the first cell, and a Run into a directory that holds one
// checks it first (see Config.Resume).
const ManifestJSON = "experiment.json"

// manifestVersion is the format of ManifestJSON: 2 since the learners are
// a list (a sweep).
const manifestVersion = 2

// ErrOtherExperiment is wrapped by the error of a Run into a directory
// that holds another experiment; the error is a *MismatchError naming
// every difference.
var ErrOtherExperiment = errors.New("the output directory holds another experiment")

// ErrExists is wrapped by the error of a Run without Resume into a
// directory that already holds an experiment.
var ErrExists = errors.New("the output directory already holds an experiment")

// ErrNothingToResume is wrapped by the error of a Run with Resume into a
// directory that holds no experiment.
var ErrNothingToResume = errors.New("nothing to resume")

// ErrDamagedManifest is wrapped by the error of a Run into a directory
// whose manifest is not one (empty, cut, not JSON): which experiment its
// cells belong to cannot be told.
var ErrDamagedManifest = errors.New("the output directory's manifest is damaged")

// MismatchError names the differences between the experiment a directory
// holds and the one asked for, by their paths in ManifestJSON.
type MismatchError struct {
	Dir   string
	Diffs []durable.Diff
}

func (e *MismatchError) Error() string {
	parts := make([]string, len(e.Diffs))
	for i, d := range e.Diffs {
		parts[i] = d.String()
	}
	return fmt.Sprintf("%s (%s): %s", ErrOtherExperiment, filepath.Join(e.Dir, ManifestJSON), strings.Join(parts, "; "))
}

// Unwrap returns ErrOtherExperiment.
func (e *MismatchError) Unwrap() error { return ErrOtherExperiment }

type manifestAxis struct {
	Param  string   `json:"param"`
	Values []string `json:"values"`
}

// manifest is the experiment as ManifestJSON records it.
type manifest struct {
	Version     int               `json:"version"`
	Scenario    string            `json:"scenario"`
	Params      map[string]string `json:"params"`
	Grid        []manifestAxis    `json:"grid"`
	Allocators  []string          `json:"allocators"`
	Side        string            `json:"side,omitempty"`
	SideAlloc   map[string]string `json:"side_allocators,omitempty"`
	Learners    []string          `json:"learners"`
	Learn       []string          `json:"learn"`
	Policies    map[string]string `json:"policies"`
	Seeds       int               `json:"seeds"`
	Seed        uint64            `json:"seed"`
	Episodes    int               `json:"episodes"`
	Group       int               `json:"group"`
	Window      int               `json:"window"`
	Diagnose    *diagnoseID       `json:"diagnose"`
	Limits      limits            `json:"limits"`
	CustomState bool              `json:"custom_state"`
	Tree        *treeID           `json:"tree,omitempty"`
	NashConv    *NashConv         `json:"nashconv,omitempty"`
	Evaluate    int               `json:"evaluate,omitempty"`
}

func (p *plan) manifest() ([]byte, error) {
	m := manifest{
		Version: manifestVersion, Scenario: p.name, Params: p.cfg.Params, Allocators: p.allocs,
		Side: p.cfg.Side, SideAlloc: p.sideAllocatorsID(),
		Learners: p.specNames, Learn: p.learners, Policies: p.cfg.Policies,
		Seeds: p.cfg.Seeds, Seed: p.cfg.Seed, Episodes: p.cfg.Episodes, Group: p.group(), Window: p.window,
		Diagnose: p.diagnoseID(), Limits: limitsOf(p.cfg.Limits), CustomState: p.cfg.State != nil,
		Tree:     p.treeID(),
		NashConv: p.cfg.NashConv,
		Evaluate: p.cfg.Evaluate,
	}
	if m.Params == nil {
		m.Params = map[string]string{}
	}
	if m.Policies == nil {
		m.Policies = map[string]string{}
	}
	m.Grid = []manifestAxis{}
	for _, a := range p.cfg.Axes {
		m.Grid = append(m.Grid, manifestAxis(a))
	}
	data, err := json.MarshalIndent(m, "", "  ")
	return append(data, '\n'), err
}

// claim checks Out against the experiment before any cell runs, and
// writes its manifest. A directory that holds an experiment (a manifest,
// or cell files) is continued only with Resume, and only when its
// manifest is this experiment's; a directory without one is refused with
// Resume.
func (p *plan) claim() error {
	want, err := p.manifest()
	if err != nil {
		return err
	}
	path := filepath.Join(p.cfg.Out, ManifestJSON)
	fsys := vfs.Or(p.cfg.FS)
	had, err := vfs.ReadFile(fsys, path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cells, _ := fsys.ReadDir(filepath.Join(p.cfg.Out, cellsDir))
		if len(cells) > 0 {
			return fmt.Errorf("%w: %s holds cells but no %s (written by another version of troupe?): use another output directory", ErrExists, p.cfg.Out, ManifestJSON)
		}
		if p.cfg.Resume {
			return fmt.Errorf("%w: %s holds no experiment (no %s)", ErrNothingToResume, p.cfg.Out, ManifestJSON)
		}
	case err != nil:
		return fmt.Errorf("resume: %w", err)
	case !json.Valid(had):
		// DiffJSON finds no difference in what it cannot decode: an
		// empty manifest (what a power loss can leave of one) vouched
		// for any experiment.
		return fmt.Errorf("%w: %s (%d bytes) is not JSON: it was cut or changed after it was written; use another output directory, or remove %s to start the experiment again", ErrDamagedManifest, path, len(had), p.cfg.Out)
	default:
		if diffs := durable.DiffJSON(had, want); len(diffs) > 0 {
			return &MismatchError{Dir: p.cfg.Out, Diffs: diffs}
		}
		if !p.cfg.Resume {
			return fmt.Errorf("%w: %s holds this experiment; continue it with Resume (troupe experiment --resume), or use another output directory", ErrExists, p.cfg.Out)
		}
		// A killed run may have left atomic writes' temporary files.
		for _, dir := range []string{p.cfg.Out, filepath.Join(p.cfg.Out, cellsDir)} {
			if err := atomicfile.RemoveTemps(p.cfg.FS, dir); err != nil {
				return fmt.Errorf("resume %s: %w", p.cfg.Out, err)
			}
		}
		return nil
	}
	return writeAtomic(p.cfg.FS, path, want)
}
