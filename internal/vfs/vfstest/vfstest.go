// Package vfstest is an in-memory vfs.FS that models a page cache and a
// power loss, and fails the one call a test chooses: the file layer the
// crash tests of troupe's durable writers run on, as SQLite's run on its
// test VFS.
//
// Writes, creations, renames and removals change the cache: what the
// process sees. File.Sync copies a file's contents to the disk; SyncDir
// copies a directory's entries (which name which file, and its
// subdirectories) to the disk. A power loss (Reboot after a fault that
// implies one) throws the cache away: what survives is the disk, or, for a
// torn write, the disk with the cache's metadata and the first half of
// each file's unsynced bytes, the worst a journaling file system that
// orders nothing may leave.
package vfstest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/troupe-rl/troupe/internal/vfs"
)

// Op is a kind of call the file system counts. Reads (Read, ReadAt, Seek,
// Stat) are not counted: they never fail.
type Op string

// The counted calls.
const (
	OpOpen     Op = "open" // OpenFile and CreateTemp
	OpWrite    Op = "write"
	OpSync     Op = "sync"
	OpSyncDir  Op = "syncdir"
	OpRename   Op = "rename"
	OpRemove   Op = "remove"
	OpMkdir    Op = "mkdir"
	OpTruncate Op = "truncate"
	OpChmod    Op = "chmod"
	OpClose    Op = "close"
)

// Ops are the counted calls, in the order a report lists them.
var Ops = []Op{OpOpen, OpWrite, OpSync, OpSyncDir, OpRename, OpRemove, OpMkdir, OpTruncate, OpChmod, OpClose}

// Kind is what a fault does to its call.
type Kind string

// The faults.
const (
	// ShortWrite writes the first half of the bytes, then fails with
	// ENOSPC: the disk filled up part way.
	ShortWrite Kind = "short-write"
	// EIO fails the call with EIO, changing nothing.
	EIO Kind = "eio"
	// ENOSPC fails the call with ENOSPC, changing nothing.
	ENOSPC Kind = "enospc"
	// LostSync makes an fsync return success without making anything
	// durable (a disk that lies about its cache); the power is lost when
	// the test reboots, after the run.
	LostSync Kind = "lost-fsync"
	// PowerLoss loses the power at the call: it and every call after it
	// fail with ErrPoweredOff, and Reboot keeps only what was synced.
	PowerLoss Kind = "power-loss"
	// TornWrite loses the power during a write, half of whose bytes
	// reached the cache: Reboot keeps the cache's names and, of every
	// file, what was synced and the first half of what was written since.
	TornWrite Kind = "torn-write"
)

// Kinds returns the faults that apply to op.
func Kinds(op Op) []Kind {
	switch op {
	case OpWrite:
		return []Kind{ShortWrite, EIO, ENOSPC, TornWrite, PowerLoss}
	case OpSync, OpSyncDir:
		return []Kind{EIO, LostSync, PowerLoss}
	case OpOpen, OpRename, OpMkdir:
		return []Kind{EIO, ENOSPC, PowerLoss}
	}
	return []Kind{EIO, PowerLoss}
}

// ErrPoweredOff is the error of every call after a power loss.
var ErrPoweredOff = errors.New("vfstest: the machine lost power")

// Fault fails call N (from 1) of Op with Kind.
type Fault struct {
	Op   Op
	N    int
	Kind Kind
}

func (f Fault) String() string { return fmt.Sprintf("%s of %s call %d", f.Kind, f.Op, f.N) }

// Call is one counted call: its op and the path it was on.
type Call struct {
	Op   Op
	Path string
}

// Mem is the in-memory file system. Its zero value is not usable: call
// New. It is safe for concurrent use.
type Mem struct {
	mu     sync.Mutex
	cache  names // what the process sees
	disk   names // what survives a power loss
	fault  *Fault
	fired  bool
	down   bool // the power is lost
	counts map[Op]int
	calls  []Call
	temps  int // CreateTemp's counter: names are deterministic
}

// names is a namespace: each file's path to its inode, and the directories.
type names struct {
	files map[string]*inode
	dirs  map[string]bool
}

