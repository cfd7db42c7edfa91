//go:build !linux

package llamatest

import "os/exec"

// dieWithParent does nothing where the kernel has no parent-death signal;
// Close stops the server.
func dieWithParent(*exec.Cmd) {}
