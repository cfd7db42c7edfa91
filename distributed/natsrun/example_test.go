package natsrun_test

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

// A single-machine resumable run: an embedded server keeps the run's state
// in a directory, and an in-process worker plays the episodes. Killed and
// started again with the same run id, it would pick up where it stopped.
func ExampleStartLocal() {
	dir, err := os.MkdirTemp("", "troupe-nats-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	reg := scenarios.Builtin()
	local, err := natsrun.StartLocal(ctx, natsrun.LocalOptions{
		Embedded: natsrun.EmbeddedOptions{Dir: dir},
		Worker:   natsrun.WorkerConfig{Registry: reg, Concurrency: 4},
	})
	if err != nil {
		panic(err)
	}
	defer local.Close()

	sc, _ := reg.Lookup("tictactoe")
	params, _ := sc.Info().ParseParams(nil)
	cfg := play.Config{
		Play:      env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())},
		Episodes:  20,
		GroupSize: 4,
		Seed:      7,
	}
	// Workers cannot receive Go values: the spec names the policies.
	spec := natsrun.Spec{Policies: runspec.Named(map[string]string{"x": "random", "o": "random"})}
	id, _ := natsrun.RunID(cfg, spec)
	x, err := local.Client.Start(ctx, id, cfg, spec)
	if err != nil {
		panic(err)
	}
	defer x.Close()
	var out bytes.Buffer
	sum, err := x.Run(ctx, &trajectories.Output{Sink: trajectories.NewJSONLWriter(&out, trajectories.Flat)})
	if err != nil {
		panic(err)
	}

	var want bytes.Buffer
	if _, err := play.Run(ctx, cfg, &trajectories.Output{Sink: trajectories.NewJSONLWriter(&want, trajectories.Flat)}); err != nil {
		panic(err)
	}
	fmt.Println("episodes:", sum.Episodes)
	fmt.Println("same bytes as a local run:", bytes.Equal(out.Bytes(), want.Bytes()))
	// Output:
	// episodes: 20
	// same bytes as a local run: true
}
