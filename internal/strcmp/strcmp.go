// Package strcmp compares strings by address first. The hot paths of the
// engine and the learners compare ids, roles, states, views and actions
// that are usually the very same string handed out again (a game's seats,
// a role's constants, a view's legal list), where a comparison of the
// bytes would be a call to compare them with themselves.
package strcmp

import "unsafe"

// Same reports whether a and b are the same string: the same length and
// the same bytes at the same address. Equal strings elsewhere in memory
// are not the same.
func Same(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// Equal is a == b, without comparing the bytes when a and b are the same
// string.
func Equal(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}
