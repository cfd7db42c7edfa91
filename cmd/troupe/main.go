// Command troupe runs multi-agent scenarios and writes their turns as
// training samples for THUDM/slime.
//
//	troupe run elfarol --episodes 1000 --out out/elfarol.jsonl
//	troupe scenarios [NAME]
//	troupe allocators
//
// Everything but wiring the process (arguments, standard streams, signals,
// exit code) lives in package cli, where it is tested.
package main

import (
	"context"
	"os"

	"github.com/troupe-rl/troupe/cmd/troupe/internal/cli"
)

func main() {
	ctx, stop := cli.NotifyContext(context.Background())
	code := cli.New(os.Stdout, os.Stderr).Main(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
