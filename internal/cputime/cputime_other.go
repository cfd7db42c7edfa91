//go:build !unix

package cputime

// Available reports whether Seconds measures anything on this platform:
// without getrusage it does not.
const Available = false

func seconds() float64 { return 0 }
