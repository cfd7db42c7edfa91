package seats

import (
	"testing"
)

// TestToolSchemas pins the generated tool schemas' bytes: harnesses and
// the goldens see them, and they were literals before.
func TestToolSchemas(t *testing.T) {
	for _, tc := range []struct{ name, got, want string }{
		{"observe", string(argSchemas().observe), `{"type":"object","properties":{},"additionalProperties":false}`},
		{"act", string(argSchemas().action), `{"type":"object","properties":{"action":{"type":"string","description":"your action: one of the legal actions the observation lists"}},"required":["action"],"additionalProperties":false}`},
	} {
		if tc.got != tc.want {
			t.Errorf("%s's schema:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
	}
}
