//go:build !unix

package league

import (
	"os"
	"path/filepath"
)

// lockDir opens the lock file; without flock, nothing stops a second
// process: run one writer per league.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, fileLock), os.O_CREATE|os.O_RDWR, 0o644)
}
