//go:build unix

package testbin

import (
	"os"
	"syscall"
)

// lock takes an exclusive lock on the file at path (creating it), which
// other processes that lock it wait for; unlock releases it.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil // closing the file releases the lock
}
