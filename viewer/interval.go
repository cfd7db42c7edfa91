package viewer

import (
	"fmt"
	"math"
)

// Interval is a difference of means B − A with its 95% confidence
// interval: paired (the mean of per-episode differences over episodes
// both runs played with the same seed) or, when the runs do not share
// seeds, Welch's interval for two independent samples.
type Interval struct {
	What     string // what is compared, e.g. "team reward"
	Paired   bool
	N        int     // pairs; or episodes of A + B when unpaired
	NA, NB   int     // unpaired: each run's episodes
	Diff     float64 // B − A
	SE       float64 // its standard error
	DF       float64 // degrees of freedom of the t quantile
	Lo, Hi   float64 // the 95% interval
	Verdict  string  // "B higher", "B lower" or "no clear difference"
	Sentence string  // the interval said in words
}

// Valid reports whether the interval could be computed (at least two
// values on each side, or two pairs).
func (iv Interval) Valid() bool { return iv.DF > 0 && !math.IsNaN(iv.SE) }

// moments accumulates a mean and a sample variance (Welford, which
// stays exact where sum-of-squares cancels).
type moments struct {
	n       int
	mean, m float64
}

func (s *moments) add(v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	s.n++
	d := v - s.mean
	s.mean += d / float64(s.n)
	s.m += d * (v - s.mean)
}

// variance is the sample variance (n − 1), NaN below two values.
func (s *moments) variance() float64 {
	if s.n < 2 {
		return math.NaN()
	}
	return s.m / float64(s.n-1)
}

// pairedInterval is the interval of the mean of the pairs' differences d.
func pairedInterval(what string, d moments) Interval {
	iv := Interval{What: what, Paired: true, N: d.n, Diff: d.mean, SE: math.NaN()}
	if d.n >= 2 {
		iv.SE = math.Sqrt(d.variance() / float64(d.n))
		iv.DF = float64(d.n - 1)
	}
	return iv.finish()
}

// welchInterval is the interval of mean(b) − mean(a) for independent
// samples, with the Welch–Satterthwaite degrees of freedom.
func welchInterval(what string, a, b moments) Interval {
	iv := Interval{What: what, N: a.n + b.n, NA: a.n, NB: b.n, Diff: b.mean - a.mean, SE: math.NaN()}
	if a.n >= 2 && b.n >= 2 {
		va, vb := a.variance()/float64(a.n), b.variance()/float64(b.n)
		iv.SE = math.Sqrt(va + vb)
		if va+vb > 0 {
			iv.DF = (va + vb) * (va + vb) / (va*va/float64(a.n-1) + vb*vb/float64(b.n-1))
		} else {
			iv.DF = float64(a.n + b.n - 2)
		}
	}
	return iv.finish()
}

func (iv Interval) finish() Interval {
	if !iv.Valid() {
		iv.Verdict = "not enough episodes"
		iv.Sentence = fmt.Sprintf("B − A = %s for %s; an interval needs at least two %s.", num(iv.Diff), iv.What, map[bool]string{true: "pairs", false: "scored episodes in each run"}[iv.Paired])
		return iv
	}
	half := tQuantile975(iv.DF) * iv.SE
	iv.Lo, iv.Hi = iv.Diff-half, iv.Diff+half
	how := fmt.Sprintf("paired over %d episodes with the same seeds", iv.N)
	if !iv.Paired {
		how = fmt.Sprintf("unpaired (Welch) over %d and %d episodes", iv.NA, iv.NB)
	}
	switch {
	case iv.Lo > 0:
		iv.Verdict = "B higher"
		iv.Sentence = fmt.Sprintf("B's %s is higher than A's by %s (95%% interval %s to %s, standard error %s, %s): the interval excludes 0.", iv.What, num(iv.Diff), num(iv.Lo), num(iv.Hi), num(iv.SE), how)
	case iv.Hi < 0:
		iv.Verdict = "B lower"
		iv.Sentence = fmt.Sprintf("B's %s is lower than A's by %s (95%% interval %s to %s, standard error %s, %s): the interval excludes 0.", iv.What, num(-iv.Diff), num(iv.Lo), num(iv.Hi), num(iv.SE), how)
	default:
		iv.Verdict = "no clear difference"
		iv.Sentence = fmt.Sprintf("B − A = %s for %s, but the 95%% interval %s to %s (standard error %s, %s) includes 0: these episodes do not tell the two runs apart.", num(iv.Diff), iv.What, num(iv.Lo), num(iv.Hi), num(iv.SE), how)
	}
	return iv
}

// tQuantile975 is the 0.975 quantile of Student's t with df degrees of
// freedom (df may be fractional, as Welch's is): exact table values to 30,
// then the Cornish–Fisher expansion around the normal, good to 1e-4.
func tQuantile975(df float64) float64 {
	table := [...]float64{12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
		2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
		2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423}
	if df < 1 {
		return table[0]
	}
	if df <= float64(len(table)) {
		lo := int(math.Floor(df))
		if lo == len(table) {
			return table[lo-1]
		}
		// Interpolate in 1/df, in which t's quantile is nearly linear.
		f := (1/float64(lo) - 1/df) / (1/float64(lo) - 1/float64(lo+1))
		return table[lo-1] + f*(table[lo]-table[lo-1])
	}
	const z = 1.959963984540054
	z3, z5, z7 := z*z*z, math.Pow(z, 5), math.Pow(z, 7)
	return z + (z3+z)/(4*df) + (5*z5+16*z3+3*z)/(96*df*df) + (3*z7+19*z5+17*z3-15*z)/(384*df*df*df)
}
