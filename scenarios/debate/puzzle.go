package debate

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"regexp"
	"strconv"
)

// The puzzle kinds, values of the kind parameter (Mixed draws one of the
// others per episode).
const (
	Arithmetic = "arithmetic"
	Modular    = "modular"
	Linear     = "linear"
	Mixed      = "mixed"
)

// ErrPuzzle is wrapped by Solve's errors: the text is not a puzzle of the
// scenario's forms, or its value does not fit in an int64.
var ErrPuzzle = errors.New("debate: not a puzzle this scenario poses")

// Puzzle is a question with an integer answer.
type Puzzle struct {
	Kind     string
	Question string
	Answer   int64
}

// per-difficulty bounds, index difficulty-1.
var (
	arithMax   = [5]int64{9, 12, 20, 50, 99}
	modBase    = [5]int64{10, 50, 100, 1000, 10000}
	modExp     = [5]int64{5, 20, 100, 1000, 100000}
	modModulus = [5]int64{10, 30, 100, 1000, 10000}
	linRoot    = [5]int64{10, 20, 50, 100, 500}
	linCoef    = [5]int64{5, 9, 12, 20, 50}
)

// NewPuzzle draws a puzzle of kind (Mixed picks one) and difficulty 1..5
// from rng. Higher difficulty means more steps and larger numbers:
//
//   - arithmetic: difficulty+2 operands joined by +, - and (from 2) *,
//     grouped by parentheses from difficulty 3;
//   - modular: B^E mod M, and (A * B + C)^E mod M from difficulty 3;
//   - linear: a*x + b = c, and a*x + b = c*x + d from difficulty 3, with an
//     integer root.
func NewPuzzle(rng *rand.Rand, kind string, difficulty int) (Puzzle, error) {
	if difficulty < 1 || difficulty > 5 {
		return Puzzle{}, fmt.Errorf("debate: difficulty %d is outside 1..5", difficulty)
	}
	if kind == Mixed {
		kind = [...]string{Arithmetic, Modular, Linear}[rng.IntN(3)]
	}
	d := difficulty - 1
	switch kind {
	case Arithmetic:
		e := randomExpr(rng, difficulty+2, arithMax[d], difficulty >= 2, difficulty >= 3)
		q := "Compute " + e.String() + "."
		return Puzzle{Kind: kind, Question: q, Answer: e.eval()}, nil
	case Modular:
		m := 2 + rng.Int64N(modModulus[d]-1)
		exp := 1 + rng.Int64N(modExp[d])
		var base string
		var b int64
		if difficulty >= 3 {
			x, y, z := 1+rng.Int64N(modBase[d]), 1+rng.Int64N(modBase[d]), rng.Int64N(modBase[d])
			base = fmt.Sprintf("(%d * %d + %d)", x, y, z)
			b = (mulmod(x, y, m) + z%m) % m
		} else {
			b = 2 + rng.Int64N(modBase[d]-1)
			base = strconv.FormatInt(b, 10)
		}
		q := fmt.Sprintf("Compute %s^%d mod %d.", base, exp, m)
		return Puzzle{Kind: kind, Question: q, Answer: powmod(b%m, exp, m)}, nil
	case Linear:
		x := rng.Int64N(2*linRoot[d]+1) - linRoot[d]
		coef := func() int64 { // nonzero, either sign
			c := 1 + rng.Int64N(linCoef[d])
			if rng.IntN(2) == 0 {
				c = -c
			}
			return c
		}
		a, b := coef(), rng.Int64N(2*linRoot[d]+1)-linRoot[d]
		var q string
		if difficulty >= 3 {
			c := coef()
			for c == a {
				c = coef()
			}
			dd := a*x + b - c*x
			q = fmt.Sprintf("Solve for the integer x: %s = %s.", linearSide(a, b), linearSide(c, dd))
		} else {
			q = fmt.Sprintf("Solve for the integer x: %s = %d.", linearSide(a, b), a*x+b)
		}
		return Puzzle{Kind: kind, Question: q, Answer: x}, nil
	}
	return Puzzle{}, fmt.Errorf("debate: unknown puzzle kind %q", kind)
}

// linearSide renders a*x + b as "3*x - 7", "-x + 2", "5*x".
func linearSide(a, b int64) string {
	var s string
	switch a {
	case 1:
		s = "x"
	case -1:
		s = "-x"
	default:
		s = strconv.FormatInt(a, 10) + "*x"
	}
	switch {
	case b > 0:
		s += " + " + strconv.FormatInt(b, 10)
	case b < 0:
		s += " - " + strconv.FormatInt(-b, 10)
	}
	return s
}

func mulmod(a, b, m int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return int64(bits.Rem64(hi, lo, uint64(m)))
}

