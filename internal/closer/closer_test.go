package closer

import (
	"io"
	"net"
	"strings"
	"testing"
)

// TestBody: fn runs on Close, and a writable body stays writable.
func TestBody(t *testing.T) {
	n := 0
	b := Body(io.NopCloser(strings.NewReader("x")), func() { n++ })
	if _, ok := b.(io.Writer); ok {
		t.Error("a read-only body became writable")
	}
	if err := b.Close(); err != nil || n != 1 {
		t.Fatalf("Close = %v, fn ran %d times", err, n)
	}
	c1, c2 := net.Pipe()
	defer c2.Close()
	w := Body(c1, func() { n++ })
	if _, ok := w.(io.ReadWriteCloser); !ok {
		t.Fatal("an upgraded connection's body is no longer writable")
	}
	w.Close()
	if n != 2 {
		t.Fatalf("fn ran %d times, want 2", n)
	}
}
