package main

import "testing"

// Search over forks beats a random opponent: it never loses over these
// games, and wins most of them (random against random, x wins about 58%
// and loses about 29%).
func TestForkSearchBeatsRandom(t *testing.T) {
	res, err := play(30, 16, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.lost > 0 || res.won < 24 {
		t.Errorf("fork search against random: %+v; want no loss and at least 24 wins of 30", res)
	}
	if res.forks == 0 {
		t.Error("no fork was played")
	}
}
