//go:build !unix

package bench

// cpuSeconds is 0 where getrusage is missing: the turns/cpu-s metric is
// then not reported.
func cpuSeconds() float64 { return 0 }
