package main

import (
	"os"

	"github.com/troupe-rl/troupe/cli"
)

// main is the full troupe command (run, scenarios, serve, worker,
// experiment, ...) with this scenario registered beside the built-in ones.
func main() { os.Exit(cli.Main(cli.WithScenarios(Scenario()))) }
