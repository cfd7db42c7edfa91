package credit

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/troupe-rl/troupe/trajectories"
)

// Maker builds an allocator from its parameters (name to text value). The
// registry has checked the names against the entry's Params and filled in
// the defaults, so a Maker only parses values.
type Maker func(params map[string]string) (trajectories.Allocator, error)

// ErrUnknownAllocator is returned for a name the registry does not hold.
var ErrUnknownAllocator = errors.New("unknown allocator")

// ErrBadAllocatorParam is wrapped by errors about allocator parameters and
// specs.
var ErrBadAllocatorParam = errors.New("bad allocator parameter")

// Param documents one parameter of a registered allocator.
type Param struct {
	Name    string
	Default string // the value used when the spec does not give one; "" for none
	Doc     string
}

// Entry is one registered allocator.
type Entry struct {
	Name   string
	Doc    string  // what it computes
	Params []Param // the parameters it takes; a spec naming any other is an error
	Make   Maker

	// wrap, when set, is used instead of Make: it builds an allocator that
	// wraps another one, made from the same registry.
	wrap func(r *Registry, params map[string]string) (trajectories.Allocator, error)
}

// Registry names allocators. Build one with NewRegistry, Builtin or With; it
// is read-only afterwards and safe for concurrent use.
type Registry struct {
	entries map[string]Entry
}

// NewRegistry returns a registry of entries. Empty or duplicate names,
// names holding spec syntax, duplicate parameters and entries without a
// Maker are errors.
func NewRegistry(entries ...Entry) (*Registry, error) {
	r := &Registry{entries: map[string]Entry{}}
	return r.add(entries)
}

// With returns a new registry holding r's entries and entries: the way to
// add allocators of one's own to the built-in ones.
func (r *Registry) With(entries ...Entry) (*Registry, error) {
	out := &Registry{entries: maps.Clone(r.entries)}
	return out.add(entries)
}

func (r *Registry) add(entries []Entry) (*Registry, error) {
	for _, e := range entries {
		switch {
		case e.Name == "" || strings.ContainsAny(e.Name, ":(),;= \t"):
			return nil, fmt.Errorf("allocator registry: bad name %q (no spaces or any of \":(),;=\")", e.Name)
		case e.Make == nil && e.wrap == nil:
			return nil, fmt.Errorf("allocator registry: %s has no Maker", e.Name)
		}
		if _, dup := r.entries[e.Name]; dup {
			return nil, fmt.Errorf("allocator registry: two allocators are called %q", e.Name)
		}
		seen := map[string]bool{}
		for _, p := range e.Params {
			if p.Name == "" || seen[p.Name] {
				return nil, fmt.Errorf("allocator registry: %s: empty or duplicate parameter %q", e.Name, p.Name)
			}
			seen[p.Name] = true
		}
		r.entries[e.Name] = e
	}
	return r, nil
}

// Builtin returns a registry of troupe's allocators.
func Builtin() *Registry {
	r, err := NewRegistry(builtinEntries()...)
	if err != nil {
		panic(err) // fixed at compile time and covered by tests
	}
	return r
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string { return slices.Sorted(maps.Keys(r.entries)) }

// Doc returns the documentation of the named allocator.
func (r *Registry) Doc(name string) string { return r.entries[name].Doc }

// Entry returns the named entry.
func (r *Registry) Entry(name string) (Entry, bool) {
	e, ok := r.entries[name]
	return e, ok
}

// Make builds the named allocator with params. A parameter the entry does
// not declare is an error naming the ones it does.
func (r *Registry) Make(name string, params map[string]string) (trajectories.Allocator, error) {
	e, ok := r.entries[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownAllocator, name, strings.Join(r.Names(), ", "))
	}
	full := make(map[string]string, len(e.Params))
	for _, p := range e.Params {
		full[p.Name] = p.Default
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if _, ok := full[k]; !ok {
			if len(e.Params) == 0 {
				return nil, fmt.Errorf("%w: %s takes no parameters, got %q", ErrBadAllocatorParam, name, k)
			}
			names := make([]string, len(e.Params))
			for i, p := range e.Params {
				names[i] = p.Name
			}
			return nil, fmt.Errorf("%w: %s has no parameter %q (it takes %s)", ErrBadAllocatorParam, name, k, strings.Join(names, ", "))
		}
		full[k] = params[k]
	}
	if e.wrap != nil {
		return e.wrap(r, full)
	}
	return e.Make(full)
}

