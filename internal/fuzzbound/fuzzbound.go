// Package fuzzbound bounds the fuzzer's minimising of new inputs in the
// test binary that imports it (for its side effect, from a _test.go file
// with Fuzz targets):
//
//	import _ "github.com/troupe-rl/troupe/internal/fuzzbound"
//
// `go test -fuzz` minimises every input that finds new code for up to a
// minute (-fuzzminimizetime 60s), and counts none of the executions it
// spends on it. Minimising a kilobyte of JSON is quadratic, minutes of
// work: a target whose seeds are a few episodes long spent its whole
// -fuzztime on its first new input, a few dozen executions in 30 seconds.
// With this package imported, a fuzz run minimises each input for at most
// Limit executions, as make fuzz does (FUZZMINIMIZETIME), unless its
// command line sets -fuzzminimizetime itself.
package fuzzbound

import (
	"flag"
	"testing"
)

// Limit is the default -test.fuzzminimizetime.
const Limit = "100x"

func init() {
	// The testing flags, registered now rather than when the test binary
	// starts (Init does nothing the second time), so that the default can
	// be set before the command line is parsed, which then overrides it.
	testing.Init()
	if err := flag.Set("test.fuzzminimizetime", Limit); err != nil {
		panic("fuzzbound: " + err.Error())
	}
}
