package env

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ParamKind is the type of a scenario parameter.
type ParamKind int

// The parameter kinds.
const (
	IntParam ParamKind = iota + 1
	FloatParam
	StringParam
	BoolParam
)

func (k ParamKind) String() string {
	switch k {
	case IntParam:
		return "int"
	case FloatParam:
		return "float"
	case StringParam:
		return "string"
	case BoolParam:
		return "bool"
	}
	return "ParamKind(" + strconv.Itoa(int(k)) + ")"
}

// ParamSpec declares one scenario parameter. Numeric parameters may be
// bounded (Min <= v <= Max, both inclusive, when Bounded); string
// parameters may be limited to Choices.
type ParamSpec struct {
	Name    string
	Kind    ParamKind
	Default string
	Doc     string
	Bounded bool
	Min     float64
	Max     float64
	Choices []string
}

// Int declares an integer parameter within [min, max].
func Int(name string, def, min, max int, doc string) ParamSpec {
	return ParamSpec{Name: name, Kind: IntParam, Default: strconv.Itoa(def), Doc: doc, Bounded: true, Min: float64(min), Max: float64(max)}
}

// Float declares a float parameter within [min, max].
func Float(name string, def, min, max float64, doc string) ParamSpec {
	return ParamSpec{Name: name, Kind: FloatParam, Default: strconv.FormatFloat(def, 'g', -1, 64), Doc: doc, Bounded: true, Min: min, Max: max}
}

// String declares a string parameter; choices, when given, are its only
// allowed values.
func String(name, def, doc string, choices ...string) ParamSpec {
	return ParamSpec{Name: name, Kind: StringParam, Default: def, Doc: doc, Choices: choices}
}

// Bool declares a boolean parameter.
func Bool(name string, def bool, doc string) ParamSpec {
	return ParamSpec{Name: name, Kind: BoolParam, Default: strconv.FormatBool(def), Doc: doc}
}

func (p ParamSpec) parse(s string) (any, error) {
	switch p.Kind {
	case IntParam:
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", s)
		}
		if p.Bounded && (float64(v) < p.Min || float64(v) > p.Max) {
			return nil, fmt.Errorf("%d is outside [%g, %g]", v, p.Min, p.Max)
		}
		return v, nil
	case FloatParam:
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%q is not a finite number", s)
		}
		if p.Bounded && (v < p.Min || v > p.Max) {
			return nil, fmt.Errorf("%g is outside [%g, %g]", v, p.Min, p.Max)
		}
		return v, nil
	case BoolParam:
		v, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", s)
		}
		return v, nil
	case StringParam:
		if len(p.Choices) > 0 && !slices.Contains(p.Choices, s) {
			return nil, fmt.Errorf("%q is not one of %s%s", s, strings.Join(p.Choices, ", "), didYouMean(s, p.Choices))
		}
		return s, nil
	}
	return nil, fmt.Errorf("unknown kind %v", p.Kind)
}

// ErrBadParam is wrapped by ParseParams's errors.
var ErrBadParam = errors.New("bad scenario parameter")

// Params are a scenario's validated parameter values. The zero value has
// none. Params is immutable and safe to share.
type Params struct {
	values map[string]any
	raw    map[string]string
}

// ParseParams validates given (name to text value) against the scenario's
// declared parameters and fills in defaults. An unknown name, or a value of
// the wrong kind or out of range, is an error naming the parameter.
func (in *Info) ParseParams(given map[string]string) (Params, error) {
	p := Params{values: make(map[string]any, len(in.Params)), raw: make(map[string]string, len(in.Params))}
	for _, name := range slices.Sorted(maps.Keys(given)) {
		if !slices.ContainsFunc(in.Params, func(s ParamSpec) bool { return s.Name == name }) {
			known := make([]string, len(in.Params))
			for i, s := range in.Params {
				known[i] = s.Name
			}
			if len(known) == 0 {
				return Params{}, fmt.Errorf("%w: scenario %s takes no parameters, got %q: leave the parameter out", ErrBadParam, in.Name, name)
			}
			return Params{}, fmt.Errorf("%w: scenario %s has no parameter %q (it takes %s)%s", ErrBadParam, in.Name, name, strings.Join(known, ", "), didYouMean(name, known))
		}
	}
	for _, spec := range in.Params {
		text, ok := given[spec.Name]
		if !ok {
			text = spec.Default
		}
		v, err := spec.parse(text)
		if err != nil {
			return Params{}, fmt.Errorf("%w: %s %s: %v", ErrBadParam, in.Name, spec.Name, err)
		}
		p.values[spec.Name] = v
		p.raw[spec.Name] = text
	}
	if in.CheckParams != nil {
		if err := in.CheckParams(p); err != nil {
			return Params{}, fmt.Errorf("%w: %s: %w", ErrBadParam, in.Name, err)
		}
	}
	return p, nil
}

// ParseAssignments turns "key=value" strings (repeated --param flags) into a
// map. A malformed or repeated key is an error naming it.
func ParseAssignments(kvs []string) (map[string]string, error) {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: %q is not key=value: write the parameter's name, =, and its value (seats=5)", ErrBadParam, kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%w: %q given twice: give each parameter once", ErrBadParam, k)
		}
		out[k] = v
	}
	return out, nil
}

func (p Params) get(name string) any {
	v, ok := p.values[name]
	if !ok {
		// A scenario asking for a parameter it did not declare is a bug in
		// the scenario, not bad user input.
		panic(fmt.Sprintf("env: parameter %q was not declared", name))
	}
	return v
}

// Int returns an integer parameter.
func (p Params) Int(name string) int { return p.get(name).(int) }

// Float returns a float parameter.
func (p Params) Float(name string) float64 { return p.get(name).(float64) }

// String returns a string parameter.
func (p Params) String(name string) string { return p.get(name).(string) }

// Bool returns a boolean parameter.
func (p Params) Bool(name string) bool { return p.get(name).(bool) }

// Map returns the parameters as text, defaults included.
func (p Params) Map() map[string]string { return maps.Clone(p.raw) }