func (n names) clone() names {
	c := names{files: make(map[string]*inode, len(n.files)), dirs: make(map[string]bool, len(n.dirs))}
	for k, v := range n.files {
		c.files[k] = v
	}
	for k := range n.dirs {
		c.dirs[k] = true
	}
	return c
}

// inode is a file: data as the cache holds it, synced as the disk does.
type inode struct {
	data, synced []byte
	mode         fs.FileMode
}

// New returns an empty file system whose directories dirs (and their
// parents) exist, durably.
func New(dirs ...string) *Mem {
	m := &Mem{
		cache:  names{files: map[string]*inode{}, dirs: map[string]bool{"/": true}},
		counts: map[Op]int{},
	}
	for _, d := range dirs {
		for p := filepath.Clean(d); !m.cache.dirs[p]; p = filepath.Dir(p) {
			m.cache.dirs[p] = true
		}
	}
	m.disk = m.cache.clone()
	return m
}

// Clone returns a copy of m's files and directories, cache and disk, with
// no fault armed and no calls counted: to fail the calls of several runs
// that start from the same state.
func (m *Mem) Clone() *Mem {
	m.mu.Lock()
	defer m.mu.Unlock()
	inodes := map[*inode]*inode{}
	copyOf := func(n names) names {
		c := n.clone()
		for p, ino := range c.files {
			if inodes[ino] == nil {
				inodes[ino] = &inode{data: slices.Clone(ino.data), synced: slices.Clone(ino.synced), mode: ino.mode}
			}
			c.files[p] = inodes[ino]
		}
		return c
	}
	return &Mem{cache: copyOf(m.cache), disk: copyOf(m.disk), counts: map[Op]int{}, temps: m.temps}
}

// Inject arms f: the file system fails the call it names (calls are
// counted from New or the last Reboot).
func (m *Mem) Inject(f Fault) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fault, m.fired = &f, false
}

// Fired reports whether the armed fault's call was made.
func (m *Mem) Fired() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fired
}

// Counts returns how many calls of each op were made since New or the
// last Reboot.
func (m *Mem) Counts() map[Op]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[Op]int, len(m.counts))
	for k, v := range m.counts {
		out[k] = v
	}
	return out
}

// Calls returns the counted calls since New or the last Reboot, in order.
func (m *Mem) Calls() []Call {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// Reboot ends the faulty run: when its fault implies a power loss (one, a
// torn write, a lost fsync, an fsync that failed: the kernel may have
// dropped the pages it could not write), what was not durable is lost as
// the fault's kind says; otherwise the process merely exited, and the
// cache stays. It disarms the fault, resets the counts and reports
// whether the power was lost.
func (m *Mem) Reboot() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.fault
	m.fault, m.fired, m.down, m.counts, m.calls = nil, false, false, map[Op]int{}, nil
	switch {
	case f == nil:
		return false
	case f.Kind == TornWrite:
		m.tear()
		return true
	case f.Kind == PowerLoss || f.Kind == LostSync || f.Kind == EIO && (f.Op == OpSync || f.Op == OpSyncDir):
		m.lose()
		return true
	}
	return false
}

// Crash loses the power now, whatever the fault: what was not durable is
// lost. It disarms the fault and resets the counts.
func (m *Mem) Crash() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fault, m.fired, m.down, m.counts, m.calls = nil, false, false, map[Op]int{}, nil
	m.lose()
}

// lose keeps what the disk holds.
func (m *Mem) lose() {
	disk := m.disk.clone()
	for p := range disk.files {
		if !disk.dirs[filepath.Dir(p)] {
			delete(disk.files, p)
		}
	}
	for p := range disk.dirs {
		if !reachable(disk.dirs, p) {
			delete(disk.dirs, p)
		}
	}
	for _, ino := range disk.files {
		ino.data = slices.Clone(ino.synced)
	}
	m.cache = disk
	m.disk = disk.clone()
}

func reachable(dirs map[string]bool, p string) bool {
	for ; p != filepath.Dir(p); p = filepath.Dir(p) {
		if !dirs[p] {
			return false
		}
	}
	return true
}

