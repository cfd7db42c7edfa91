//go:build unix

package bench

import "syscall"

// cpuSeconds is the process's user+system CPU time so far: the measure
// that a shared, noisy machine does not distort the way it does wall time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
