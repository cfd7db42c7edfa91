package experiment

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/troupe-rl/troupe/internal/seeds"
)

// Confidence is the level of every confidence interval an experiment
// reports.
const Confidence = 0.95

// resamples is the number of bootstrap resamples behind each interval.
const resamples = 4000

// permutationsExact is the largest number of paired seeds whose sign-flip
// test enumerates every flip (2^n); beyond it, permutationsDrawn random
// flips estimate the p-value.
const (
	permutationsExact = 16
	permutationsDrawn = 10000
)

// bootstrapCI is the percentile bootstrap interval of the mean of xs at
// level Confidence, from resamples drawn by a generator seeded with seed:
// the same data and seed give the same interval. Fewer than two values
// give the degenerate interval [mean, mean].
func bootstrapCI(xs []float64, seed uint64) (lo, hi float64) {
	n := len(xs)
	if n == 0 {
		return 0, 0
	}
	if n == 1 {
		return xs[0], xs[0]
	}
	rng := rand.New(rand.NewPCG(seed, seeds.Mix(seed, 1)))
	means := make([]float64, resamples)
	for b := range means {
		s := 0.0
		for k := 0; k < n; k += 2 {
			// One 64-bit draw gives two indices: the high 32 bits of a
			// 32×32-bit product are uniform in [0, n) up to a bias of n/2^32.
			r := rng.Uint64()
			s += xs[int((r>>32)*uint64(n)>>32)]
			if k+1 < n {
				s += xs[int((r&0xffffffff)*uint64(n)>>32)]
			}
		}
		means[b] = s / float64(n)
	}
	slices.Sort(means)
	return quantile(means, (1-Confidence)/2), quantile(means, 1-(1-Confidence)/2)
}

// quantile of sorted xs at q, interpolated linearly between order
// statistics (the "type 7" quantile of R and NumPy).
func quantile(sorted []float64, q float64) float64 {
	h := q * float64(len(sorted)-1)
	i := int(math.Floor(h))
	if i+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (h-float64(i))*(sorted[i+1]-sorted[i])
}

// Comparison is a paired comparison of two allocators at one grid point,
// over the seeds they share: seed s of both plays the same scenario draws,
// so each seed gives one difference d_s = final_A − final_B.
type Comparison struct {
	Point   []string `json:"-"` // the axis values
	Learner string   `json:"learner"`
	A       string   `json:"a"`
	B       string   `json:"b"`
	N       int      `json:"n"` // seeds
	// Diff is the mean of d_s, with its bootstrap confidence interval.
	Diff   float64 `json:"diff"`
	CILow  float64 `json:"ci_low"`
	CIHigh float64 `json:"ci_high"`
	// Wins counts the seeds where A ended higher than B, Ties where
	// equal.
	Wins int `json:"wins"`
	Ties int `json:"ties"`
	// PT is the two-sided p-value of the paired t-test (H0: the mean d
	// is 0); PSign that of the sign-flip permutation test of the mean d,
	// which assumes no normality (exact up to 16 seeds); PHolm is PSign
	// adjusted by Holm's method over every comparison of the experiment.
	PT    float64 `json:"p_t"`
	PSign float64 `json:"p_sign_flip"`
	PHolm float64 `json:"p_holm"`
	// D is Cohen's d_z: mean(d)/sd(d), the effect in units of the seeds'
	// spread of differences: ±Inf when every seed differs by the same
	// non-zero amount (written null in JSON, "+Inf" in CSV), 0 when none
	// differs.
	D Number `json:"cohen_dz"`
}

// compare compares a with b, seed by seed.
func compare(a, b []float64, seed uint64) Comparison {
	n := len(a)
	d := make([]float64, n)
	c := Comparison{N: n}
	for s := range a {
		d[s] = a[s] - b[s]
		switch {
		case d[s] > 0:
			c.Wins++
		case d[s] == 0:
			c.Ties++
		}
	}
	st := summarise(d)
	c.Diff = st.Mean
	c.CILow, c.CIHigh = bootstrapCI(d, seed)
	c.PT, c.D = pairedT(st), 0
	switch {
	case st.Std > 0:
		c.D = Number(st.Mean / st.Std)
	case st.Mean != 0:
		c.D = Number(math.Copysign(math.Inf(1), st.Mean))
	}
	c.PSign = signFlip(d, seed)
	return c
}

