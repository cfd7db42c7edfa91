package verifiers

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// maxDepth bounds the nesting of a payload's msgpack values.
const maxDepth = 64

// errTruncated is a msgpack value cut short.
var errTruncated = errors.New("msgpack value cut short")

// checkMsgpack checks that b is exactly one well-formed msgpack value, no
// deeper than maxDepth, whose every declared length fits in the bytes that
// follow it. It runs before the decoder, which allocates what a header
// claims: a five-byte map header claiming four billion entries would
// otherwise cost gigabytes before the decoder noticed the bytes missing.
func checkMsgpack(b []byte) error {
	n, err := skipValue(b, 0, 0)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("%d bytes after the payload's msgpack value", len(b)-n)
	}
	return nil
}

// skipValue returns the offset just past the value starting at off.
func skipValue(b []byte, off, depth int) (int, error) {
	if off >= len(b) {
		return 0, errTruncated
	}
	if depth > maxDepth {
		return 0, fmt.Errorf("msgpack values nested deeper than %d", maxDepth)
	}
	c := b[off]
	off++
	// size reads an n-byte big-endian length at off.
	size := func(n int) (int, error) {
		if off+n > len(b) {
			return 0, errTruncated
		}
		var v uint64
		switch n {
		case 1:
			v = uint64(b[off])
		case 2:
			v = uint64(binary.BigEndian.Uint16(b[off:]))
		case 4:
			v = uint64(binary.BigEndian.Uint32(b[off:]))
		}
		off += n
		if v > uint64(len(b)-off) {
			return 0, fmt.Errorf("msgpack header at byte %d claims %d, past the payload's end", off-n-1, v)
		}
		return int(v), nil
	}
	skip := func(n int) (int, error) {
		if n > len(b)-off {
			return 0, errTruncated
		}
		return off + n, nil
	}
	items := func(n int) (int, error) {
		if n > len(b)-off { // every item takes at least a byte
			return 0, fmt.Errorf("msgpack container at byte %d claims %d items, past the payload's end", off-1, n)
		}
		var err error
		for range n {
			if off, err = skipValue(b, off, depth+1); err != nil {
				return 0, err
			}
		}
		return off, nil
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return off, nil
	case c <= 0x8f:
		return items(2 * int(c&0x0f))
	case c <= 0x9f:
		return items(int(c & 0x0f))
	case c <= 0xbf:
		return skip(int(c & 0x1f))
	}
	switch c {
	case 0xc4, 0xd9:
		n, err := size(1)
		if err != nil {
			return 0, err
		}
		return skip(n)
	case 0xc5, 0xda:
		n, err := size(2)
		if err != nil {
			return 0, err
		}
		return skip(n)
	case 0xc6, 0xdb:
		n, err := size(4)
		if err != nil {
			return 0, err
		}
		return skip(n)
	case 0xc7, 0xc8, 0xc9: // ext: length, type byte, data
		n, err := size(map[byte]int{0xc7: 1, 0xc8: 2, 0xc9: 4}[c])
		if err != nil {
			return 0, err
		}
		return skip(n + 1)
	case 0xca, 0xce, 0xd2:
		return skip(4)
	case 0xcb, 0xcf, 0xd3:
		return skip(8)
	case 0xcc, 0xd0:
		return skip(1)
	case 0xcd, 0xd1:
		return skip(2)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext: type byte and 1, 2, 4, 8 or 16 bytes
		return skip(1 + 1<<(c-0xd4))
	case 0xdc, 0xdd, 0xde, 0xdf:
		w := 2
		if c == 0xdd || c == 0xdf {
			w = 4
		}
		if off+w > len(b) {
			return 0, errTruncated
		}
		var n uint64
		if w == 2 {
			n = uint64(binary.BigEndian.Uint16(b[off:]))
		} else {
			n = uint64(binary.BigEndian.Uint32(b[off:]))
		}
		off += w
		if c >= 0xde {
			n *= 2
		}
		if n > uint64(len(b)-off) {
			return 0, fmt.Errorf("msgpack container at byte %d claims %d items, past the payload's end", off-w-1, n)
		}
		return items(int(n))
	}
	return 0, fmt.Errorf("byte 0x%02x at %d is no msgpack value", c, off-1)
}
