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

func TestSkipAgreesWithEncodingJSON(t *testing.T) {
	for _, d := range seeds {
		got, why := valid([]byte(d), false)
		if want := json.Valid([]byte(d)); got != want {
			t.Errorf("%q: scanned %v (%s), encoding/json %v", d, got, why, want)
		}
	}
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
	for _, d := range []string{"\"\x01\"", `"\x"`, `"a\\"`, `"\\\""`} {
		if ok, why := valid([]byte(d), true); !ok {
			t.Errorf("lax %q: %s", d, why)
		}
	}
	for _, d := range []string{`"\"`, `"a\\\"`} {
		if ok, _ := valid([]byte(d), true); ok {
			t.Errorf("lax %q: read an unterminated string", d)
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
		in    string
		i     int64
		intOK bool
		f     float64
	}{
		{"0", 0, true, 0},
		{"-12", -12, true, -12},
		{"9223372036854775807", math.MaxInt64, true, 9223372036854775807},
		{"9223372036854775808", 0, false, 9223372036854775808},
		{"123456789012345678", 123456789012345678, true, 123456789012345678},
		{"2.5e3", 0, false, 2500},
	} {
		s := Scanner{B: []byte(c.in)}
		raw, frac := s.Number()
		if s.Failed() {
			t.Fatalf("%s: %v", c.in, s.why)
		}
		if !frac {
			i, ok := ParseInt(raw)
			if ok != c.intOK || ok && i != c.i {
				t.Errorf("%s: ParseInt %d %v", c.in, i, ok)
			}
		}
		s.Reset([]byte(c.in))
		if i, f, ok := s.Int(); f != frac || ok != c.intOK || ok && i != c.i || s.Failed() {
			t.Errorf("%s: Int %d %v %v", c.in, i, f, ok)
		}
		if f, ok := ParseFloat(raw, frac); !ok || f != c.f {
			t.Errorf("%s: ParseFloat %v %v", c.in, f, ok)
		}
	}
	if f, _ := ParseFloat([]byte("-0"), false); !math.Signbit(f) {
		t.Error("-0 lost its sign")
	}
	s := Scanner{B: []byte("1e999"), FloatRange: true}
	s.Skip()
	if !s.Failed() {
		t.Error("FloatRange skipped 1e999")
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
	s.Reset([]byte(`1`))
	s.Skip()
	if s.Failed() {
		t.Error("Reset kept the failure")
	}
}

func TestNoAllocations(t *testing.T) {
	data := []byte(`{"a":[1,-2,3.5e-7,true,null,"x\"y"],"b":{"c":"d"}}`)
	var s Scanner
	if n := testing.AllocsPerRun(100, func() {
		s.Reset(data)
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

func BenchmarkSkip(b *testing.B) {
	line := []byte(`{"tokens":[` + strings.Repeat("151644,8948,198,", 300) + `1],"prompt":"` +
		strings.Repeat("You are a patron of the El Farol bar. ", 40) + `","reward":-0.25,"metadata":{"seed":7,"text_only":false}}`)
	b.SetBytes(int64(len(line)))
	var s Scanner
	for b.Loop() {
		s.Reset(line)
		s.Skip()
		s.End()
	}
	if s.Failed() {
		b.Fatal(s.Why())
	}
}