// tear keeps the cache's names and, of each file, its synced bytes and
// the first half of those written since (from where the cache and the
// disk part).
func (m *Mem) tear() {
	for _, ino := range m.cache.files {
		common := 0
		for common < len(ino.data) && common < len(ino.synced) && ino.data[common] == ino.synced[common] {
			common++
		}
		ino.data = ino.data[:common+(len(ino.data)-common)/2]
		ino.synced = slices.Clone(ino.data)
	}
	m.disk = m.cache.clone()
}

// call counts a call of op on path and returns the fault that fails it
// (Kind "" for none): the error to return, or nil for a lost fsync and for
// the writes that go half through before they fail.
func (m *Mem) call(op Op, path string) (Kind, error) {
	if m.down {
		return PowerLoss, &fs.PathError{Op: string(op), Path: path, Err: ErrPoweredOff}
	}
	m.counts[op]++
	m.calls = append(m.calls, Call{Op: op, Path: path})
	f := m.fault
	if f == nil || f.Op != op || f.N != m.counts[op] {
		return "", nil
	}
	m.fired = true
	var errno error
	switch f.Kind {
	case EIO:
		errno = syscall.EIO
	case ENOSPC, ShortWrite:
		errno = syscall.ENOSPC
	case PowerLoss, TornWrite:
		m.down = true
		errno = ErrPoweredOff
	case LostSync:
		return LostSync, nil
	}
	return f.Kind, &fs.PathError{Op: string(op), Path: path, Err: errno}
}

func pathErr(op, path string, err error) error { return &fs.PathError{Op: op, Path: path, Err: err} }

// OpenFile implements vfs.FS: O_CREATE, O_EXCL, O_TRUNC and O_APPEND
// work as on a POSIX system.
func (m *Mem) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = filepath.Clean(name)
	if _, err := m.call(OpOpen, name); err != nil {
		return nil, err
	}
	return m.open(name, flag, perm)
}

func (m *Mem) open(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	if m.cache.dirs[name] {
		if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
			return nil, pathErr("open", name, syscall.EISDIR)
		}
		return &file{m: m, name: name}, nil
	}
	ino := m.cache.files[name]
	switch {
	case ino == nil && flag&os.O_CREATE == 0:
		return nil, pathErr("open", name, syscall.ENOENT)
	case ino == nil && !m.cache.dirs[filepath.Dir(name)]:
		return nil, pathErr("open", name, syscall.ENOENT)
	case ino != nil && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", name, syscall.EEXIST)
	case ino == nil:
		ino = &inode{mode: perm & fs.ModePerm}
		m.cache.files[name] = ino
	case flag&os.O_TRUNC != 0:
		ino.data = ino.data[:0:0]
	}
	return &file{m: m, name: name, ino: ino, flag: flag}, nil
}

// CreateTemp implements vfs.FS: the names it makes are numbered from 1,
// so that a run's calls name the same paths every time.
func (m *Mem) CreateTemp(dir, pattern string) (vfs.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.temps++
	seq := strconv.Itoa(m.temps)
	base := pattern + seq
	if i := strings.LastIndexByte(pattern, '*'); i >= 0 {
		base = pattern[:i] + seq + pattern[i+1:]
	}
	name := filepath.Join(dir, base)
	if _, err := m.call(OpOpen, name); err != nil {
		return nil, err
	}
	return m.open(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
}

// Rename implements vfs.FS, for files.
func (m *Mem) Rename(oldpath, newpath string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	oldpath, newpath = filepath.Clean(oldpath), filepath.Clean(newpath)
	if _, err := m.call(OpRename, oldpath); err != nil {
		return err
	}
	ino := m.cache.files[oldpath]
	switch {
	case ino == nil:
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.ENOENT}
	case !m.cache.dirs[filepath.Dir(newpath)] || m.cache.dirs[newpath]:
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.ENOENT}
	}
	delete(m.cache.files, oldpath)
	m.cache.files[newpath] = ino
	return nil
}

// Remove implements vfs.FS.
func (m *Mem) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = filepath.Clean(name)
	if _, err := m.call(OpRemove, name); err != nil {
		return err
	}
	if _, ok := m.cache.files[name]; ok {
		delete(m.cache.files, name)
		return nil
	}
	if !m.cache.dirs[name] {
		return pathErr("remove", name, syscall.ENOENT)
	}
	for p := range m.cache.files {
		if filepath.Dir(p) == name {
			return pathErr("remove", name, syscall.ENOTEMPTY)
		}
	}
	for p := range m.cache.dirs {
		if p != name && filepath.Dir(p) == name {
			return pathErr("remove", name, syscall.ENOTEMPTY)
		}
	}
	delete(m.cache.dirs, name)
	return nil
}

