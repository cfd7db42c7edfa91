package strcmp

import (
	"strings"
	"testing"
)

func TestSameAndEqual(t *testing.T) {
	a := "patron-07"
	b := strings.Clone(a) // equal bytes, another address
	for _, c := range []struct {
		x, y        string
		same, equal bool
	}{
		{a, a, true, true},
		{a, b, false, true},
		{a, a[:6], false, false},
		{a[:6], a[:6], true, true},
		{a, "patron-08", false, false},
	} {
		if got := Same(c.x, c.y); got != c.same {
			t.Errorf("Same(%q, %q) = %v", c.x, c.y, got)
		}
		if got := Equal(c.x, c.y); got != c.equal || got != (c.x == c.y) {
			t.Errorf("Equal(%q, %q) = %v", c.x, c.y, got)
		}
	}
}
