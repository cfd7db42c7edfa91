// Command troupe runs multi-agent scenarios and writes their turns as
// training samples for THUDM/slime.
//
//	troupe run elfarol --episodes 1000 --out out/elfarol.jsonl
//	troupe scenarios [NAME]
//	troupe allocators
//	troupe new scenario NAME
//
// The command is package github.com/troupe-rl/troupe/cli, where it is
// tested; a program of its own with cli.WithScenarios is the same command
// with its scenarios registered.
package main

import (
	"os"

	"github.com/troupe-rl/troupe/cli"
)

func main() { os.Exit(cli.Main()) }
