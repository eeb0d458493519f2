// Package lifecycle holds the bookkeeping every driver repeats: the exit
// channels of the sandboxes it runs (Exits, behind driver.Driver's Exited)
// and the undo stack of a sandbox half made (Undo), so that a failed
// Create leaves nothing behind, and whether a sandbox is paused in its
// frozen cgroups (Frozen), and which cgroups under the shared parent are
// a start-up cleanup's to remove (RemoveLeftovers).
package lifecycle

import (
	"strings"
	"sync"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/cgroups"
)

// RemoveLeftovers is the start-up cleanup of a tier whose sandboxes'
// cgroups sit under the parent every tier shares: it removes each cgroup
// that is neither in keep nor a waiting init of the container tier
// (driver.PrespawnCgroupPrefix: that tier removes an earlier daemon's
// itself). Removing those too killed the container tier's fresh inits at
// every daemon start.
func RemoveLeftovers(m cgroups.Manager, keep map[string]bool) ([]string, error) {
	return cgroups.RemoveUnless(m, func(n string) bool {
		return keep[n] || strings.HasPrefix(n, driver.PrespawnCgroupPrefix)
	})
}

// Exits maps each sandbox id a driver created or adopted to a channel
// closed when the sandbox's init exits. The zero value is ready to use.
type Exits struct {
	mu sync.Mutex
	by map[string]<-chan struct{}
}

// Set records ch as sandbox id's exit channel (after Create, Adopt or a
// Restore), replacing any earlier one.
func (x *Exits) Set(id string, ch <-chan struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.by == nil {
		x.by = map[string]<-chan struct{}{}
	}
	x.by[id] = ch
}

// Swap records ch as sandbox id's exit channel and returns the one it
// replaces (a standby promoted in place of the running init).
func (x *Exits) Swap(id string, ch <-chan struct{}) (old <-chan struct{}, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old, ok = x.by[id]
	if x.by == nil {
		x.by = map[string]<-chan struct{}{}
	}
	x.by[id] = ch
	return old, ok
}

// Get returns sandbox id's exit channel, if this driver knows the sandbox.
func (x *Exits) Get(id string) (<-chan struct{}, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ch, ok := x.by[id]
	return ch, ok
}

// Take forgets sandbox id and returns its exit channel (Destroy waits on
// it).
func (x *Exits) Take(id string) (<-chan struct{}, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ch, ok := x.by[id]
	delete(x.by, id)
	return ch, ok
}

// closed is returned for sandboxes this driver does not know.
var closed = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Exited is driver.Driver's Exited: sandbox id's exit channel, or a closed
// one for a sandbox this driver does not run (destroyed, or never
// created or adopted by this process).
func (x *Exits) Exited(id string) <-chan struct{} {
	if ch, ok := x.Get(id); ok {
		return ch
	}
	return closed
}

// Undo is a stack of steps that take back a setup half done: a multi-step
// setup adds the undo of each step as it succeeds and defers Run, which
// runs them last first unless Release was called on success.
//
//	var undo lifecycle.Undo
//	defer undo.Run()
//	if err := mount(...); err != nil {
//		return err
//	}
//	undo.Add(func() { unmount(...) })
//	...
//	undo.Release()
//	return h, nil
type Undo struct {
	steps []func()
}

// Add pushes the undo of a step that succeeded.
func (u *Undo) Add(step func()) { u.steps = append(u.steps, step) }

// Release forgets the steps: the setup succeeded and keeps what it made.
func (u *Undo) Release() { u.steps = nil }

// Run runs the steps not released, last first, once.
func (u *Undo) Run() {
	for i := len(u.steps) - 1; i >= 0; i-- {
		u.steps[i]()
	}
	u.steps = nil
}

// Frozen reports whether sandbox id's cgroup under mgr is frozen (a
// paused sandbox); false when it has none.
func Frozen(mgr cgroups.Manager, id string) bool {
	cg, err := mgr.Open(id)
	if err != nil {
		return false
	}
	f, err := cg.Frozen()
	return err == nil && f
}
