// Package vfs is the file layer under troupe's durable writers: the
// progress files, the resumable outputs, the atomically replaced files.
// FS is what they call, OS the operating system's file system, and
// vfstest's in-memory file system, with a page cache and a crash, fails
// the call a test chooses in the way it chooses (a short write, EIO,
// ENOSPC, an fsync that lies, a power loss), as SQLite's test VFS does.
//
// The layer is passed explicitly to whoever writes (a nil FS is OS), never
// set globally.
package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// File is an open file of an FS: the methods of *os.File the durable
// writers use.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Seeker
	io.Closer
	Name() string
	Stat() (fs.FileInfo, error)
	// Sync makes the file's contents durable (fsync): written since, they
	// survive a power loss.
	Sync() error
	Truncate(size int64) error
	Chmod(mode fs.FileMode) error
}

// FS is a file system: the calls of package os the durable writers make,
// and SyncDir, which makes a directory's entries (files created, renamed
// or removed in it) durable.
type FS interface {
	// OpenFile is os.OpenFile.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// CreateTemp is os.CreateTemp.
	CreateTemp(dir, pattern string) (File, error)
	// Rename is os.Rename: newpath is replaced atomically.
	Rename(oldpath, newpath string) error
	// Remove is os.Remove.
	Remove(name string) error
	// MkdirAll is os.MkdirAll.
	MkdirAll(path string, perm fs.FileMode) error
	// Stat is os.Stat.
	Stat(name string) (fs.FileInfo, error)
	// ReadDir is os.ReadDir: the entries sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
	// SyncDir fsyncs the directory dir, so that the entries created,
	// renamed or removed in it survive a power loss.
	SyncDir(dir string) error
}

// Or returns fsys, or OS when fsys is nil.
func Or(fsys FS) FS {
	if fsys == nil {
		return OS{}
	}
	return fsys
}

// Open opens name for reading.
func Open(fsys FS, name string) (File, error) { return fsys.OpenFile(name, os.O_RDONLY, 0) }

// Create creates or empties name, open for reading and writing, as
// os.Create does.
func Create(fsys FS, name string) (File, error) {
	return fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

// ReadFile reads the whole file name.
func ReadFile(fsys FS, name string) ([]byte, error) {
	f, err := Open(fsys, name)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	return data, errors.Join(err, f.Close())
}

// OS is the operating system's file system.
type OS struct{}

// OpenFile implements FS.
func (OS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// CreateTemp implements FS.
func (OS) CreateTemp(dir, pattern string) (File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Rename implements FS.
func (OS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove implements FS.
func (OS) Remove(name string) error { return os.Remove(name) }

// MkdirAll implements FS.
func (OS) MkdirAll(path string, perm fs.FileMode) error { return os.MkdirAll(path, perm) }

// Stat implements FS.
func (OS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// ReadDir implements FS.
func (OS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }

// SyncDir implements FS. A system that cannot fsync a directory (it
// answers EINVAL: Windows, some network file systems) has nothing to
// sync: it does not count one.
func (OS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if errors.Is(err, fs.ErrInvalid) {
		err = nil
	}
	return errors.Join(err, d.Close())
}

// MkdirAllDurable creates dir and the parents it lacks, as MkdirAll does,
// and syncs the directory above each one it created, so that they survive
// a power loss: a file synced in dir is then reachable after one.
func MkdirAllDurable(fsys FS, dir string, perm fs.FileMode) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := fsys.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	if err := fsys.MkdirAll(dir, perm); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fsys.SyncDir(filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}
