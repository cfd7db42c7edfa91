// Package seeds derives independent, reproducible 64-bit seeds from a parent
// seed and a path of integers, so that every episode, agent and turn draws its
// randomness from its own stream whatever goroutine runs it.
package seeds

import "math/bits"

// Mix returns a seed derived from parent and the given path. Different paths
// give statistically independent seeds (each step is a SplitMix64 finaliser
// over the running value), and the result depends only on its arguments.
func Mix(parent uint64, path ...uint64) uint64 {
	x := parent
	for _, p := range path {
		x = splitmix(x ^ splitmix(p+0x9e3779b97f4a7c15))
	}
	return splitmix(x)
}

// Mix1 is Mix(parent, a), and Mix2 is Mix(parent, a, b), for the hot
// paths that derive a seed per turn: without the variadic slice and its
// loop. Neither inlines (Mix1's key lookup with its fallback and two
// SplitMix64 rounds are too much for the compiler's budget, Mix2's five
// rounds more so); MixKeyed does.
func Mix1(parent, a uint64) uint64 { return MixKeyed(parent, Key(a)) }

// MixKeyed is Mix1(parent, a) for k = Key(a): small enough to inline, where
// Mix1, with the lookup of the key, is not. Hot paths that draw the same
// stream turn after turn take its key once, or look it up inline.
func MixKeyed(parent, k uint64) uint64 { return splitmix(splitmix(parent ^ k)) }

// Mix2 is Mix(parent, a, b); see Mix1.
func Mix2(parent, a, b uint64) uint64 {
	return MixKeyed(splitmix(parent^Key(a)), Key(b))
}

// Key is a path element's contribution to Mix, splitmix(p + γ): looked up
// for the small numbers per-turn seeds are made of (seats, turns, streams).
func Key(p uint64) uint64 {
	if p < uint64(len(keys)) {
		return keys[p]
	}
	return splitmix(p + 0x9e3779b97f4a7c15)
}

// keys[p] is splitmix(p + γ). Read-only once built.
var keys = func() (k [256]uint64) {
	for p := range k {
		k[p] = splitmix(uint64(p) + 0x9e3779b97f4a7c15)
	}
	return k
}()

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Intn returns a uniform integer in [0, n) drawn from seed, without
// allocating a generator: Lemire's multiply-shift with rejection. n must be
// positive.
func Intn(seed uint64, n int) int {
	if n <= 0 {
		panic("seeds: Intn with n <= 0")
	}
	bound := uint64(n)
	x := seed
	for i := uint64(0); ; i++ {
		hi, lo := bits.Mul64(x, bound)
		// The threshold (2^64 mod n) is below n: a low word at or above n
		// is accepted without the division that computes it.
		if lo >= bound || lo >= (-bound)%bound {
			return int(hi)
		}
		x = splitmix(seed + i + 1)
	}
}

// Float64 returns a uniform float in [0, 1) drawn from seed.
func Float64(seed uint64) float64 {
	return float64(splitmix(seed)>>11) / (1 << 53)
}
