//go:build unix

package league

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes the league directory's lock, an exclusive flock on
// DIR/.lock held until the returned file is closed (or the process
// dies), so that two processes never write one league.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, fileLock), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (troupe league play or troupe serve --league has it open; troupe league show reads it all the same)", ErrInUse, dir)
		}
		return nil, err
	}
	return f, nil
}
