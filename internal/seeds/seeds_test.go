package seeds

import (
	"math"
	"testing"
)

func TestMixIsAFunctionOfItsPath(t *testing.T) {
	if a, b := Mix(1, 2, 3), Mix(1, 2, 3); a != b {
		t.Fatal("Mix is not deterministic")
	}
	seen := map[uint64][]uint64{}
	for a := range uint64(64) {
		for b := range uint64(64) {
			s := Mix(7, a, b)
			if prev, dup := seen[s]; dup {
				t.Fatalf("Mix(7, %d, %d) = Mix(7, %v)", a, b, prev)
			}
			seen[s] = []uint64{a, b}
		}
	}
	if Mix(7, 1, 2) == Mix(7, 2, 1) {
		t.Error("the order of the path must matter")
	}
	if Mix(7) == Mix(8) || Mix(7, 0) == Mix(7) {
		t.Error("parent and path length must matter")
	}
}

func TestIntnIsUniformAndInRange(t *testing.T) {
	const n, draws = 7, 70_000
	var counts [n]int
	for i := range uint64(draws) {
		v := Intn(Mix(1, i), n)
		if v < 0 || v >= n {
			t.Fatalf("Intn gave %d, outside [0, %d)", v, n)
		}
		counts[v]++
	}
	// 10,000 expected per bucket; 6 standard deviations is about ±560.
	for v, c := range counts {
		if math.Abs(float64(c)-draws/n) > 560 {
			t.Errorf("value %d drawn %d times of %d", v, c, draws)
		}
	}
	if Intn(42, 1) != 0 {
		t.Error("Intn(_, 1) must be 0")
	}
	defer func() {
		if recover() == nil {
			t.Error("Intn with n <= 0 must panic")
		}
	}()
	Intn(1, 0)
}

func TestFloat64InUnitInterval(t *testing.T) {
	sum := 0.0
	for i := range uint64(10_000) {
		f := Float64(Mix(3, i))
		if f < 0 || f >= 1 {
			t.Fatalf("Float64 gave %v", f)
		}
		sum += f
	}
	if mean := sum / 10_000; math.Abs(mean-0.5) > 0.02 {
		t.Errorf("mean %v, want about 0.5", mean)
	}
}

// TestMix1AndMix2AreMix checks the per-turn forms against Mix, for path
// elements in and out of their table of keys (below 256), and MixKeyed with
// Key against Mix1.
func TestMix1AndMix2AreMix(t *testing.T) {
	for _, v := range []uint64{0, 1, 2, 0x9e3779b97f4a7c15, 1 << 63, ^uint64(0), 12345678901234567} {
		for _, a := range []uint64{0, 1, 7, 255, 256, 257, 1000, ^uint64(0)} {
			if got, want := Mix1(v, a), Mix(v, a); got != want {
				t.Fatalf("Mix1(%d, %d) = %d, Mix gives %d", v, a, got, want)
			}
			if got, want := MixKeyed(v, Key(a)), Mix(v, a); got != want {
				t.Fatalf("MixKeyed(%d, Key(%d)) = %d, Mix gives %d", v, a, got, want)
			}
			for _, b := range []uint64{0, 3, 255, 256, 1 << 40} {
				if got, want := Mix2(v, a, b), Mix(v, a, b); got != want {
					t.Fatalf("Mix2(%d, %d, %d) = %d, Mix gives %d", v, a, b, got, want)
				}
			}
		}
	}
}
