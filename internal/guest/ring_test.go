package guest

import (
	"bytes"
	"testing"
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