// MkdirAll implements vfs.FS.
func (m *Mem) MkdirAll(path string, perm fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	path = filepath.Clean(path)
	if _, err := m.call(OpMkdir, path); err != nil {
		return err
	}
	for p := path; !m.cache.dirs[p]; p = filepath.Dir(p) {
		if _, ok := m.cache.files[p]; ok {
			return pathErr("mkdir", p, syscall.ENOTDIR)
		}
		m.cache.dirs[p] = true
	}
	return nil
}

// Stat implements vfs.FS.
func (m *Mem) Stat(name string) (fs.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = filepath.Clean(name)
	if m.down {
		return nil, pathErr("stat", name, ErrPoweredOff)
	}
	if m.cache.dirs[name] {
		return info{name: filepath.Base(name), mode: fs.ModeDir | 0o755}, nil
	}
	ino := m.cache.files[name]
	if ino == nil {
		return nil, pathErr("stat", name, syscall.ENOENT)
	}
	return info{name: filepath.Base(name), size: int64(len(ino.data)), mode: ino.mode}, nil
}

// ReadDir implements vfs.FS.
func (m *Mem) ReadDir(name string) ([]fs.DirEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = filepath.Clean(name)
	if m.down {
		return nil, pathErr("readdir", name, ErrPoweredOff)
	}
	if !m.cache.dirs[name] {
		return nil, pathErr("open", name, syscall.ENOENT)
	}
	var out []fs.DirEntry
	for p, ino := range m.cache.files {
		if filepath.Dir(p) == name {
			out = append(out, fs.FileInfoToDirEntry(info{name: filepath.Base(p), size: int64(len(ino.data)), mode: ino.mode}))
		}
	}
	for p := range m.cache.dirs {
		if p != name && filepath.Dir(p) == name {
			out = append(out, fs.FileInfoToDirEntry(info{name: filepath.Base(p), mode: fs.ModeDir | 0o755}))
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// SyncDir implements vfs.FS: dir's entries, as the cache has them, become
// the disk's.
func (m *Mem) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir = filepath.Clean(dir)
	kind, err := m.call(OpSyncDir, dir)
	if err != nil || kind == LostSync {
		return err
	}
	if !m.cache.dirs[dir] {
		return pathErr("open", dir, syscall.ENOENT)
	}
	for p := range m.disk.files {
		if filepath.Dir(p) == dir {
			delete(m.disk.files, p)
		}
	}
	for p, ino := range m.cache.files {
		if filepath.Dir(p) == dir {
			m.disk.files[p] = ino
		}
	}
	for p := range m.disk.dirs {
		if p != dir && filepath.Dir(p) == dir {
			delete(m.disk.dirs, p)
		}
	}
	for p := range m.cache.dirs {
		if p != dir && filepath.Dir(p) == dir {
			m.disk.dirs[p] = true
		}
	}
	return nil
}

// Put makes path hold data, durably (its directories too), uncounted: to
// give a test's command the files it reads.
func (m *Mem) Put(path string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	path = filepath.Clean(path)
	for d := filepath.Dir(path); !m.cache.dirs[d]; d = filepath.Dir(d) {
		m.cache.dirs[d], m.disk.dirs[d] = true, true
	}
	ino := &inode{data: bytes.Clone(data), synced: bytes.Clone(data), mode: 0o644}
	m.cache.files[path], m.disk.files[path] = ino, ino
}

// Files returns the paths of the files the process sees, sorted.
func (m *Mem) Files() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for p := range m.cache.files {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// ReadFile returns the contents of name as the process sees them,
// uncounted: for tests to compare.
func (m *Mem) ReadFile(name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ino := m.cache.files[filepath.Clean(name)]
	if ino == nil {
		return nil, pathErr("open", name, syscall.ENOENT)
	}
	return bytes.Clone(ino.data), nil
}

type info struct {
	name string
	size int64
	mode fs.FileMode
}

func (i info) Name() string       { return i.name }
func (i info) Size() int64        { return i.size }
func (i info) Mode() fs.FileMode  { return i.mode }
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return i.mode.IsDir() }
func (i info) Sys() any           { return nil }

// file is an open file of Mem (ino nil: a directory).
type file struct {
	m      *Mem
	name   string
	ino    *inode
	flag   int
	off    int64
	closed bool
}

func (f *file) Name() string { return f.name }

// usable is the error of a call on a closed file, a directory or, for a
// write, a file open read-only.
func (f *file) usable(op string, write bool) error {
	switch {
	case f.closed:
		return pathErr(op, f.name, fs.ErrClosed)
	case f.ino == nil && op != "close" && op != "stat" && op != "sync":
		return pathErr(op, f.name, syscall.EISDIR)
	case write && f.flag&(os.O_WRONLY|os.O_RDWR) == 0:
		return pathErr(op, f.name, syscall.EBADF)
	}
	return nil
}

// counted checks that f is usable for op (write: a write) and counts the
// call: the fault's kind and error, as Mem.call returns them, or an
// unusable file's error with no kind. The caller holds the lock.
func (f *file) counted(op Op, write bool) (Kind, error) {
	if err := f.usable(string(op), write); err != nil {
		return "", err
	}
	return f.m.call(op, f.name)
}

func (f *file) Read(p []byte) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.usable("read", false); err != nil {
		return 0, err
	}
	if f.off >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.ino.data[f.off:])
	f.off += int64(n)
	return n, nil
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.usable("read", false); err != nil {
		return 0, err
	}
	if off >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.ino.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *file) Write(p []byte) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	kind, err := f.counted(OpWrite, true)
	n := len(p)
	switch {
	case kind == ShortWrite || kind == TornWrite:
		n = len(p) / 2
	case err != nil:
		return 0, err
	}
	if f.flag&os.O_APPEND != 0 {
		f.off = int64(len(f.ino.data))
	}
	end := f.off + int64(n)
	if end > int64(len(f.ino.data)) {
		f.ino.data = append(f.ino.data, make([]byte, end-int64(len(f.ino.data)))...)
	}
	copy(f.ino.data[f.off:end], p[:n])
	f.off = end
	return n, err
}

