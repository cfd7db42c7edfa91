package protocol

import (
	"encoding/json"
	"math"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAppendFloatMatchesEncodingJSON holds appendFloat to encoding/json's
// output, byte for byte, on the formatting boundaries and on random values.
func TestAppendFloatMatchesEncodingJSON(t *testing.T) {
	values := []float64{
		0, math.Copysign(0, -1), 1, -1, 0.5, 0.1, 1.0 / 3, 2.0 / 3, 100, 1e6, 123456789,
		1e-6, 9.999999999999999e-7, 1e-7, -1e-7, 1.5e-7, 1e-9, 1e-10, 1e-100, 1e-300,
		1e20, 99999999999999999999, 1e21, -1e21, 1.0000000000000001e21, 1e22, 1e100, 1e300,
		math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64,
		math.MaxInt64, math.MinInt64, 1 << 53, 1<<53 + 2, math.Pi, math.E, -0.25, -3.125,
		2.2250738585072014e-308, // smallest normal
		0.000001, 0.0000012345, 12345678901234567890,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		values = append(values, f)
	}
	for range 5000 {
		// Values of the magnitudes rewards and log-probs have.
		values = append(values, (rng.Float64()-0.5)*math.Pow(10, float64(rng.IntN(40)-20)))
	}
	for _, f := range values {
		want, err := json.Marshal(f)
		require.NoError(t, err)
		got := appendFloat(nil, f)
		require.Equal(t, string(want), string(got), "appendFloat(%b)", f)
		back, err := strconv.ParseFloat(string(got), 64)
		require.NoError(t, err)
		require.Equal(t, math.Float64bits(f), math.Float64bits(back), "%s does not round-trip", got)
	}
}

func TestAppendFloatNonFinite(t *testing.T) {
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		assert.Equal(t, "x:null", string(appendFloat([]byte("x:"), f)), "%v", f)
	}
}

func TestAppendString(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", `""`},
		{"plain", `"plain"`},
		{`a"b`, `"a\"b"`},
		{`a\b`, `"a\\b"`},
		{"a\nb\rc\td", `"a\nb\rc\td"`},
		{"\x00", `"\u0000"`},
		{"\x01\x08\x0c\x1f", `"\u0001\u0008\u000c\u001f"`},
		{"\x7f", "\"\x7f\""},
		{"<&>", `"<&>"`},
		{"é中🎲", `"é中🎲"`},
		{"\u2028\u2029", `"\u2028\u2029"`},
		{"a\u2028b", `"a\u2028b"`},
		{"\xff", `"\ufffd"`},
		{"a\xffb", `"a\ufffdb"`},
		{"\xe2\x82", `"\ufffd\ufffd"`},           // a truncated three-byte rune
		{"\xed\xa0\x80", `"\ufffd\ufffd\ufffd"`}, // a UTF-16 surrogate is not UTF-8
		{"\xc0\xaf", `"\ufffd\ufffd"`},           // an overlong encoding
		{"\ufffd", "\"\ufffd\""},                 // a real U+FFFD is kept as is
	}
	for _, tt := range tests {
		got := appendString([]byte("x"), tt.in)
		assert.Equal(t, "x"+tt.want, string(got), "appendString(%q)", tt.in)
	}
}

// TestAppendStringDecodesLikeEncodingJSON checks, on random byte strings,
// that appendString always yields valid JSON and valid UTF-8 and that it
// decodes to what encoding/json's own encoding decodes to.
func TestAppendStringDecodesLikeEncodingJSON(t *testing.T) {
	alphabet := []string{"a", "Z", " ", "\"", "\\", "\n", "\x00", "\x1f", "\x7f", "\x80", "\xff", "\xc3", "\xa9",
		"é", "\u2028", "\u2029", "🎲", "\ufffd", "<", "&", "\xed\xa0\x80", "\xf4\x90\x80\x80"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		var b []byte
		for range rng.IntN(24) {
			b = append(b, alphabet[rng.IntN(len(alphabet))]...)
		}
		s := string(b)
		got := appendString(nil, s)
		require.True(t, json.Valid(got), "appendString(%q) = %s", s, got)
		require.True(t, utf8.Valid(got), "appendString(%q) = %q", s, got)
		var fromOurs, fromStd string
		require.NoError(t, json.Unmarshal(got, &fromOurs))
		std, err := json.Marshal(s)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(std, &fromStd))
		require.Equal(t, fromStd, fromOurs, "appendString(%q) = %s, encoding/json wrote %s", s, got, std)
	}
}

