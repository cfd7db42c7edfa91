// Package atomicfile replaces small files atomically: whenever the process
// dies, the file holds its old content or its new one, never part of one.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/troupe-rl/troupe/internal/vfs"
)

// Write writes data to path on fsys (nil: the operating system's) through
// a temporary file in the same directory, given perm and renamed over
// path. With sync, the file is synced before the rename and the directory
// after it, so that a power loss too leaves one or the other; without, a
// killed process does (the kernel has the data), which is enough for a
// file replaced many times a second. An error leaves no temporary file
// behind (unless removing it failed too) and says which step failed.
func Write(fsys vfs.FS, path string, data []byte, perm fs.FileMode, sync bool) (err error) {
	fsys = vfs.Or(fsys)
	dir := filepath.Dir(path)
	tmp, err := fsys.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			if rerr := fsys.Remove(tmp.Name()); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	}()
	closeOn := func(err error) error { return errors.Join(err, tmp.Close()) }
	n, err := tmp.Write(data)
	switch {
	case err != nil:
		return closeOn(err)
	case n < len(data): // an io.Writer's contract, but a cheap check
		return closeOn(fmt.Errorf("write %s: %d of %d bytes", tmp.Name(), n, len(data)))
	}
	if err := tmp.Chmod(perm); err != nil {
		return closeOn(err)
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			return closeOn(err)
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp.Name(), path); err != nil {
		return err
	}
	renamed = true
	if !sync {
		return nil
	}
	return fsys.SyncDir(dir)
}

// RemoveTemps removes from dir (on fsys; nil: the operating system's) the
// temporary files Write leaves when its process is killed between
// creating one and renaming it into place (.NAME.tmp-*): a resumed run
// writes those files again, and the debris would stay. A dir that does
// not exist holds none.
func RemoveTemps(fsys vfs.FS, dir string) error {
	fsys = vfs.Or(fsys)
	entries, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") {
			if err := fsys.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}