func (f *file) Seek(offset int64, whence int) (int64, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.usable("seek", false); err != nil {
		return 0, err
	}
	switch whence {
	case io.SeekCurrent:
		offset += f.off
	case io.SeekEnd:
		offset += int64(len(f.ino.data))
	}
	if offset < 0 {
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	f.off = offset
	return offset, nil
}

func (f *file) Stat() (fs.FileInfo, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.usable("stat", false); err != nil {
		return nil, err
	}
	if f.ino == nil {
		return info{name: filepath.Base(f.name), mode: fs.ModeDir | 0o755}, nil
	}
	return info{name: filepath.Base(f.name), size: int64(len(f.ino.data)), mode: f.ino.mode}, nil
}

// Sync copies the file's contents to the disk (a directory's Sync is
// SyncDir's).
func (f *file) Sync() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.usable("sync", false); err != nil {
		return err
	}
	if f.ino == nil {
		f.m.mu.Unlock()
		defer f.m.mu.Lock()
		return f.m.SyncDir(f.name)
	}
	kind, err := f.m.call(OpSync, f.name)
	if err != nil || kind == LostSync {
		return err
	}
	f.ino.synced = slices.Clone(f.ino.data)
	return nil
}

func (f *file) Truncate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if _, err := f.counted(OpTruncate, true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	if size <= int64(len(f.ino.data)) {
		f.ino.data = f.ino.data[:size:size]
	} else {
		f.ino.data = append(f.ino.data, make([]byte, size-int64(len(f.ino.data)))...)
	}
	return nil
}

func (f *file) Chmod(mode fs.FileMode) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if _, err := f.counted(OpChmod, false); err != nil {
		return err
	}
	f.ino.mode = mode & fs.ModePerm
	return nil
}

// Close closes the file; a fault fails it after the file is closed, as
// close(2) does.
func (f *file) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.usable("close", false); err != nil {
		return err
	}
	f.closed = true
	_, err := f.m.call(OpClose, f.name)
	return err
}
