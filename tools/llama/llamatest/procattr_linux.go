package llamatest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the server when the process that
// started it dies: a test binary killed by its timeout or by SIGKILL runs
// no cleanup, and would leave llama-server running, holding a core.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
