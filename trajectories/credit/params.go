package credit

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// paramReader parses an allocator's parameter values, keeping the first
// error so that a Maker reads all its values and checks once.
type paramReader struct {
	alloc string
	m     map[string]string
	err   error
}

func (p *paramReader) fail(key, want string) {
	if p.err == nil {
		p.err = fmt.Errorf("%w: %s: %s=%q: want %s", ErrBadAllocatorParam, p.alloc, key, p.m[key], want)
	}
}

func (p *paramReader) str(key string) string { return p.m[key] }

// float parses a number in [lo, hi].
func (p *paramReader) float(key string, lo, hi float64) float64 {
	v, err := strconv.ParseFloat(p.m[key], 64)
	if err != nil || math.IsNaN(v) || v < lo || v > hi {
		p.fail(key, fmt.Sprintf("a number in [%g, %g]", lo, hi))
		return 0
	}
	return v
}

// int parses an integer in [lo, hi].
func (p *paramReader) int(key string, lo, hi int) int {
	v, err := strconv.Atoi(p.m[key])
	if err != nil || v < lo || v > hi {
		p.fail(key, fmt.Sprintf("an integer in [%d, %d]", lo, hi))
		return 0
	}
	return v
}

// uint64 parses a non-negative integer.
func (p *paramReader) uint64(key string) uint64 {
	v, err := strconv.ParseUint(p.m[key], 10, 64)
	if err != nil {
		p.fail(key, "a non-negative integer")
	}
	return v
}

// choice returns the value's index among choices.
func (p *paramReader) choice(key string, choices ...string) int {
	i := slices.Index(choices, p.m[key])
	if i < 0 {
		p.fail(key, "one of "+strings.Join(choices, ", "))
		return 0
	}
	return i
}

// kv is one parameter of an allocator's name: it is written only when its
// value differs from the default.
type kv struct{ key, value, def string }

// specName renders an allocator's name as a spec Parse reads back: the
// registry name, then its non-default parameters sorted by key.
func specName(name string, params ...kv) string {
	slices.SortFunc(params, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	var b strings.Builder
	b.WriteString(name)
	sep := ":"
	for _, p := range params {
		if p.value == p.def {
			continue
		}
		b.WriteString(sep + p.key + "=" + p.value)
		sep = ","
	}
	return b.String()
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
