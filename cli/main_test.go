package cli

import (
	"os"
	"sync"
	"testing"

	"github.com/troupe-rl/troupe/tools/llama/llamatest"
)

// The directories of fixtures that tests share (a built binary, a finished
// experiment), removed when the tests are done.
var (
	atExitMu sync.Mutex
	atExit   []string
)

// RemoveAtExit has TestMain remove dir once every test has run. (Exported
// for the tests of package cli_test, which share a built troupe binary.)
func RemoveAtExit(dir string) {
	atExitMu.Lock()
	defer atExitMu.Unlock()
	atExit = append(atExit, dir)
}

// sharedLlama is the real llama-server of the tests that need no options
// of their own, one for the package.
var sharedLlama llamatest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	sharedLlama.Close()
	atExitMu.Lock()
	for _, dir := range atExit {
		_ = os.RemoveAll(dir)
	}
	atExitMu.Unlock()
	os.Exit(code)
}
