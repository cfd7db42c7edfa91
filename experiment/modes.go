package experiment

import (
	"math"
	"slices"
)

// Mode detection: FindModes clusters values by the gaps between them.
const (
	// ModeGap is the least gap between two neighbouring values, as a
	// share of the values' range, that separates two modes.
	ModeGap = 0.2
	// ModeResolution is the least gap, as a share of the largest
	// magnitude among the values, that separates two modes: values that
	// all lie within noise of each other (0.989 to 0.990 of G*) are one
	// mode however they are spread.
	ModeResolution = 0.02
)

// Mode is one cluster of the seeds' final results.
type Mode struct {
	// Center is the mean of the values in the mode; Low and High bound
	// them.
	Center float64 `json:"center"`
	Low    float64 `json:"low"`
	High   float64 `json:"high"`
	// Seeds counts the values in the mode, Share is their share of all
	// the values.
	Seeds int     `json:"seeds"`
	Share float64 `json:"share"`
}

// FindModes clusters xs in one dimension by their gaps: sorted, two
// neighbouring values belong to different modes when the gap between them
// is at least ModeGap of the values' range (max − min) and at least
// ModeResolution of the largest |x|. The method is deterministic, needs
// no bandwidth or number of clusters, and finds a lone outlier as a mode
// of its own (a seed that ended elsewhere is worth seeing). Values that
// are not finite are left out. The modes come in increasing order; none
// for no finite value.
//
// With n values spread evenly, every gap is a 1/(n−1) share of the range,
// so from 6 values on an even spread is one mode; with fewer values every
// pattern looks multimodal, and the modes mean little.
func FindModes(xs []float64) []Mode {
	sorted := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			sorted = append(sorted, x)
		}
	}
	if len(sorted) == 0 {
		return nil
	}
	slices.Sort(sorted)
	lo, hi := sorted[0], sorted[len(sorted)-1]
	gap := max(ModeGap*(hi-lo), ModeResolution*max(math.Abs(lo), math.Abs(hi)))
	var modes []Mode
	start := 0
	for i := 1; i <= len(sorted); i++ {
		if i < len(sorted) && !(sorted[i]-sorted[i-1] >= gap && sorted[i] > sorted[i-1]) {
			continue
		}
		part := sorted[start:i]
		modes = append(modes, Mode{Center: mean(part), Low: part[0], High: part[len(part)-1], Seeds: len(part), Share: float64(len(part)) / float64(len(sorted))})
		start = i
	}
	return modes
}
