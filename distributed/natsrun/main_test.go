package natsrun_test

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// waitingTests is how many of the tests that call t.Parallel run at once,
// unless -test.parallel says otherwise. Those tests spend most of their
// time waiting on the server's clocks (ack waits, leases, age limits,
// redeliveries, a killed worker's replacement), not on the CPU: run one
// after another they took 100 of the package's 110 seconds for 20
// CPU-seconds, and held one of go test's two package slots all along.
// TestClusterSurvivesANodeLoss stays sequential, and so runs alone: its
// nats-server processes listen on ports that freePorts found free.
const waitingTests = 6

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(waitingTests)); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
