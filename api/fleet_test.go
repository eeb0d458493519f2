package api

import (
	"strings"
	"testing"
)

// FuzzNodeOfID: a fleet gateway routes every request by the node an id
// names (NodeOfID), and the id comes from the client's URL or Host. An id
// names a node only when it is NodeIDLen+IDRandLen characters of
// IDAlphabet, and the node is then its first NodeIDLen characters; any
// other string names none, whatever bytes it holds.
func FuzzNodeOfID(f *testing.F) {
	for _, s := range []string{"", "n2aabcdefghijkl", "abcdefghijkl", "n2a", "N2Aabcdefghijkl", "n2aabcdefghijk1",
		"n2aabcdefghijklm", "n2a/../bcdefghi", "n2aabcdefghij\xff", "ééééééé0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		inAlphabet := id != ""
		for _, c := range []byte(id) {
			if strings.IndexByte(IDAlphabet, c) < 0 {
				inAlphabet = false
			}
		}
		if got := InIDAlphabet(id); got != inAlphabet {
			t.Fatalf("InIDAlphabet(%q) = %v, want %v", id, got, inAlphabet)
		}
		node, ok := NodeOfID(id)
		want := inAlphabet && len(id) == NodeIDLen+IDRandLen
		if ok != want {
			t.Fatalf("NodeOfID(%q) ok = %v, want %v", id, ok, want)
		}
		if ok && (node != id[:NodeIDLen] || !InIDAlphabet(node)) {
			t.Fatalf("NodeOfID(%q) = %q", id, node)
		}
		if !ok && node != "" {
			t.Fatalf("NodeOfID(%q) named %q without ok", id, node)
		}
	})
}
