package league

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/atomicfile"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
)

// Format is the format of a league's league.json.
const Format = "troupe.league/v1"

// The files of a league's directory.
const (
	FileLeague   = "league.json"   // the definition, the players and the progress: the commit point
	FileLog      = "matches.jsonl" // one Result per line, in match order
	DirSnapshots = "snapshots"     // snapshot players' files
	learnerFile  = "learner-"      // learner-<matches>.json: the learner's values at a commit
	fileLock     = ".lock"         // flocked by the process that writes the league
)

// Errors of leagues.
var (
	// ErrBadLeague: a league's definition, directory or files are not
	// usable (a bad scenario or parameter, a corrupt file).
	ErrBadLeague = errors.New("bad league")
	// ErrExists: Create was given a directory that holds a league.
	ErrExists = errors.New("a league exists there already")
	// ErrInUse: another process has the league open for writing.
	ErrInUse = errors.New("the league is in use by another process")
	// ErrReadOnly: a league opened by OpenReadOnly was asked to change.
	ErrReadOnly = errors.New("the league is open read-only")
)

// Config is what a league is: its scenario and the rules it plays and
// rates by. It is fixed when the league is created.
type Config struct {
	Name     string            `json:"name"`
	Scenario string            `json:"scenario"`
	Params   map[string]string `json:"params"`
	// Seed roots every match's seeds and every matchmaking draw.
	Seed uint64 `json:"seed"`
	// Rule is the matchmaking rule Play uses when it is given none
	// (ParseRule); default "uniform".
	Rule string `json:"rule"`
	// SnapshotEvery, when positive, adds a snapshot of the learner to the
	// league every that many matches (a multiple of Batch).
	SnapshotEvery int64 `json:"snapshot_every"`
	// SnapshotGreedy makes those snapshots play greedily.
	SnapshotGreedy bool `json:"snapshot_greedy"`
	// Batch is how many matches are drawn from the same league state and
	// played together (at once, with Play's concurrency) before the
	// learner learns them, in order, and the ratings are updated; default
	// 1: the learner learns every match before the next is drawn.
	Batch int `json:"batch"`
	// EloK, GlickoTau and GlickoPeriod configure the ratings (NewElo,
	// NewGlicko); 0 takes the defaults.
	EloK         float64 `json:"elo_k"`
	GlickoTau    float64 `json:"glicko_tau"`
	GlickoPeriod int     `json:"glicko_period"`
	// Learner names the player being trained (a learner, or the external
	// policy of troupe serve --league); set by Add.
	Learner string `json:"learner,omitempty"`
}

// file is league.json.
type file struct {
	Format string `json:"format"`
	Config
	Players []Player `json:"players"`
	// Matches is how many matches the league has played, LogBytes the
	// length of the match log that holds them; a longer log is the tail
	// of an interrupted run, cut off by Open.
	Matches  int64 `json:"matches"`
	LogBytes int64 `json:"log_bytes"`
	// LearnerState is the file of the learner's values as of Matches.
	LearnerState string `json:"learner_state,omitempty"`
}

// Result is one match as the league's log records it.
type Result struct {
	Match int64 `json:"match"`
	// Rule is the matchmaking rule that drew the match's opponents.
	Rule string `json:"rule"`
	// Focal is the player the opponents were drawn for, in role
	// FocalRole.
	Focal     string `json:"focal"`
	FocalRole string `json:"focal_role"`
	// Roles maps each role to the player that played it.
	Roles map[string]string `json:"roles"`
	// Scores maps each role to the mean score of its seats.
	Scores map[string]float64 `json:"scores"`
	// Status is the episode's; only completed matches are rated.
	Status protocol.Status `json:"status"`
	// RolloutID is the rollout's id, for a match played by troupe serve.
	RolloutID *int64 `json:"rollout_id,omitempty"`
}

