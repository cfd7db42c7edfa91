package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/troupe-rl/troupe/internal/atomicfile"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// StatefulAllocator is implemented by allocators whose state the service
// can save and restore (credit.RAE). MarshalState returns the state as
// JSON; UnmarshalState replaces it, leaving it as it was on error.
type StatefulAllocator interface {
	MarshalState() ([]byte, error)
	UnmarshalState(data []byte) error
}

// stateOf returns the state a possibly wrapped allocator keeps.
func stateOf(a trajectories.Allocator) StatefulAllocator {
	if st := credit.StateOf(a); st != nil {
		return st
	}
	return nil
}

func sequential(a trajectories.Allocator) bool {
	s, ok := a.(trajectories.Sequential)
	return ok && s.Sequential()
}

// shared is one stateful allocator of the service: the single instance of
// its spec that every request naming the spec uses.
type shared struct {
	name  string
	alloc trajectories.Allocator
	state StatefulAllocator // nil: kept in memory only
	file  string            // the state file; "" without --allocator-state

	mu      sync.Mutex // held while a request allocates with it
	saved   []byte     // the state last loaded or written
	touched bool       // a request's allocation was committed with it
}

// stateFileVersion is the version of the envelope of a state file.
const stateFileVersion = 1

// stateFile is the JSON of one allocator's state file in AllocatorStateDir.
// State is the allocator's own state (for RAE, the same JSON as its
// state=PATH file).
type stateFile struct {
	Version   int             `json:"version"`
	Allocator string          `json:"allocator"`
	State     json.RawMessage `json:"state"`
}

// stateFileName is the file of an allocator spec: a readable, safe form of
// the spec and a hash of it, so that two specs never share a file.
func stateFileName(name string) string {
	safe := []byte(name)
	for i, c := range safe {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			safe[i] = '_'
		}
	}
	if len(safe) > 64 {
		safe = safe[:64]
	}
	sum := sha256.Sum256([]byte(name))
	return "allocator-" + string(safe) + "-" + hex.EncodeToString(sum[:6]) + ".json"
}

// allocators is the service's table of stateful allocators.
type allocators struct {
	dir      string
	registry *credit.Registry
	seq      atomic.Uint64

	mu     sync.Mutex
	byName map[string]*shared
}

// loadAllocatorStates reads every state file of dir (created when missing)
// and builds the allocators they hold, with their state.
func loadAllocatorStates(dir string, reg *credit.Registry) (*allocators, error) {
	t := &allocators{dir: dir, registry: reg, byName: map[string]*shared{}}
	if dir == "" {
		return t, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: AllocatorStateDir: %w", ErrBadConfig, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: AllocatorStateDir: %w", ErrBadConfig, err)
	}
	for _, e := range entries {
		name := e.Name()
		// Temporary files of an interrupted save start with a dot.
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || !strings.HasPrefix(name, "allocator-") || !strings.HasSuffix(name, ".json") {
			continue
		}
		path := filepath.Join(dir, name)
		sh, err := t.loadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: allocator state %s: %w", ErrBadConfig, path, err)
		}
		if name != stateFileName(sh.name) {
			return nil, fmt.Errorf("%w: allocator state %s holds allocator %q, whose file is %s", ErrBadConfig, path, sh.name, stateFileName(sh.name))
		}
		t.byName[sh.name] = sh
	}
	return t, nil
}

func (t *allocators) loadFile(path string) (*shared, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f stateFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a state file: %w", err)
	}
	if f.Version != stateFileVersion {
		return nil, fmt.Errorf("version %d, want %d", f.Version, stateFileVersion)
	}
	if hasStateParam(f.Allocator) {
		return nil, fmt.Errorf("allocator %q names a state file of its own", f.Allocator)
	}
	a, err := t.registry.Parse(f.Allocator)
	if err != nil {
		return nil, err
	}
	st := stateOf(a)
	if !sequential(a) || st == nil {
		return nil, fmt.Errorf("allocator %q keeps no state", f.Allocator)
	}
	if a.Name() != f.Allocator {
		return nil, fmt.Errorf("allocator %q is spelled %q", f.Allocator, a.Name())
	}
	if err := st.UnmarshalState(f.State); err != nil {
		return nil, err
	}
	return &shared{name: a.Name(), alloc: a, state: st, file: path, saved: data}, nil
}

// stateParam matches a "state" parameter anywhere in an allocator spec.
var stateParam = regexp.MustCompile(`(^|[:,(;])\s*state\s*=`)

// hasStateParam reports whether spec names a state file: requests may not
// (that would let a caller read and write files on the service's host);
// the service keeps the state itself (AllocatorStateDir).
func hasStateParam(spec string) bool { return stateParam.MatchString(spec) }

// MaxStatefulAllocators bounds the distinct stateful allocator specs a
// service keeps (each is an instance for the life of the service and, with
// AllocatorStateDir, a file): every spelling of a parameter is a spec of
// its own, so without a bound callers could grow both without end. A
// training run uses one or a few.
const MaxStatefulAllocators = 64

// errTooManyStateful is share's error past MaxStatefulAllocators.
var errTooManyStateful = fmt.Errorf("the service already keeps %d stateful allocator specs, its limit (MaxStatefulAllocators): use one of them", MaxStatefulAllocators)

