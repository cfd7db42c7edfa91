package runspec_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/runspec"
)

func TestUnfrozen(t *testing.T) {
	info := &env.Info{Roles: []*agents.Role{{Name: "a"}, {Name: "b"}, {Name: "c"}}}
	for _, c := range []struct {
		emit, frozen, want []string
		err                string
	}{
		{nil, nil, nil, ""},
		{[]string{"b"}, nil, []string{"b"}, ""},
		{nil, []string{"b"}, []string{"a", "c"}, ""},
		{[]string{"a"}, []string{"b"}, []string{"a"}, ""},
		{[]string{"a", "b"}, []string{"b"}, nil, "role b is frozen, and emitted too"},
		{nil, []string{"c", "a", "b"}, nil, "every role is frozen (c, a, b)"},
	} {
		got, err := runspec.Unfrozen(info, c.emit, c.frozen)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "emit %v, frozen %v", c.emit, c.frozen)
	}
}

// A learner trained against a frozen opponent: the opponent's turns are
// played and recorded, and only the learner's become samples.
func ExampleUnfrozen() {
	info := &env.Info{Roles: []*agents.Role{{Name: "alice"}, {Name: "bob"}}}
	emit, err := runspec.Unfrozen(info, nil, []string{"bob"})
	fmt.Println(emit, err)
	_, err = runspec.Unfrozen(info, []string{"bob"}, []string{"bob"})
	fmt.Println(err)
	// Output:
	// [alice] <nil>
	// role bob is frozen, and emitted too: a frozen role's turns become no samples
}
