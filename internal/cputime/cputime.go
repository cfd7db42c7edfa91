// Package cputime reads the CPU time the process has used: what benchmarks
// on a busy, shared machine report beside wall time, which there measures
// the neighbours as much as the code.
package cputime

// Seconds returns the process's user+system CPU time so far, in seconds,
// or 0 where the platform does not report it (Available says which).
func Seconds() float64 { return seconds() }
