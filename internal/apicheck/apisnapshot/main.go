// Command apisnapshot writes the API snapshot that internal/apicheck's test
// compares the tree with: `make api-snapshot` runs it at a release, from the
// module's root, as
//
//	go run ./internal/apicheck/apisnapshot -o api/troupe.apidata.gz
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/troupe-rl/troupe/internal/apicheck"
)

func main() {
	out := flag.String("o", "api/troupe.apidata.gz", "the snapshot file to write")
	dir := flag.String("C", ".", "the module's root folder")
	flag.Parse()
	if err := run(*dir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "apisnapshot:", err)
		os.Exit(1)
	}
}

func run(dir, out string) error {
	mod, err := apicheck.Load(dir)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := apicheck.WriteSnapshot(&b, mod); err != nil {
		return err
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing the snapshot: %w", err)
	}
	fmt.Printf("apisnapshot: %d packages of %s written to %s (%d bytes)\n", len(mod.Packages), mod.Path, out, b.Len())
	return nil
}
