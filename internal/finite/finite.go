// Package finite holds the engine's checks on numbers that scenarios and
// allocators hand it.
package finite

// Is reports whether x is neither NaN nor infinite.
func Is(x float64) bool { return x-x == 0 }

// All reports whether no element of xs is NaN or infinite. x-x is +0
// for a finite x and NaN otherwise (an infinity minus itself is NaN), so
// the sum is 0 exactly when every element is finite: two additions an
// element, no branch, where math.IsNaN and math.IsInf take about a dozen
// instructions.
func All(xs []float64) bool {
	z := 0.0
	for _, x := range xs {
		z += x - x
	}
	return z == 0
}