// Parse builds an allocator from a spec, in either of two forms:
//
//	name:key=value,key=value     (for example "rae:alpha=0.9")
//	name(key=value;key=value)    (for example "rloo(key=role)")
//
// The second form nests: a value may itself be a spec in that form, as in
// "discount:gamma=0.9,of=shapley-mc(permutations=32;mode=null)". An
// allocator's Name is a spec Parse reads back.
func (r *Registry) Parse(spec string) (trajectories.Allocator, error) {
	name, kvs, err := parseSpec(spec)
	if err != nil {
		return nil, err
	}
	params := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		params[kv[0]] = kv[1]
	}
	return r.Make(name, params)
}

// parseSpec splits a spec into its name and key=value pairs, in order.
func parseSpec(spec string) (string, [][2]string, error) {
	spec = strings.TrimSpace(spec)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: allocator spec %q: %s", ErrBadAllocatorParam, spec, fmt.Sprintf(format, args...))
	}
	name, rest, sep := spec, "", byte(',')
	if i := strings.IndexAny(spec, ":("); i >= 0 {
		name, rest = spec[:i], spec[i+1:]
		if spec[i] == '(' {
			if !strings.HasSuffix(rest, ")") {
				return "", nil, bad("'(' without a closing ')' at the end")
			}
			rest, sep = rest[:len(rest)-1], ';'
		}
	}
	name = strings.TrimSpace(name)
	if name == "" {
		return "", nil, bad("no allocator name")
	}
	if depth := balance(rest); depth != 0 {
		return "", nil, bad("unbalanced parentheses")
	}
	var kvs [][2]string
	if strings.TrimSpace(rest) == "" {
		if spec[len(name):] != "" && sep == ',' {
			return "", nil, bad("nothing after ':'")
		}
		return name, nil, nil
	}
	seen := map[string]bool{}
	for _, piece := range splitTop(rest, sep) {
		k, v, ok := strings.Cut(piece, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok || k == "":
			return "", nil, bad("%q is not key=value", piece)
		case v == "":
			return "", nil, bad("%s has an empty value", k)
		case seen[k]:
			return "", nil, bad("%s given twice", k)
		}
		seen[k] = true
		kvs = append(kvs, [2]string{k, v})
	}
	return name, kvs, nil
}

// balance returns the parenthesis depth at the end of s, or -1 as soon as a
// ')' closes nothing.
func balance(s string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return -1
			}
		}
	}
	return depth
}

// splitTop splits s at the occurrences of sep outside parentheses.
func splitTop(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case sep:
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// nested rewrites a spec in the nesting form: "n:a=1,b=2" becomes
// "n(a=1;b=2)", so that it can be a parameter's value.
func nested(spec string) string {
	name, kvs, err := parseSpec(spec)
	if err != nil || len(kvs) == 0 {
		return spec
	}
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = kv[0] + "=" + kv[1]
	}
	return name + "(" + strings.Join(parts, ";") + ")"
}

