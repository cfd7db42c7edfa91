package finite

import (
	"math"
	"testing"
)

func TestIsAndAll(t *testing.T) {
	finite := []float64{0, math.Copysign(0, -1), 1, -1, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 1e-310}
	bad := []float64{math.NaN(), math.Inf(1), math.Inf(-1)}
	for _, x := range finite {
		if !Is(x) {
			t.Errorf("Is(%v) = false", x)
		}
	}
	for _, x := range bad {
		if Is(x) {
			t.Errorf("Is(%v) = true", x)
		}
	}
	if !All(nil) || !All(finite) {
		t.Error("All of finite numbers is false")
	}
	for _, x := range bad {
		for at := range len(finite) + 1 {
			xs := append(append(append([]float64{}, finite[:at]...), x), finite[at:]...)
			if All(xs) {
				t.Errorf("All with %v at %d = true", x, at)
			}
		}
	}
	// Large finite numbers whose differences are exact zeros still sum to 0.
	if !All([]float64{math.MaxFloat64, math.MaxFloat64, -math.MaxFloat64}) {
		t.Error("All of the largest numbers is false")
	}
}
