package guest

import (
	"bytes"
	"testing"
	"time"
)

func TestRing(t *testing.T) {
	tests := []struct {
		name        string
		size        int
		writes      []string
		off         int64
		max         int
		want        string
		wantNext    int64
		wantDropped int64
	}{
		{"empty", 4, nil, 0, 0, "", 0, 0},
		{"growing", 8, []string{"abc", "de"}, 0, 0, "abcde", 5, 0},
		{"from middle", 8, []string{"abc", "de"}, 2, 0, "cde", 5, 0},
		{"wrapped", 4, []string{"abc", "def"}, 0, 0, "cdef", 6, 2},
		{"wrapped tail", 4, []string{"abc", "def"}, 4, 0, "ef", 6, 0},
		{"write bigger than ring", 4, []string{"a", "0123456789"}, 0, 0, "6789", 11, 7},
		{"max", 8, []string{"abcdef"}, 1, 2, "bc", 3, 0},
		{"wrapped max across the seam", 4, []string{"abcdef", "gh"}, 5, 0, "fgh", 8, 0},
		{"past end", 4, []string{"ab"}, 9, 0, "", 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(tt.size)
			for _, w := range tt.writes {
				r.write([]byte(w))
			}
			got, next, dropped, _, _ := r.readFrom(tt.off, tt.max)
			if string(got) != tt.want || next != tt.wantNext || dropped != tt.wantDropped {
				t.Errorf("readFrom(%d) = %q, next %d, dropped %d; want %q, %d, %d", tt.off, got, next, dropped, tt.want, tt.wantNext, tt.wantDropped)
			}
		})
	}
}

// TestRingStream checks that reading on from each returned offset yields
// every byte exactly once while nothing is dropped.
func TestRingStream(t *testing.T) {
	r := newRing(16)
	var want, got bytes.Buffer
	var off int64
	for i := range 200 {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, i%7+1)
		r.write(p)
		want.Write(p)
		data, next, dropped, _, _ := r.readFrom(off, 5)
		if dropped != 0 {
			t.Fatalf("dropped %d at %d", dropped, off)
		}
		got.Write(data)
		off = next
		for off < r.offset() {
			data, off, _, _, _ = r.readFrom(off, 5)
			got.Write(data)
		}
	}
	r.close()
	if _, _, _, eof, _ := r.readFrom(off, 0); !eof {
		t.Error("no eof after close")
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("streamed %q, want %q", got.Bytes(), want.Bytes())
	}
}

// fakeClock returns a ring clock that steps 1 s per call from a fixed
// start, and the start.
func fakeClock() (func() time.Time, time.Time) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	n := 0
	return func() time.Time {
		n++
		return base.Add(time.Duration(n) * time.Second)
	}, base
}

// checkSpans checks that spans cover [from, from+n) exactly, in order,
// with times that never go back.
func checkSpans(t *testing.T, spans []span, from, n int64) {
	t.Helper()
	at := from
	var last time.Time
	for _, s := range spans {
		if s.off != at || s.n <= 0 || s.t.Before(last) {
			t.Fatalf("spans %v do not cover [%d, %d) in order", spans, from, from+n)
		}
		at, last = s.off+s.n, s.t
	}
	if at != from+n {
		t.Fatalf("spans %v end at %d, want %d", spans, at, from+n)
	}
}

func TestRingSpans(t *testing.T) {
	r := newRing(8)
	clock, base := fakeClock()
	r.now = clock
	r.write([]byte("ab"))
	r.write(nil) // no mark
	r.write([]byte("cde"))
	data, next, _, _, _, spans := r.readSpans(1, 0)
	if string(data) != "bcde" || next != 5 {
		t.Fatalf("read %q next %d", data, next)
	}
	want := []span{{1, 1, base.Add(time.Second)}, {2, 3, base.Add(2 * time.Second)}}
	if len(spans) != 2 || spans[0] != want[0] || spans[1] != want[1] {
		t.Fatalf("spans = %v, want %v", spans, want)
	}
	// Wrapping drops the first write's bytes, then its mark.
	r.write([]byte("fghij")) // ring holds offsets 2..10
	if len(r.marks) != 2 || r.marks[0].off != 2 {
		t.Fatalf("after wrap, marks = %v, want the first one gone", r.marks)
	}
	data, next, dropped, _, _, spans := r.readSpans(0, 0)
	if string(data) != "cdefghij" || dropped != 2 {
		t.Fatalf("read %q dropped %d", data, dropped)
	}
	checkSpans(t, spans, next-int64(len(data)), int64(len(data)))
	// A write larger than the ring keeps one mark, cut to what is held.
	r.write([]byte("0123456789"))
	if len(r.marks) != 1 {
		t.Fatalf("after an oversize write, marks = %v, want one", r.marks)
	}
	data, next, _, _, _, spans = r.readSpans(0, 3)
	if string(data) != "234" || len(spans) != 1 || spans[0].off != 12 || spans[0].n != 3 {
		t.Fatalf("read %q next %d spans %v", data, next, spans)
	}
}

// TestRingMarksBounded writes many small chunks: the index stays within
// its bound, still covers every byte held, and recent writes keep their
// own times.
func TestRingMarksBounded(t *testing.T) {
	r := newRing(1 << 20)
	clock, _ := fakeClock()
	r.now = clock
	const writes = 20000
	for range writes {
		r.write([]byte("x\n"))
	}
	if len(r.marks) > r.maxMarks || r.maxMarks != 4096 {
		t.Fatalf("%d marks, bound %d (want 4096)", len(r.marks), r.maxMarks)
	}
	data, next, _, _, _, spans := r.readSpans(0, 0)
	if len(data) != 2*writes {
		t.Fatalf("read %d bytes", len(data))
	}
	checkSpans(t, spans, next-int64(len(data)), int64(len(data)))
	last := spans[len(spans)-1]
	if last.n != 2 || len(spans) < r.maxMarks/2 {
		t.Errorf("last span %v, %d spans: recent writes lost their own marks", last, len(spans))
	}
	// Once the ring wraps, marks of dropped bytes go.
	small := newRing(256)
	small.now, small.maxMarks = clock, 1000 // only eviction bounds it
	for range 10000 {
		small.write([]byte("y\n"))
	}
	if len(small.marks) > 128 {
		t.Errorf("%d marks for 256 bytes of 2-byte writes", len(small.marks))
	}
	data, next, _, _, _, spans = small.readSpans(0, 0)
	checkSpans(t, spans, next-int64(len(data)), int64(len(data)))
}