// Usage writes the documentation of every allocator, sorted by name: what
// it computes, its parameters and their defaults. It is the text of
// `troupe allocators`.
func (r *Registry) Usage(w io.Writer) error {
	var b strings.Builder
	b.WriteString("Allocators, chosen by a spec: NAME or NAME:key=value,...\n")
	b.WriteString("(NAME(key=value;...) when the spec is a parameter's value).\n")
	b.WriteString("The key a spec writes (its name in a dict reward, slime's --reward-key, and in\n")
	b.WriteString("metadata.allocator) is the spec as typed, parameters at their defaults left\n")
	b.WriteString("out: -a difference writes difference, -a difference:c=average,budget=65536\n")
	b.WriteString("writes difference:c=average.\n")
	for _, name := range r.Names() {
		e := r.entries[name]
		fmt.Fprintf(&b, "\n%s\n", name)
		wrapText(&b, e.Doc, "    ")
		for _, p := range e.Params {
			head := p.Name
			if p.Default != "" {
				head += "=" + p.Default
			}
			fmt.Fprintf(&b, "    %s\n", head)
			wrapText(&b, p.Doc, "        ")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// wrapText writes text word-wrapped at 80 columns, each line indented.
func wrapText(b *strings.Builder, text, indent string) {
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > 80 {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	if len(line) > len(indent) {
		b.WriteString(line + "\n")
	}
}

// ParseDefaultingSim is Parse for a scenario that declares whether its
// counterfactuals must re-simulate the other agents (a listener reacting to
// a speaker: replayed frozen, it repeats its recorded answer and every
// agent's credit is 0). When resimulate is set and spec is a counterfactual
// allocator that does not choose a mode itself (no sim=), it gets
// sim=resimulate. A built-in allocator's name is then the one its user
// typed (difference, not difference:sim=resimulate: the key a dict reward
// writes, and slime's --reward-key reads), and one that asks for
// sim=frozen says so (Sim.Implied).
func (r *Registry) ParseDefaultingSim(spec string, resimulate bool) (trajectories.Allocator, error) {
	a, err := r.Parse(spec)
	if err != nil || !resimulate || !NeedsOf(a).Replay {
		return a, err
	}
	if strings.Contains(spec, "sim=") {
		return implySim(a), nil
	}
	withSim := spec + ":sim=resimulate"
	switch {
	case strings.HasSuffix(spec, ")"):
		withSim = strings.TrimSuffix(spec, ")") + ";sim=resimulate)"
	case strings.Contains(spec, ":"):
		withSim = spec + ",sim=resimulate"
	}
	re, err := r.Parse(withSim)
	if err != nil {
		return nil, fmt.Errorf("%w: the scenario needs its counterfactuals re-simulated, and %s does not parse (%v): give sim= explicitly", ErrBadAllocatorParam, withSim, err)
	}
	return implySim(re), nil
}

// implySim marks the Sim of a built-in counterfactual allocator Implied:
// re-simulation is the scenario's mode. Other allocators (a registry's
// own) keep their names.
func implySim(a trajectories.Allocator) trajectories.Allocator {
	switch x := a.(type) {
	case Difference:
		x.Sim.Implied = true
		return x
	case LeaveOneOut:
		x.Sim.Implied = true
		return x
	case Shapley:
		x.Sim.Implied = true
		return x
	case MonteCarloShapley:
		x.Sim.Implied = true
		return x
	case COMA:
		x.Sim.Implied = true
		return x
	}
	return a
}

// SplitSpecs splits a comma-separated list of allocator specs, as a
// command-line flag gives them. A spec's own parameters are comma separated
// too ("rae:alpha=0.9,state=rae.json"), so a piece that reads key=value (no
// ':' or '(' before its '=') continues the previous spec; commas inside
// parentheses ("discount:of=rloo(key=role),gamma=0.9") never split. Pieces
// are trimmed; an empty piece is kept, for the caller to reject.
func SplitSpecs(list string) []string {
	var specs []string
	for _, piece := range splitTop(list, ',') {
		piece = strings.TrimSpace(piece)
		key, _, isKV := strings.Cut(piece, "=")
		if isKV && !strings.ContainsAny(key, ":(") && len(specs) > 0 {
			specs[len(specs)-1] += "," + piece
			continue
		}
		specs = append(specs, piece)
	}
	return specs
}
