package envserver_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
)

// A session plays x at tic-tac-toe against the house's minimax in o, always
// the first legal cell, over HTTP with the Go client.
func Example() {
	s, _ := envserver.New(envserver.Config{})
	hs := httptest.NewServer(s)
	defer hs.Close()
	c := envclient.New(hs.URL, "", nil)
	ctx := context.Background()

	seed := uint64(1)
	sess, res, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "tictactoe", Seed: &seed,
		Open: []string{"x"}, Policies: map[string]string{"o": "minimax"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for !res.Done {
		p := res.Observation.Pending[0]
		fmt.Println(p.Agent, "plays", p.Legal[0])
		if res, err = sess.Step(ctx, "", p.Legal[0]); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println(res.Observation.Status, res.Observation.End, "x scores", *res.Reward)
	// Output:
	// x plays a1
	// x plays b1
	// x plays a2
	// completed terminated x scores -1
}
