package guest

import "sync"

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
	// changed is closed (and replaced) on every write and at close, so
	// that any number of waiters wake up.
	changed chan struct{}
}

func newRing(size int) *ring {
	return &ring{size: size, changed: make(chan struct{})}
}

// write appends p, dropping the oldest bytes past size. While the buffer
// is shorter than size it holds offsets [0, end) in order; once anything
// would wrap it becomes size bytes where offset o sits at o % size.
func (r *ring) write(p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
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