// League is a population of players, their matches and ratings, kept in
// a directory. It is not safe for concurrent use: one goroutine (the
// command, or the rollout service's league lock) drives it.
type League struct {
	dir      string
	state    file
	scenario env.Scenario
	info     *env.Info
	params   env.Params
	log      *os.File
	logBuf   *bufio.Writer // the log's tail not yet written, flushed by commit
	results  []Result
	ratings  *ratings

	learner     learn.Learner
	learnerSpec learn.Spec
	// learnerAt is the number of matches the learner's values are as of
	// on disk (state.LearnerState); -1 when none is saved.
	learnerAt int64
	pols      policies
	// execs are the executors of the player combinations played so far
	// (executor).
	execs map[string]*env.LocalExecutor
	// lock is the directory's lock, held while the league is open for
	// writing; nil for a league opened read-only.
	lock *os.File
}

// Create makes a league in dir (created if need be; it must not hold a
// league) and returns it open.
func Create(dir string, cfg Config, reg *env.Registry) (*League, error) {
	if _, err := os.Stat(filepath.Join(dir, FileLeague)); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrExists, dir)
	}
	if cfg.Learner != "" {
		return nil, fmt.Errorf("%w: learner: add the learner as a player (Add)", ErrBadLeague)
	}
	if cfg.Rule == "" {
		cfg.Rule = "uniform"
	}
	if cfg.Batch == 0 {
		cfg.Batch = 1
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	l := &League{dir: dir, state: file{Format: Format, Config: cfg, Players: []Player{}}, learnerAt: -1}
	err := l.resolve(reg)
	if err != nil {
		return nil, err
	}
	l.state.Params = l.params.Map()
	if err := os.MkdirAll(filepath.Join(dir, DirSnapshots), 0o755); err != nil {
		return nil, err
	}
	if l.lock, err = lockDir(dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, FileLeague)); err == nil {
		l.lock.Close()
		return nil, fmt.Errorf("%w: %s", ErrExists, dir)
	}
	f, err := os.OpenFile(filepath.Join(dir, FileLog), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		l.lock.Close()
		return nil, err
	}
	l.log, l.logBuf = f, bufio.NewWriterSize(f, 64<<10)
	l.ratings = newRatings(&l.state.Config)
	l.pols.l = l
	if err := l.commit(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// resolve checks the configuration against the registry.
func (l *League) resolve(reg *env.Registry) error {
	cfg := &l.state.Config
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadLeague, fmt.Sprintf(format, args...))
	}
	if !playerName.MatchString(cfg.Name) {
		return bad("name %q: 1 to 64 letters, digits and . _ @ + -", cfg.Name)
	}
	sc, err := reg.Lookup(cfg.Scenario)
	if err != nil {
		return bad("%v", err)
	}
	l.scenario, l.info = sc, sc.Info()
	if len(l.info.Roles) < 2 {
		return bad("scenario %s has one role: a league matches players in different roles", l.info.Name)
	}
	if l.params, err = l.info.ParseParams(cfg.Params); err != nil {
		return bad("%v", err)
	}
	if _, err := ParseRule(cfg.Rule); err != nil {
		return bad("rule: %v", err)
	}
	switch {
	case cfg.Batch < 1:
		return bad("batch %d: want at least 1", cfg.Batch)
	case cfg.SnapshotEvery < 0 || cfg.SnapshotEvery%int64(cfg.Batch) != 0:
		return bad("snapshot_every %d: want 0 (never) or a positive multiple of batch (%d)", cfg.SnapshotEvery, cfg.Batch)
	case cfg.EloK < 0 || cfg.GlickoTau < 0 || cfg.GlickoPeriod < 0:
		return bad("elo_k, glicko_tau and glicko_period must not be negative (0: the defaults)")
	}
	return nil
}