// share returns the service's instance of a, a freshly resolved allocator
// of a request's run spec, keyed by its canonical spec (a.Name(), as the
// resolved run spec lists it; its state file's name derives from it). The
// run spec's hash would be the wrong key: it changes with every request's
// ids and seeds, so no two requests would share a baseline.
//
// For a stateful allocator it is the one instance of its spec, created
// on first use; any other allocator is returned as is (they keep no
// state). A new spec past MaxStatefulAllocators is refused.
func (t *allocators) share(a trajectories.Allocator) (trajectories.Allocator, *shared, error) {
	if !sequential(a) {
		return a, nil, nil
	}
	name := a.Name()
	t.mu.Lock()
	defer t.mu.Unlock()
	if sh := t.byName[name]; sh != nil {
		return sh.alloc, sh, nil
	}
	if len(t.byName) >= MaxStatefulAllocators {
		return nil, nil, errTooManyStateful
	}
	sh := &shared{name: name, alloc: a, state: stateOf(a)}
	if sh.state != nil && t.dir != "" {
		sh.file = filepath.Join(t.dir, stateFileName(name))
	}
	t.byName[name] = sh
	return a, sh, nil
}

// all returns the stateful allocators, sorted by name.
func (t *allocators) all() []*shared {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*shared, 0, len(t.byName))
	for _, sh := range t.byName {
		out = append(out, sh)
	}
	slices.SortFunc(out, func(a, b *shared) int { return strings.Compare(a.name, b.name) })
	return out
}

// allocation is a request's allocation in progress: with stateful
// allocators it holds their locks until commit or rollback. Its methods
// do nothing on a nil allocation.
type allocation struct {
	s      *Server
	locked []*shared
	before [][]byte // the states before the request, for rollback
}

// beginAllocation is a request's allocation transaction, begun once its
// episodes are played (a request's answer, Finish): with stateful
// allocators among the request's, it takes their locks (in name order, so
// two requests never deadlock) and keeps the states as they are. The
// request's trajectories.Output then allocates and encodes the answer
// under them; once the answer is within its limits, commit takes the next
// allocation sequence number and saves every state that changed, while
// rollback (an answer refused after allocation, a failed allocation) puts
// the states back as they were. The locks are never held while episodes
// play. A committed update stands even if writing the answer to the caller
// then fails (the caller went away): the service cannot know what the
// caller received, and the failed write is logged. Requests thus update a
// stateful allocator one at a time, in the order they take its lock, and
// a refused request leaves no trace in it.
func (s *Server) beginAllocation(p *plan) (*allocation, error) {
	a := &allocation{s: s}
	if len(p.shared) == 0 {
		return a, nil
	}
	a.locked = slices.Clone(p.shared)
	slices.SortFunc(a.locked, func(x, y *shared) int { return strings.Compare(x.name, y.name) })
	for _, sh := range a.locked {
		sh.mu.Lock()
	}
	a.before = make([][]byte, len(a.locked))
	for i, sh := range a.locked {
		if sh.state == nil {
			continue
		}
		st, err := sh.state.MarshalState()
		if err != nil {
			a.unlock()
			return nil, fmt.Errorf("allocator %s: %w", sh.name, err)
		}
		a.before[i] = st
	}
	return a, nil
}

func (a *allocation) unlock() {
	for _, sh := range a.locked {
		sh.mu.Unlock()
	}
	a.locked = nil
}

// rollback restores the states and lets go of the locks; after commit,
// it does nothing.
func (a *allocation) rollback() {
	if a == nil {
		return
	}
	for i, sh := range a.locked {
		if sh.state != nil {
			if err := sh.state.UnmarshalState(a.before[i]); err != nil {
				a.s.cfg.Logger.Error("allocator state could not be restored", "allocator", sh.name, "error", err)
			}
		}
	}
	a.unlock()
}

// commit saves the states that changed, lets go of the locks, and returns
// the request's allocation sequence number (0 without stateful
// allocators).
func (a *allocation) commit() uint64 {
	if a == nil || len(a.locked) == 0 {
		return 0
	}
	seq := a.s.stateful.seq.Add(1)
	for _, sh := range a.locked {
		sh.touched = true
		if err := a.s.saveLocked(sh); err != nil {
			// The answer stands (its values were computed and the state in
			// memory moved on); the file catches up at the next save.
			a.s.cfg.Logger.Error("allocator state could not be saved", "allocator", sh.name, "file", sh.file, "error", err)
		}
	}
	a.unlock()
	return seq
}

// saveLocked writes sh's state file when its state changed since the last
// save. The caller holds sh.mu.
func (s *Server) saveLocked(sh *shared) error {
	if sh.state == nil || sh.file == "" || (!sh.touched && sh.saved == nil) {
		return nil // no state, no file, or nothing ever changed it
	}
	st, err := sh.state.MarshalState()
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(stateFile{Version: stateFileVersion, Allocator: sh.name, State: st}, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if bytes.Equal(data, sh.saved) {
		return nil
	}
	if err := writeFileAtomic(sh.file, data); err != nil {
		return err
	}
	sh.saved = data
	return nil
}

// saveStates saves every stateful allocator whose state changed; Shutdown
// calls it.
func (s *Server) saveStates() error {
	var errs []error
	for _, sh := range s.stateful.all() {
		sh.mu.Lock()
		err := s.saveLocked(sh)
		sh.mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("allocator %s: %w", sh.name, err))
		}
	}
	return errors.Join(errs...)
}

// writeFileAtomic writes data to path atomically, synced: a crash or a
// power loss leaves the old file or the new one, never half of one.
func writeFileAtomic(path string, data []byte) error {
	return atomicfile.Write(nil, path, data, 0o600, true)
}

func formatSeq(seq uint64) string { return strconv.FormatUint(seq, 10) }
