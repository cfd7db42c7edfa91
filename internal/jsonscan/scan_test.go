package jsonscan

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// valid reports whether a strict Scanner skips data as one value and
// nothing after it, and why not.
func valid(data []byte, lax bool) (bool, string) {
	s := Scanner{B: data, Lax: lax}
	s.Skip()
	s.End()
	why, _ := s.Why()
	return !s.Failed(), why
}

var seeds = []string{
	`{"a":[1,-2,3.5e-7,0,-0,true,false,null,"x\"y\\u00e9\n"],"b":{}}`,
	`[]`, `{}`, `""`, `0`, `-0.0E+1`, ` [ { } , [ ] ] `, `"\/\b\f\r\t"`,
	`01`, `+1`, `1.`, `.5`, `1e`, `-`, `1-2`, `[1,]`, `{"a" 1}`, `{"a":1,}`, `tru`, `nul`,
	`"\x"`, `"\u12G4"`, "\"\x01\"", `"abc`, `[1 2]`, `{1:2}`, `[1]x`, ``, `1e999`, "0\x00", "[0]\x00",
}

func TestDepth(t *testing.T) {
	deep := func(n int) []byte { return []byte(strings.Repeat("[", n) + strings.Repeat("]", n)) }
	if ok, why := valid(deep(DefaultMaxDepth), false); !ok {
		t.Errorf("%d levels: %s", DefaultMaxDepth, why)
	}
	if ok, why := valid(deep(DefaultMaxDepth+1), false); ok || why != "nested deeper than 10000" {
		t.Errorf("%d levels: %v %q", DefaultMaxDepth+1, ok, why)
	}
	s := Scanner{B: deep(4), MaxDepth: 3}
	s.Skip()
	if !s.Failed() {
		t.Error("MaxDepth 3 reads 4 levels")
	}
}

func TestLaxStrings(t *testing.T) {
	for d, want := range map[string]bool{"\"\x01\"": true, `"\x"`: true, `"a\\"`: true, `"\\\""`: true, `"\"`: false, `"a\\\"`: false} {
		if ok, why := valid([]byte(d), true); ok != want {
			t.Errorf("lax %q: read %v (%s)", d, ok, why)
		}
	}
}

func TestObjectAndKeys(t *testing.T) {
	data := []byte(` {"a" : 1, "b\u0063":[true, "s"], "d": null} `)
	for _, c := range []struct {
		keys Keys
		want string
		fail bool
	}{
		{KeysRaw, `a b\u0063 d`, false},
		{KeysDecode, `a bc d`, false},
		{KeysFail, `a`, true},
	} {
		s := Scanner{B: data, Keys: c.keys}
		var got []string
		s.Object(func(k []byte) {
			got = append(got, string(k))
			s.Skip()
		})
		s.End()
		if strings.Join(got, " ") != c.want || s.Failed() != c.fail {
			t.Errorf("keys %d: %q, failed %v", c.keys, got, s.Failed())
		}
	}
}

func TestNumbers(t *testing.T) {
	for _, c := range []struct {
		in         string
		i          int64
		intOK, neg bool
		f          float64
	}{
		{"0", 0, true, false, 0},
		{"-12", -12, true, true, -12},
		{"9223372036854775807", math.MaxInt64, true, false, 9223372036854775807},
		{"9223372036854775808", 0, false, false, 9223372036854775808},
		{"123456789012345678", 123456789012345678, true, false, 123456789012345678},
		{"2.5e3", 0, false, false, 2500},
	} {
		s := Scanner{B: []byte(c.in)}
		if i, _, ok := s.Int(); ok != c.intOK || ok && i != c.i || s.Failed() {
			t.Errorf("%s: Int %d %v", c.in, i, ok)
		}
		s = Scanner{B: []byte(c.in)}
		if u, ok := s.Uint(); ok != (!c.neg && c.f == math.Trunc(c.f) && c.f < 1<<64 && c.in != "2.5e3") || ok && float64(u) != c.f {
			t.Errorf("%s: Uint %d %v", c.in, u, ok)
		}
		s = Scanner{B: []byte(c.in)}
		if f := s.Float(); f != c.f || s.Failed() {
			t.Errorf("%s: Float %v", c.in, f)
		}
	}
	s := Scanner{B: []byte("-0")}
	if f := s.Float(); !math.Signbit(f) {
		t.Error("-0 lost its sign")
	}
	for _, fr := range []bool{false, true} {
		s = Scanner{B: []byte("1e999"), FloatRange: fr}
		if s.Skip(); s.Failed() != fr {
			t.Errorf("FloatRange %v: failed %v", fr, s.Failed())
		}
	}
	s = Scanner{B: []byte("1e999")}
	if s.Float(); !s.Failed() {
		t.Error("Float read 1e999")
	}
	s = Scanner{B: []byte("1x")}
	s.Number()
	if s.Failed() || s.I != 1 {
		t.Errorf("1x: stopped at %d, failed %v", s.I, s.Failed())
	}
}

func TestFailIsSticky(t *testing.T) {
	s := Scanner{B: []byte(`{"a":x}`)}
	s.Skip()
	s.Fail("later")
	why, at := s.Why()
	if why != "want a number" || at != 5 || s.I != len(s.B) {
		t.Errorf("%q at %d, cursor %d", why, at, s.I)
	}
}

func TestNoAllocations(t *testing.T) {
	data := []byte(`{"a":[1,-2,3.5e-7,true,null,"x\"y"],"b":{"c":"d"}}`)
	var s Scanner
	if n := testing.AllocsPerRun(100, func() {
		s = Scanner{B: data}
		s.Skip()
		s.End()
	}); n != 0 || s.Failed() {
		t.Errorf("%v allocations, failed %v", n, s.Failed())
	}
}

// FuzzSkip: a strict Scanner accepts exactly what encoding/json accepts,
// a lax one at least that, and neither panics.
func FuzzSkip(f *testing.F) {
	for _, d := range seeds {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, why := valid(data, false)
		if want := json.Valid(data); got != want {
			t.Fatalf("%q: scanned %v (%s), encoding/json %v", data, got, why, want)
		}
		if lax, why := valid(data, true); got && !lax {
			t.Fatalf("%q: lax refuses what strict reads: %s", data, why)
		}
	})
}
