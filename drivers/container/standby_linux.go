package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/drivers/internal/guestconn"
)

// Standby inits (driver.Standby): a sandbox's next init, booted next to
// the running one in the same cgroups, so that a reset in place is a kill
// and a switch rather than a stop and a start (docs/state.md).

var _ driver.Standby = (*Driver)(nil)

// standbys maps a prepared standby's pid to the channel closed when it
// exits, until Promote or Discard takes it.
var standbys sync.Map // int -> chan struct{}

// Prepare implements driver.Standby: it spawns an init for spec in the
// running sandbox's cgroups (the agent's and the workload's, as Create
// made them). With uid ranges the init is started for it, in the
// sandbox's own range (its cgroups are delegated to that range's root,
// and the running init keeps serving meanwhile): a standby is prepared
// in the background, so a pre-spawned init, in a range of its own, would
// save the reset nothing.
func (d *Driver) Prepare(ctx context.Context, spec *driver.Spec) (*driver.Handle, error) {
	cg, err := d.cg.Open(spec.ID)
	if err != nil {
		return nil, fmt.Errorf("standby for sandbox %s: %w", spec.ID, err)
	}
	home, work := cg, cg.Sub("workload")
	if d.cg.Version() != 1 {
		home = cg.Sub("agent") // v2: the agent's leaf (makeCgroups)
	}
	var p *initProc
	if d.opts.IDRanges == nil {
		p, err = d.takeInit()
	} else {
		p, err = d.startInitIn(d.ranges.Get(spec.ID), false)
	}
	if err != nil {
		return nil, fmt.Errorf("standby for sandbox %s: %w", spec.ID, err)
	}
	announce(spec, p)
	h, exited, _, err := d.spawn(ctx, spec, p, false, d.controllers(), home.Paths(), work.Paths(), home.AddProc)
	if err != nil {
		return nil, fmt.Errorf("standby for sandbox %s: %w", spec.ID, err)
	}
	standbys.Store(h.Pid, exited)
	return h, nil
}

// Promote implements driver.Standby.
func (d *Driver) Promote(ctx context.Context, cur, next *driver.Handle) (<-chan struct{}, error) {
	v, ok := standbys.LoadAndDelete(next.Pid)
	if !ok {
		return nil, fmt.Errorf("sandbox %s: pid %d is not a prepared standby", next.ID, next.Pid)
	}
	nextExited := v.(chan struct{})
	select {
	case <-nextExited:
		return nil, fmt.Errorf("sandbox %s: the standby init exited%s", next.ID, guestLog(filepath.Dir(next.Socket)))
	default:
	}
	// The old init's exec cgroups, listed before the kill: the standby
	// has made none yet (nothing reached it), so every name here is the
	// old init's to remove once its processes are gone. The standby may
	// serve an exec before that removal; its children's names carry a tag
	// of its own (internal/guest cgroupSet.tag), so none is on this list.
	leftovers := d.execCgroups(cur.ID)
	if cur.Pid > 0 && guestconn.Alive(cur) {
		_ = unix.Kill(cur.Pid, unix.SIGKILL)
	}
	oldExited, ours := d.exits.Swap(cur.ID, nextExited)
	// The old socket goes now, not once the old init is gone: a full
	// reset soon after boots an init on the sandbox's first socket path
	// again, which a late removal would take from it.
	if cur.Socket != "" && cur.Socket != next.Socket {
		_ = os.Remove(cur.Socket)
	}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		if ours {
			<-oldExited
		} else {
			waitGone(context.Background(), cur)
		}
		removeEmptyDirs(leftovers, 5*time.Second)
	}()
	return gone, nil
}

// Discard implements driver.Standby.
func (d *Driver) Discard(ctx context.Context, next *driver.Handle) error {
	v, ok := standbys.LoadAndDelete(next.Pid)
	if !ok {
		return nil
	}
	_ = unix.Kill(next.Pid, unix.SIGKILL)
	select {
	case <-v.(chan struct{}):
	case <-ctx.Done():
		return fmt.Errorf("sandbox %s: waiting for the standby init to exit: %w", next.ID, ctx.Err())
	}
	if next.Socket != "" {
		_ = os.Remove(next.Socket)
	}
	return nil
}

// execCgroups lists the workload's child cgroups (exec-N) of sandbox id
// in every hierarchy, as directory paths.
func (d *Driver) execCgroups(id string) []string {
	cg, err := d.cg.Open(id)
	if err != nil {
		return nil
	}
	var dirs []string
	seen := map[string]bool{}
	for _, p := range cg.Paths() {
		work := filepath.Join(p, "workload")
		if seen[work] {
			continue
		}
		seen[work] = true
		ents, err := os.ReadDir(work)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "exec-") {
				dirs = append(dirs, filepath.Join(work, e.Name()))
			}
		}
	}
	return dirs
}

// removeEmptyDirs removes cgroup directories, retrying while they still
// hold exiting processes (EBUSY), for at most d.
func removeEmptyDirs(dirs []string, d time.Duration) {
	deadline := time.Now().Add(d)
	for _, dir := range dirs {
		for {
			err := unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// killStrays kills every process in sandbox h's agent cgroup other than
// its init: standby inits an earlier daemon process prepared and never
// promoted. Only guest agents live there; the workload is in a child.
func (d *Driver) killStrays(h *driver.Handle) {
	cg, err := d.cg.Open(h.ID)
	if err != nil {
		return
	}
	dir, ok := cg.Paths()["pids"] // v1
	if !ok {
		if dir, ok = cg.Paths()[""]; !ok {
			return
		}
		dir = filepath.Join(dir, "agent") // v2
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid == h.Pid {
			continue
		}
		d.log.Info("killing a standby init left by an earlier daemon", "sandbox", h.ID, "pid", pid)
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}
