package guest

import (
	"sync"
	"time"
)

// ring keeps the last size bytes written to one output stream, with
// absolute offsets: offset n is the n-th byte the stream ever carried.
// Readers ask for data from an offset; what fell out of the ring before
// it is reported as dropped. Writers never block on readers: a reader
// that is too slow loses data, and is told so. Memory grows with what
// was written, up to size.
type ring struct {
	// mu guards every field below.
	mu     sync.Mutex
	buf    []byte // grows to size, then wraps
	size   int
	end    int64 // offset after the last byte written
	closed bool  // no more writes: the stream ended
	// marks index the writes still in buf: when each was read from the
	// process, by its first offset, oldest first (see mark).
	marks    []mark
	maxMarks int
	now      func() time.Time // time.Now; tests set it
	// changed is closed (and replaced) on every write and at close, so
	// that any number of waiters wake up.
	changed chan struct{}
}

func newRing(size int) *ring {
	return &ring{size: size, changed: make(chan struct{}), maxMarks: marksFor(size), now: time.Now}
}

// mark says that the bytes from off up to the next mark's off (or the
// ring's end) were read from the process at t (Unix nanoseconds). Marks
// let readers put two streams' output back in the order it was written,
// and stamp it with times.
type mark struct {
	off int64
	t   int64
}

// marksFor bounds a ring's index: one mark per 256 bytes of ring, at
// least 64 and at most 65536 (16 bytes each: 64 KiB for the default
// 1 MiB ring, 1 MiB at most).
func marksFor(size int) int {
	return min(max(size/256, 64), 1<<16)
}

// markLocked records a write of n bytes at r.end. Times never go back
// (the wall clock may). When the index is full, the marks of its older
// half are merged in pairs: old output keeps a time, coarser (the
// earlier of the two), and recent output keeps its own.
func (r *ring) markLocked(n int) {
	if n == 0 {
		return
	}
	t := r.now().UnixNano()
	if k := len(r.marks); k > 0 && r.marks[k-1].t > t {
		t = r.marks[k-1].t
	}
	if len(r.marks) >= r.maxMarks {
		half := len(r.marks) / 2
		j := 0
		for i := 0; i < half; i += 2 {
			r.marks[j] = r.marks[i]
			j++
		}
		j += copy(r.marks[j:], r.marks[half:])
		r.marks = r.marks[:j]
	}
	r.marks = append(r.marks, mark{off: r.end, t: t})
}

// evictLocked forgets the marks whose bytes have all left the ring.
func (r *ring) evictLocked() {
	start := r.end - int64(len(r.buf))
	i := 0
	for i+1 < len(r.marks) && r.marks[i+1].off <= start {
		i++
	}
	if i > 0 {
		r.marks = r.marks[i:]
	}
}

// span is a range of a stream's bytes and when they were written.
type span struct {
	off, n int64
	t      time.Time
}

// spansLocked returns the marks' spans cut to [from, to), oldest first.
func (r *ring) spansLocked(from, to int64) []span {
	var out []span
	for i, m := range r.marks {
		end := r.end
		if i+1 < len(r.marks) {
			end = r.marks[i+1].off
		}
		lo, hi := max(m.off, from), min(end, to)
		if lo < hi {
			out = append(out, span{off: lo, n: hi - lo, t: time.Unix(0, m.t).UTC()})
		}
	}
	return out
}

// write appends p, dropping the oldest bytes past size. While the buffer
// is shorter than size it holds offsets [0, end) in order; once anything
// would wrap it becomes size bytes where offset o sits at o % size.
func (r *ring) write(p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(p) == 0 {
		return
	}
	r.markLocked(len(p))
	defer r.evictLocked()
	if len(r.buf) < r.size {
		if len(r.buf)+len(p) <= r.size {
			r.buf = append(r.buf, p...)
			r.end += int64(len(p))
			r.notifyLocked()
			return
		}
		full := make([]byte, r.size)
		copy(full, r.buf) // offsets below size sit at their own index
		r.buf = full
	}
	if len(p) > r.size {
		r.end += int64(len(p) - r.size)
		p = p[len(p)-r.size:]
	}
	for len(p) > 0 {
		n := copy(r.buf[int(r.end%int64(r.size)):], p)
		p = p[n:]
		r.end += int64(n)
	}
	r.notifyLocked()
}

func (r *ring) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// close marks the stream's end and wakes waiters.
func (r *ring) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// readFrom returns a copy of the data from off to the end, at most max
// bytes (0: all), the offset after it, how many bytes before it were
// dropped from the ring, whether the stream has ended with nothing more
// to read, and a channel that closes on the next change. An offset past
// the end reads from the end.
func (r *ring) readFrom(off int64, max int) (data []byte, next, dropped int64, eof bool, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readFromLocked(off, max)
}

// readSpans is readFrom that also returns when each part of data was
// written: spans that cover data exactly, oldest first.
func (r *ring) readSpans(off int64, max int) (data []byte, next, dropped int64, eof bool, changed <-chan struct{}, spans []span) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, next, dropped, eof, changed = r.readFromLocked(off, max)
	return data, next, dropped, eof, changed, r.spansLocked(next-int64(len(data)), next)
}

func (r *ring) readFromLocked(off int64, max int) (data []byte, next, dropped int64, eof bool, changed <-chan struct{}) {
	start := r.end - int64(len(r.buf))
	if off < start {
		dropped = start - off
		off = start
	}
	if off > r.end {
		off = r.end
	}
	n := int(r.end - off)
	if max > 0 && n > max {
		n = max
	}
	data = make([]byte, n)
	if len(r.buf) > 0 {
		at := int(off) // linear while growing: start is 0
		if len(r.buf) == r.size {
			at = int(off % int64(r.size))
		}
		k := copy(data, r.buf[at:])
		copy(data[k:], r.buf[:n-k])
	}
	next = off + int64(n)
	return data, next, dropped, r.closed && next == r.end, r.changed
}

// offset returns the offset after the last byte written.
func (r *ring) offset() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end
}
