package main

import (
	"os"

	"github.com/troupe-rl/troupe/cli"
)

func main() { os.Exit(cli.Main(cli.WithScenarios(Scenario()))) }
