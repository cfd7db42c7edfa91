package episode

import (
	"testing"

	"github.com/troupe-rl/troupe/protocol"
)

// TestRenderSizesExactly: the prompt renderers compute the length they
// write, for every sign and width of time.
func TestRenderSizesExactly(t *testing.T) {
	for _, view := range []string{"", "board\nrow"} {
		for _, tm := range []int{0, 7, 10, 99, 12345, -1, -10, -12345} {
			m := protocol.Message{From: "a", To: "*", Kind: "move", Payload: "b2", Time: tm}
			out := RenderObservation(view, []protocol.Message{m, m})
			if want := headerLen(view) + 2*messageLen(&m); len(out) != want {
				t.Errorf("view %q time %d: rendered %d bytes, computed %d", view, tm, len(out), want)
			}
		}
	}
}