// pairedT is the two-sided p-value of a t-test of mean 0 on the
// differences summarised by s.
func pairedT(s Stats) float64 {
	if s.N < 2 {
		return 1
	}
	if s.Std == 0 {
		if s.Mean == 0 {
			return 1
		}
		return 0
	}
	t := s.Mean / (s.Std / math.Sqrt(float64(s.N)))
	return studentTwoSided(t, float64(s.N-1))
}

// studentTwoSided is P(|T| ≥ |t|) for Student's t with df degrees of
// freedom: I_x(df/2, 1/2) with x = df/(df+t²).
func studentTwoSided(t, df float64) float64 {
	return regIncBeta(df/2, 0.5, df/(df+t*t))
}

// regIncBeta is the regularised incomplete beta function I_x(a, b), by
// its continued fraction (modified Lentz), accurate to about 1e-14.
func regIncBeta(a, b, x float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	la, _ := math.Lgamma(a + b)
	lb, _ := math.Lgamma(a)
	lc, _ := math.Lgamma(b)
	front := math.Exp(la - lb - lc + a*math.Log(x) + b*math.Log1p(-x))
	if x > (a+1)/(a+b+2) {
		return 1 - front*betaFraction(b, a, 1-x)/b
	}
	return front * betaFraction(a, b, x) / a
}

func betaFraction(a, b, x float64) float64 {
	const tiny = 1e-300
	c, d := 1.0, 1-(a+b)*x/(a+1)
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	f := d
	for m := 1; m <= 300; m++ {
		fm := float64(m)
		for k := range 2 {
			var num float64
			if k == 0 {
				num = fm * (b - fm) * x / ((a + 2*fm - 1) * (a + 2*fm))
			} else {
				num = -(a + fm) * (a + b + fm) * x / ((a + 2*fm) * (a + 2*fm + 1))
			}
			d = 1 + num*d
			if math.Abs(d) < tiny {
				d = tiny
			}
			c = 1 + num/c
			if math.Abs(c) < tiny {
				c = tiny
			}
			d = 1 / d
			f *= c * d
			if k == 1 && math.Abs(c*d-1) < 1e-15 {
				return f
			}
		}
	}
	return f
}

// signFlip is the two-sided p-value of the sign-flip permutation test of
// the mean of d: under H0 (d symmetric about 0) every flip of signs is as
// likely, and p is the share of flips whose |sum| reaches the observed
// one (counting the observed flip). Up to permutationsExact differences
// it enumerates all 2^n flips; beyond, it draws permutationsDrawn.
func signFlip(d []float64, seed uint64) float64 {
	n := len(d)
	if n == 0 {
		return 1
	}
	obs := 0.0
	for _, x := range d {
		obs += x
	}
	obs = math.Abs(obs)
	// Sums equal to the observed one up to rounding count as reaching it.
	tol := 1e-12 * (1 + obs)
	reach := func(mask uint64) bool { // bit i set: d_i flipped
		s := 0.0
		for i, x := range d {
			if mask&(1<<uint(i)) != 0 {
				s -= x
			} else {
				s += x
			}
		}
		return math.Abs(s) >= obs-tol
	}
	if n <= permutationsExact {
		hits := 0
		for mask := range uint64(1) << uint(n) {
			if reach(mask) {
				hits++
			}
		}
		return float64(hits) / float64(uint64(1)<<uint(n))
	}
	rng := rand.New(rand.NewPCG(seed, seeds.Mix(seed, 2)))
	hits := 1 // the observed flip
	for range permutationsDrawn {
		s := 0.0
		var bits uint64
		for i, x := range d {
			if i%64 == 0 {
				bits = rng.Uint64() // one draw gives 64 signs
			}
			if bits&1 == 1 {
				s -= x
			} else {
				s += x
			}
			bits >>= 1
		}
		if math.Abs(s) >= obs-tol {
			hits++
		}
	}
	return float64(hits) / float64(permutationsDrawn+1)
}

// holm sets PHolm of every comparison: Holm's step-down adjustment of
// PSign over all of them, which controls the family-wise error rate.
func holm(cs []Comparison) {
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(cs[a].PSign, cs[b].PSign) })
	running := 0.0
	for rank, i := range order {
		p := min(1, float64(len(cs)-rank)*cs[i].PSign)
		running = max(running, p)
		cs[i].PHolm = running
	}
}

// statsSeed derives the seed of a row's or comparison's resampling from
// the experiment's root seed and its position, so that outputs are
// reproducible and no two intervals share their draws.
func statsSeed(root uint64, kind, i int) uint64 {
	return seeds.Mix(root, 0x5747, uint64(kind), uint64(i))
}