// Open opens the league in dir as its last commit left it: a match log
// longer than league.json says (the tail of a run that was killed) is cut
// back, so that playing on gives the bytes an uninterrupted run would
// have.
//
// Open takes the directory's lock (an exclusive flock on DIR/.lock, held
// until Close): a second process that opens the league for writing gets
// ErrInUse. OpenReadOnly reads it all the same.
func Open(dir string, reg *env.Registry) (*League, error) {
	if _, err := os.Stat(filepath.Join(dir, FileLeague)); err != nil {
		return open(dir, reg, false) // the error says why
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	l, err := open(dir, reg, true)
	if err != nil {
		lock.Close()
		return nil, err
	}
	l.lock = lock
	return l, nil
}

// OpenReadOnly opens the league in dir as its last commit left it,
// without its lock, so it may be read while another process plays it
// (troupe league show during troupe serve --league): it reads the log up
// to the committed length and changes nothing. Its Play, Add and Snapshot
// return ErrReadOnly.
func OpenReadOnly(dir string, reg *env.Registry) (*League, error) { return open(dir, reg, false) }

func open(dir string, reg *env.Registry, write bool) (*League, error) {
	b, err := os.ReadFile(filepath.Join(dir, FileLeague))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s holds no league (%s): create one first", ErrBadLeague, dir, FileLeague)
		}
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	l := &League{dir: dir, learnerAt: -1}
	if err := dec.Decode(&l.state); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadLeague, FileLeague, err)
	}
	if l.state.Format != Format {
		return nil, fmt.Errorf("%w: %s: format %q, want %q", ErrBadLeague, FileLeague, l.state.Format, Format)
	}
	if err := l.resolve(reg); err != nil {
		return nil, fmt.Errorf("%s: %w", FileLeague, err)
	}
	l.pols.l = l
	if err := l.readLog(write); err != nil {
		return nil, err
	}
	if err := l.loadLearner(); err != nil {
		l.Close()
		return nil, err
	}
	if write {
		l.sweep()
	}
	return l, nil
}

// readLog replays the log's committed length, and, when write is set,
// cuts the log back to it and keeps it open for appending.
func (l *League) readLog(write bool) error {
	path := filepath.Join(l.dir, FileLog)
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadLeague, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	if st.Size() < l.state.LogBytes {
		f.Close()
		return fmt.Errorf("%w: %s has %d bytes, fewer than the %d the league committed", ErrBadLeague, FileLog, st.Size(), l.state.LogBytes)
	}
	if write {
		if err := f.Truncate(l.state.LogBytes); err != nil {
			f.Close()
			return err
		}
	}
	l.ratings = newRatings(&l.state.Config)
	sc := bufio.NewScanner(io.LimitReader(f, l.state.LogBytes))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var r Result
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			f.Close()
			return fmt.Errorf("%w: %s line %d: %w", ErrBadLeague, FileLog, line, err)
		}
		if r.Match != int64(len(l.results)) {
			f.Close()
			return fmt.Errorf("%w: %s line %d: match %d, want %d", ErrBadLeague, FileLog, line, r.Match, len(l.results))
		}
		l.record(r)
	}
	if err := sc.Err(); err != nil {
		f.Close()
		return fmt.Errorf("%w: %s: %w", ErrBadLeague, FileLog, err)
	}
	if int64(len(l.results)) != l.state.Matches {
		f.Close()
		return fmt.Errorf("%w: %s holds %d matches, the league %d", ErrBadLeague, FileLog, len(l.results), l.state.Matches)
	}
	if !write {
		return f.Close()
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return err
	}
	l.log, l.logBuf = f, bufio.NewWriterSize(f, 64<<10)
	return nil
}

// loadLearner restores the learner's values, or makes a fresh learner.
func (l *League) loadLearner() error {
	p := l.Player(l.state.Learner)
	if p == nil || p.Policy.Name != PolicyLearner {
		return nil
	}
	var s LearnerSettings
	if err := decodeSettings(p.Policy.Settings, &s); err != nil {
		return fmt.Errorf("%w: learner %q: %w", ErrBadLeague, p.Name, err)
	}
	spec, err := learn.Parse(s.Spec)
	if err != nil {
		return fmt.Errorf("%w: learner %q: %w", ErrBadLeague, p.Name, err)
	}
	if l.state.LearnerState == "" {
		l.learner, err = spec.New(learn.Options{})
		l.learnerSpec = spec
		return err
	}
	snap, err := l.readSnapshot(l.state.LearnerState)
	if err != nil {
		return fmt.Errorf("%w: learner %q: %w", ErrBadLeague, p.Name, err)
	}
	if l.learner, l.learnerSpec, err = snap.Restore(learn.Options{}); err != nil {
		return fmt.Errorf("%w: learner %q: %w", ErrBadLeague, p.Name, err)
	}
	if l.learnerSpec.String() != spec.String() {
		return fmt.Errorf("%w: learner %q: its state file is of %s, the player is %s", ErrBadLeague, p.Name, l.learnerSpec, spec)
	}
	l.learnerAt = l.state.Matches
	return nil
}

