// Package finite holds the engine's checks on numbers that scenarios and
// allocators hand it.
package finite

// Is reports whether x is neither NaN nor infinite.
func Is(x float64) bool { return x-x == 0 }

// All reports whether no element of xs is NaN or infinite. x-x is +0
// for a finite x and NaN otherwise (an infinity minus itself is NaN), so
// a sum of them is 0 exactly when every element is finite: two additions
// an element, no branch, where math.IsNaN and math.IsInf take about a
// dozen instructions. Four sums, not one: each addition waits for the one
// before it in its sum, so one sum would make the loop as slow as the
// adder's latency, four times its throughput.
func All(xs []float64) bool {
	var z0, z1, z2, z3 float64
	i := 0
	for ; i+4 <= len(xs); i += 4 {
		x := xs[i : i+4 : i+4]
		z0 += x[0] - x[0]
		z1 += x[1] - x[1]
		z2 += x[2] - x[2]
		z3 += x[3] - x[3]
	}
	for ; i < len(xs); i++ {
		z0 += xs[i] - xs[i]
	}
	return z0+z1+z2+z3 == 0
}
