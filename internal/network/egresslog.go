package network

import (
	"sync"

	"github.com/agentbox/agentbox/api"
)

// LogSize bounds each sandbox's egress log: past it the oldest entries
// are dropped (and counted).
const LogSize = 1000

// egressLog is one sandbox's egress log, a ring of the last LogSize
// decisions.
type egressLog struct {
	mu      sync.Mutex
	entries []api.EgressLogEntry // ring once full
	next    int                  // where the next entry goes once full
	dropped int64
	counts  *egressCounts // the manager's (egresscount.go)
}

func (l *egressLog) add(e api.EgressLogEntry) {
	l.counts.note(&e)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) < LogSize {
		l.entries = append(l.entries, e)
		return
	}
	l.entries[l.next] = e
	l.next = (l.next + 1) % LogSize
	l.dropped++
}

// snapshot returns the entries oldest first and the dropped count.
func (l *egressLog) snapshot() api.EgressLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]api.EgressLogEntry, 0, len(l.entries))
	out = append(out, l.entries[l.next:]...)
	out = append(out, l.entries[:l.next]...)
	return api.EgressLog{Entries: out, Dropped: l.dropped}
}