// sweep removes what a killed run left behind: learner states other than
// the committed one, the learner's automatic snapshots (LEARNER@N.json)
// taken after the last commit, which no player names, and temporary files
// of atomic writes. Other files of the snapshots directory are the
// user's, and stay.
func (l *League) sweep() {
	named := map[string]bool{}
	for _, p := range l.state.Players {
		var s SnapshotSettings
		if p.Policy.Name == PolicySnapshot && decodeSettings(p.Policy.Settings, &s) == nil {
			named[filepath.ToSlash(filepath.Clean(s.File))] = true
		}
	}
	for _, sub := range []string{"", DirSnapshots} {
		entries, err := os.ReadDir(filepath.Join(l.dir, sub))
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			rel := filepath.ToSlash(filepath.Join(sub, name))
			stale := sub == "" && strings.HasPrefix(name, learnerFile) && name != l.state.LearnerState
			if sub == DirSnapshots && l.state.Learner != "" && !named[rel] {
				n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, l.state.Learner+"@"), ".json"), 10, 64)
				stale = err == nil && strings.HasPrefix(name, l.state.Learner+"@") && n > l.state.Matches
			}
			if stale || strings.Contains(name, ".tmp-") {
				_ = os.Remove(filepath.Join(l.dir, rel))
			}
		}
	}
}