// powmod returns b^e mod m for 0 <= b < m, e >= 0, m >= 1.
func powmod(b, e, m int64) int64 {
	r := int64(1) % m
	for ; e > 0; e >>= 1 {
		if e&1 == 1 {
			r = mulmod(r, b, m)
		}
		b = mulmod(b, b, m)
	}
	return r
}

// expr is an arithmetic expression tree: a leaf (op 0) or a binary node.
type expr struct {
	op          byte // 0, '+', '-' or '*'
	val         int64
	left, right *expr
}

// randomExpr draws an expression with n operands in 1..max. Nested, it is
// a random tree, which parentheses group; flat, it is a random sequence of
// operands and operators read with the usual precedence, which needs none.
func randomExpr(rng *rand.Rand, n int, max int64, mul, nest bool) *expr {
	ops := "+-"
	if mul {
		ops = "+-*"
	}
	leaf := func() *expr { return &expr{val: 1 + rng.Int64N(max)} }
	if nest {
		var tree func(n int) *expr
		tree = func(n int) *expr {
			if n == 1 {
				return leaf()
			}
			k := 1 + rng.IntN(n-1)
			op := ops[rng.IntN(len(ops))]
			return &expr{op: op, left: tree(k), right: tree(n - k)}
		}
		return tree(n)
	}
	// Flat: products bind first, then sums and differences left to right.
	sum := leaf()
	term := sum // the product being built, the sum's last term
	var parent *expr
	for range n - 1 {
		op := ops[rng.IntN(len(ops))]
		if op == '*' {
			prod := &expr{op: '*', left: term, right: leaf()}
			if parent == nil {
				sum = prod
			} else {
				parent.right = prod
			}
			term = prod
			continue
		}
		term = leaf()
		sum = &expr{op: op, left: sum, right: term}
		parent = sum
	}
	return sum
}

func (e *expr) eval() int64 {
	switch e.op {
	case '+':
		return e.left.eval() + e.right.eval()
	case '-':
		return e.left.eval() - e.right.eval()
	case '*':
		return e.left.eval() * e.right.eval()
	}
	return e.val
}

func prec(op byte) int {
	switch op {
	case '+', '-':
		return 1
	case '*':
		return 2
	}
	return 3
}

// String renders the expression with the parentheses it needs and no
// more: around a child of lower precedence, and around a right child of
// equal precedence under - (a - (b + c)) or * (kept for readability).
func (e *expr) String() string {
	if e.op == 0 {
		return strconv.FormatInt(e.val, 10)
	}
	l, r := e.left.String(), e.right.String()
	if prec(e.left.op) < prec(e.op) {
		l = "(" + l + ")"
	}
	if prec(e.right.op) < prec(e.op) || (prec(e.right.op) == prec(e.op) && e.right.op != 0) {
		r = "(" + r + ")"
	}
	return l + " " + string(e.op) + " " + r
}

var (
	computeRE = regexp.MustCompile(`^Compute (.+?)(?: mod ([0-9]+))?\.$`)
	linearRE  = regexp.MustCompile(`^Solve for the integer x: (.+) = (.+)\.$`)
	// sideRE reads a linear side as NewPuzzle writes it: an optional
	// coefficient, x, an optional constant; or a lone constant.
	sideRE = regexp.MustCompile(`^(?:(-?)([0-9]*)(\*)?x(?: ([+-]) ([0-9]+))?|(-?[0-9]+))$`)
)

// Solve computes the answer of a puzzle from its question text, the way a
// diligent player would: it parses the expression or equation and
// evaluates it. It reads exactly the forms NewPuzzle writes.
func Solve(question string) (int64, error) {
	if m := linearRE.FindStringSubmatch(question); m != nil {
		a, b, err := side(m[1])
		if err != nil {
			return 0, err
		}
		c, d, err := side(m[2])
		if err != nil {
			return 0, err
		}
		if a == c || (d-b)%(a-c) != 0 {
			return 0, fmt.Errorf("%w: %q has no unique integer root", ErrPuzzle, question)
		}
		return (d - b) / (a - c), nil
	}
	m := computeRE.FindStringSubmatch(question)
	if m == nil {
		return 0, fmt.Errorf("%w: %q", ErrPuzzle, question)
	}
	p := &parser{text: m[1]}
	if m[2] != "" {
		mod, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil || mod < 1 {
			return 0, fmt.Errorf("%w: modulus %q", ErrPuzzle, m[2])
		}
		p.mod = mod
	}
	v, err := p.parse()
	if err != nil {
		return 0, fmt.Errorf("%w: %q: %w", ErrPuzzle, question, err)
	}
	return v, nil
}