// TestAppendStringWhateverTheRoom checks that appendString writes the same
// bytes whatever spare room dst has, through the shorter stretches it
// escapes into a tight buffer, and that a buffer sized for a plain string
// and a little more is not grown.
func TestAppendStringWhateverTheRoom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pieces := []string{"plain text ", "<|im_start|>", "\n", "\"", "\x01", "\xff", "é", "\u2028", "🎲"}
	for _, n := range []int{0, 100, 5000, 20000} {
		var b []byte
		for len(b) < n {
			if rng.IntN(8) == 0 {
				b = append(b, pieces[1+rng.IntN(len(pieces)-1)]...)
			} else {
				b = append(b, pieces[0]...)
			}
		}
		s := string(b)
		want := appendString(nil, s)
		var fromOurs, fromStd string
		require.NoError(t, json.Unmarshal(want, &fromOurs))
		std, err := json.Marshal(s)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(std, &fromStd))
		require.Equal(t, fromStd, fromOurs, "len %d", n)
		for _, spare := range []int{0, 1, 7, 8, 6*minStretch + 7, 6*minStretch + 8, 6*minStretch + 9, len(want) / 2, len(want) - 1, len(want), len(want) + 13, 6*len(s) + 8} {
			got := appendString(make([]byte, 3, 3+spare), s)
			require.Equal(t, string(want), string(got[3:]), "len %d, spare %d", n, spare)
		}
	}
	s := strings.Repeat("plain ascii text, a newline every few dozen bytes\n", 400)
	buf := make([]byte, 0, len(s)+len(s)/16+16)
	assert.Zero(t, testing.AllocsPerRun(10, func() { buf = appendString(buf[:0], s) }), "a presized buffer is filled, not grown")
}

func TestExportedAppendersAreTheEncoders(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"\\\n\x01", "bad\xffutf8", "\u2028"} {
		if got, want := string(AppendString(nil, s)), string(appendString(nil, s)); got != want {
			t.Errorf("AppendString(%q) = %s, want %s", s, got, want)
		}
	}
	for _, f := range []float64{0, -1.5, 1e-7, 1e21, 3.141592653589793} {
		if got, want := string(AppendFloat(nil, f)), string(appendFloat(nil, f)); got != want {
			t.Errorf("AppendFloat(%v) = %s, want %s", f, got, want)
		}
	}
}

// TestNeedsLookFindsTheFirstByteThatNeedsOne puts every byte value at every
// position of an otherwise plain word, alone and below every other byte
// value, and checks that needsLook's lowest bit is the byte-by-byte rule of
// appendString; and appendString against encoding/json on strings of every
// length up to three words, with the byte at every offset, so that the
// word-wide runs and the last word's tail both meet it.
func TestNeedsLookFindsTheFirstByteThatNeedsOne(t *testing.T) {
	look := func(c int) bool { return c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' }
	first := func(m uint64) int { return bits.TrailingZeros64(m) / 8 } // 8: none
	for pos := range 8 {
		for c := range 256 {
			w := []byte("abcdefgh")
			w[pos] = byte(c)
			want := 8
			if look(c) {
				want = pos
			}
			if got := first(needsLook(word8(string(w), 0))); got != want {
				t.Fatalf("byte %#x at %d: first byte to look at %d, want %d", c, pos, got, want)
			}
			for above := pos + 1; above < 8 && look(c); above++ {
				for d := range 256 {
					w[above] = byte(d)
					if got := first(needsLook(word8(string(w), 0))); got != pos {
						t.Fatalf("byte %#x at %d, %#x at %d: first byte to look at %d, want %d", c, pos, d, above, got, pos)
					}
				}
				w[above] = 'a' + byte(above)
			}
		}
	}
	for _, c := range []string{"\"", "\\", "\n", "\x00", "\x1f", "\x7f", "é", "\xff", "\u2028", "\n\n"} {
		for n := range 25 {
			for at := 0; at+len(c) <= n; at++ {
				s := strings.Repeat("x", at) + c + strings.Repeat("y", n-at-len(c))
				std, err := json.Marshal(s)
				require.NoError(t, err)
				var fromOurs, fromStd string
				require.NoError(t, json.Unmarshal(appendString(nil, s), &fromOurs))
				require.NoError(t, json.Unmarshal(std, &fromStd))
				require.Equal(t, fromStd, fromOurs, "appendString(%q)", s)
			}
		}
	}
}