// commit makes the league's state durable: the log synced, the learner's
// values saved when they changed, league.json replaced atomically, and
// the learner's previous state file removed.
func (l *League) commit() error {
	if l.log == nil {
		return fmt.Errorf("%w: %s", ErrReadOnly, l.dir)
	}
	if err := l.logBuf.Flush(); err != nil {
		return fmt.Errorf("league %s: %s: %w", l.dir, FileLog, err)
	}
	if err := l.log.Sync(); err != nil {
		return fmt.Errorf("league %s: %w", l.dir, err)
	}
	old := ""
	if l.learner != nil && l.learnerAt != l.state.Matches {
		snap, err := learn.TakeSnapshot(l.learnerSpec, l.learner)
		if err != nil {
			return err
		}
		b, err := snap.Bytes()
		if err != nil {
			return err
		}
		name := learnerFile + strconv.FormatInt(l.state.Matches, 10) + ".json"
		if err := atomicfile.Write(nil, filepath.Join(l.dir, name), b, 0o644, true); err != nil {
			return fmt.Errorf("league %s: %w", l.dir, err)
		}
		old, l.state.LearnerState, l.learnerAt = l.state.LearnerState, name, l.state.Matches
	}
	b, err := json.MarshalIndent(&l.state, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(nil, filepath.Join(l.dir, FileLeague), append(b, '\n'), 0o644, true); err != nil {
		return fmt.Errorf("league %s: %w", l.dir, err)
	}
	if old != "" && old != l.state.LearnerState {
		_ = os.Remove(filepath.Join(l.dir, old))
	}
	return nil
}

// Close closes the league's files and its players' LLM clients. It does
// not commit: what was played since the last commit is played again by a
// league opened later.
func (l *League) Close() error {
	l.pols.close()
	var err error
	if l.log != nil {
		err = l.log.Close()
		l.log = nil
	}
	if l.lock != nil {
		l.lock.Close()
		l.lock = nil
	}
	return err
}

// Dir is the league's directory.
func (l *League) Dir() string { return l.dir }

// Config is the league's configuration.
func (l *League) Config() Config { return l.state.Config }

// Info is the league's scenario.
func (l *League) Info() *env.Info { return l.info }

// Scenario is the league's scenario and its parameters.
func (l *League) Scenario() (env.Scenario, env.Params) { return l.scenario, l.params }

// Matches is how many matches the league has played.
func (l *League) Matches() int64 { return l.state.Matches }

// Results are the league's matches, in order. The slice is the league's:
// do not change it.
func (l *League) Results() []Result { return l.results }

// Players are the league's players, in the order they joined.
func (l *League) Players() []Player { return slices.Clone(l.state.Players) }

// Player is the player called name, or nil.
func (l *League) Player(name string) *Player {
	for i := range l.state.Players {
		if l.state.Players[i].Name == name {
			return &l.state.Players[i]
		}
	}
	return nil
}

// Add adds a player and commits. A learner or external player becomes
// the league's learner (Config.Learner); a league has at most one.
func (l *League) Add(p Player) error {
	if l.log == nil {
		return fmt.Errorf("%w: %s", ErrReadOnly, l.dir)
	}
	if err := l.checkPlayer(&p); err != nil {
		return err
	}
	p.Added, p.Parent = l.state.Matches, ""
	if err := l.add(p); err != nil {
		return err
	}
	return l.commit()
}

func (l *League) add(p Player) error {
	l.state.Players = append(l.state.Players, p)
	switch p.Policy.Name {
	case PolicyLearner:
		l.state.Learner = p.Name
		if err := l.loadLearner(); err != nil {
			l.state.Players, l.state.Learner = l.state.Players[:len(l.state.Players)-1], ""
			return err
		}
	case PolicyExternal:
		l.state.Learner = p.Name
	}
	return nil
}

// Learner is the league's learner player, or nil.
func (l *League) Learner() *Player { return l.Player(l.state.Learner) }

// TrainedLearner is the league's in-process learner and its spec; nil
// when the league has none (or its learner is external).
func (l *League) TrainedLearner() (learn.Learner, learn.Spec) { return l.learner, l.learnerSpec }

// Snapshot adds the learner's current values to the league as a frozen
// player, called name ("" names it LEARNER@MATCHES), and commits.
func (l *League) Snapshot(name string, greedy bool) (*Player, error) {
	p, err := l.snapshot(name, greedy)
	if err != nil {
		return nil, err
	}
	if err := l.commit(); err != nil {
		return nil, err
	}
	return p, nil
}

func (l *League) snapshot(name string, greedy bool) (*Player, error) {
	if l.log == nil {
		return nil, fmt.Errorf("%w: %s", ErrReadOnly, l.dir)
	}
	lp := l.Learner()
	if lp == nil || l.learner == nil {
		return nil, fmt.Errorf("%w: the league has no in-process learner to snapshot (add a player of policy %s)", ErrBadPlayer, PolicyLearner)
	}
	if name == "" {
		name = lp.Name + "@" + strconv.FormatInt(l.state.Matches, 10)
	}
	p := Player{Name: name, Policy: runspec.Policy{Name: PolicySnapshot}, Parent: lp.Name, Added: l.state.Matches}
	if !playerName.MatchString(name) || l.Player(name) != nil {
		return nil, l.checkPlayer(&p)
	}
	snap, err := learn.TakeSnapshot(l.learnerSpec, l.learner)
	if err != nil {
		return nil, err
	}
	b, err := snap.Bytes()
	if err != nil {
		return nil, err
	}
	rel := filepath.ToSlash(filepath.Join(DirSnapshots, name+".json"))
	if err := atomicfile.Write(nil, filepath.Join(l.dir, rel), b, 0o644, true); err != nil {
		return nil, fmt.Errorf("league %s: %w", l.dir, err)
	}
	settings, err := json.Marshal(SnapshotSettings{File: rel, Greedy: greedy})
	if err != nil {
		return nil, err
	}
	p.Policy.Settings = settings
	if err := l.add(p); err != nil {
		return nil, err
	}
	return l.Player(name), nil
}

// record adds a result to the league's memory: the results, the ratings,
// the pairwise statistics.
func (l *League) record(r Result) {
	l.results = append(l.results, r)
	l.ratings.add(l.info, &r)
}

// appendResults writes results to the log (committed by the next
// commit) and records them.
func (l *League) appendResults(rs []Result) error {
	var b bytes.Buffer
	for i := range rs {
		line, err := json.Marshal(&rs[i])
		if err != nil {
			return err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if _, err := l.logBuf.Write(b.Bytes()); err != nil {
		return fmt.Errorf("league %s: %s: %w", l.dir, FileLog, err)
	}
	l.state.LogBytes += int64(b.Len())
	for _, r := range rs {
		l.record(r)
	}
	l.state.Matches += int64(len(rs))
	return nil
}