// side reads a*x + b (a may be 0: a lone constant).
func side(s string) (a, b int64, err error) {
	m := sideRE.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, fmt.Errorf("%w: %q is not a linear expression in x", ErrPuzzle, s)
	}
	if m[6] != "" {
		b, err = strconv.ParseInt(m[6], 10, 64)
		return 0, b, err
	}
	a = 1
	if m[2] != "" {
		if a, err = strconv.ParseInt(m[2], 10, 64); err != nil {
			return 0, 0, err
		}
	}
	if m[1] == "-" {
		a = -a
	}
	if m[5] != "" {
		if b, err = strconv.ParseInt(m[5], 10, 64); err != nil {
			return 0, 0, err
		}
		if m[4] == "-" {
			b = -b
		}
	}
	return a, b, nil
}

// parser evaluates expressions of integers, + - * ^ and parentheses, with
// overflow checks; with mod > 0, modulo mod (the result in [0, mod)). An
// exponent must be a plain integer.
type parser struct {
	text string
	pos  int
	mod  int64
}

var errOverflow = errors.New("the value does not fit in an int64")

func (p *parser) parse() (int64, error) {
	v, err := p.sum()
	if err != nil {
		return 0, err
	}
	if p.skip(); p.pos != len(p.text) {
		return 0, fmt.Errorf("unexpected %q at byte %d", p.text[p.pos:], p.pos)
	}
	return p.norm(v), nil
}

func (p *parser) skip() {
	for p.pos < len(p.text) && p.text[p.pos] == ' ' {
		p.pos++
	}
}

func (p *parser) peek() byte {
	if p.skip(); p.pos < len(p.text) {
		return p.text[p.pos]
	}
	return 0
}

func (p *parser) norm(v int64) int64 {
	if p.mod == 0 {
		return v
	}
	v %= p.mod
	if v < 0 {
		v += p.mod
	}
	return v
}

func (p *parser) sum() (int64, error) {
	v, err := p.product()
	for err == nil {
		op := p.peek()
		if op != '+' && op != '-' {
			break
		}
		p.pos++
		var w int64
		if w, err = p.product(); err != nil {
			break
		}
		if op == '-' {
			w = -w
		}
		if p.mod > 0 {
			v = p.norm(p.norm(v) + p.norm(w))
		} else if v, err = add(v, w); err != nil {
			break
		}
	}
	return v, err
}

func (p *parser) product() (int64, error) {
	v, err := p.power()
	for err == nil && p.peek() == '*' {
		p.pos++
		var w int64
		if w, err = p.power(); err != nil {
			break
		}
		if p.mod > 0 {
			v = mulmod(p.norm(v), p.norm(w), p.mod)
		} else if v, err = mul(v, w); err != nil {
			break
		}
	}
	return v, err
}

func (p *parser) power() (int64, error) {
	v, err := p.unary()
	if err != nil || p.peek() != '^' {
		return v, err
	}
	p.pos++
	p.skip()
	e, err := p.number()
	if err != nil {
		return 0, err
	}
	if p.mod > 0 {
		return powmod(p.norm(v), e, p.mod), nil
	}
	// Squaring, with overflow checks: v^e with |v| >= 2 overflows within
	// 63 steps, and 0, 1 and -1 never do, so even a huge e is cheap.
	r := int64(1)
	for ; e > 0; e >>= 1 {
		if e&1 == 1 {
			if r, err = mul(r, v); err != nil {
				return 0, err
			}
		}
		if e > 1 {
			if v, err = mul(v, v); err != nil {
				return 0, err
			}
		}
	}
	return r, nil
}

func (p *parser) unary() (int64, error) {
	if p.peek() == '-' {
		p.pos++
		v, err := p.unary()
		if err != nil {
			return 0, err
		}
		if v == math.MinInt64 {
			return 0, errOverflow
		}
		return -v, nil
	}
	if p.peek() == '(' {
		p.pos++
		v, err := p.sum()
		if err != nil {
			return 0, err
		}
		if p.peek() != ')' {
			return 0, fmt.Errorf("missing ) at byte %d", p.pos)
		}
		p.pos++
		return v, nil
	}
	return p.number()
}

func (p *parser) number() (int64, error) {
	p.skip()
	start := p.pos
	for p.pos < len(p.text) && p.text[p.pos] >= '0' && p.text[p.pos] <= '9' {
		p.pos++
	}
	if start == p.pos {
		return 0, fmt.Errorf("want a number at byte %d of %q", start, p.text)
	}
	v, err := strconv.ParseInt(p.text[start:p.pos], 10, 64)
	if err != nil {
		return 0, errOverflow
	}
	return v, nil
}

func add(a, b int64) (int64, error) {
	s := a + b
	if (a > 0 && b > 0 && s < 0) || (a < 0 && b < 0 && s >= 0) {
		return 0, errOverflow
	}
	return s, nil
}

func mul(a, b int64) (int64, error) {
	if a == 0 || b == 0 {
		return 0, nil
	}
	p := a * b
	if p/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, errOverflow
	}
	return p, nil
}

// normalAnswer renders an answer the way messages and labels show it.
func normalAnswer(v int64) string { return strconv.FormatInt(v, 10) }
