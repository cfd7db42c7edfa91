package agents_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
)

func TestIntRange(t *testing.T) {
	s := agents.IntRange(-2, 3)
	if got, want := fmt.Sprint(s.Legal()), "[-2 -1 0 1 2 3]"; got != want {
		t.Fatalf("Legal() = %s, want %s", got, want)
	}
	if first, again := s.Legal(), s.Legal(); &first[0] != &again[0] || s.Len() != 6 || s.Lo() != -2 || s.Hi() != 3 {
		t.Fatalf("Legal is not cached, or bounds are wrong")
	}
	for v := -2; v <= 3; v++ {
		got, err := s.Parse(s.Text(v))
		if err != nil || got != v {
			t.Errorf("Parse(Text(%d)) = %d, %v", v, got, err)
		}
	}
	for _, bad := range []string{"", "4", "-3", " 1", "01", "00", "-0", "+1", "1.0", "x"} {
		if v, err := s.Parse(bad); !errors.Is(err, agents.ErrNotInSpace) {
			t.Errorf("Parse(%q) = %d, %v; want ErrNotInSpace", bad, v, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.Legal(); _ = s.Text(2); _, _ = s.Parse("3") }); n != 0 {
		t.Errorf("Legal, Text and Parse allocate %v times per turn", n)
	}
}

func TestEnum(t *testing.T) {
	c := agents.Enum("cooperate", "defect")
	if c.Len() != 2 || c.Text(1) != "defect" || fmt.Sprint(c.Legal()) != "[cooperate defect]" {
		t.Fatalf("Enum: %v", c.Legal())
	}
	if i, err := c.Parse("cooperate"); err != nil || i != 0 {
		t.Errorf(`Parse("cooperate") = %d, %v`, i, err)
	}
	_, err := c.Parse("Defect")
	if !errors.Is(err, agents.ErrNotInSpace) || err.Error() != `not a legal action: "Defect" is not one of cooperate, defect` {
		t.Errorf(`Parse("Defect") error = %v`, err)
	}
	for _, names := range [][]string{nil, {"a", ""}, {"a", "b", "a"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Enum(%q) did not panic", names)
				}
			}()
			agents.Enum(names...)
		}()
	}
}

func TestSpacePolicies(t *testing.T) {
	ints, enum := agents.IntRange(0, 10), agents.Enum("stay", "go")
	obs := &agents.Observation{Turn: 3, Legal: ints.Legal()}
	for _, c := range []struct {
		pol  agents.Policy
		want string
	}{
		{ints.Always(10), "10"},
		{ints.Scripted(func(o *agents.Observation) int { return o.Turn * 2 }), "6"},
		{enum.Always(1), "go"},
		{enum.Scripted(func(o *agents.Observation) int { return o.Turn % 2 }), "go"},
	} {
		a, err := c.pol.Act(context.Background(), obs)
		if err != nil || a.Text != c.want {
			t.Errorf("policy answered %q, %v; want %q", a.Text, err, c.want)
		}
	}
	// Random draws from the cached legal list like any other.
	a, err := agents.Random().Act(context.Background(), obs)
	if _, perr := ints.Parse(a.Text); err != nil || perr != nil {
		t.Errorf("Random answered %q (%v, %v)", a.Text, err, perr)
	}
}

func FuzzIntsParse(f *testing.F) {
	s := agents.IntRange(-5, 100)
	for _, seed := range []string{"0", "-5", "100", "101", "007", "-0", " 3", "+7", "1_0", "999999999", "4294967296"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		v, err := s.Parse(text)
		if d, ok := s.Digit(text); ok && (err != nil || d != v) {
			t.Fatalf("Digit(%q) = %d, Parse = %d, %v", text, d, v, err)
		}
		if err != nil {
			// Every number of the range in its canonical form is accepted.
			if n, aerr := strconv.Atoi(text); aerr == nil && s.Contains(n) && strconv.Itoa(n) == text {
				t.Fatalf("Parse(%q) refused a number of the space: %v", text, err)
			}
			return
		}
		if !s.Contains(v) || s.Text(v) != text || strconv.Itoa(v) != text {
			t.Fatalf("Parse(%q) = %d, which writes as %q", text, v, s.Text(v))
		}
	})
}

func ExampleIntRange() {
	coins := agents.IntRange(0, 10)
	fmt.Println(len(coins.Legal()), coins.Legal()[10])
	v, err := coins.Parse("7")
	fmt.Println(v, err)
	_, err = coins.Parse("eleven")
	fmt.Println(err)
	// Output:
	// 11 10
	// 7 <nil>
	// not a legal action: "eleven" is not an integer from 0 to 10
}

// TestDigitIsParse: Digit reads a one-digit text of the range as Parse
// does, says false for everything else, and is true for every one-digit
// number of the range, which is what makes it worth asking first.
func TestDigitIsParse(t *testing.T) {
	for _, s := range []*agents.Ints{agents.IntRange(0, 0), agents.IntRange(0, 6), agents.IntRange(0, 9), agents.IntRange(0, 99), agents.IntRange(-5, 3), agents.IntRange(4, 20)} {
		texts := []string{"", "home", "-1", "+1", "07", "00", " 3", "3 ", "１", "a", "/", ":", "10", "99", "100"}
		for c := range 256 {
			texts = append(texts, string(rune(c)))
		}
		for _, text := range texts {
			d, ok := s.Digit(text)
			v, err := s.Parse(text)
			inRange := len(text) == 1 && text[0] >= '0' && text[0] <= '9' && s.Contains(int(text[0]-'0'))
			if ok != inRange || (ok && (err != nil || d != v)) {
				t.Errorf("%d..%d: Digit(%q) = %d, %v; Parse = %d, %v", s.Lo(), s.Hi(), text, d, ok, v, err)
			}
		}
	}
}
