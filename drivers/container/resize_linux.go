package container

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/cgroups"
)

// SetLimits implements driver.Resizer: the sandbox's cgroup gets the CPU
// and the new memory and pids plus the agent's reserve, its workload
// exactly the new memory and pids. Going down, the workload shrinks
// first; going up, the parent grows first, so the workload's limits never
// exceed its parent's.
func (d *Driver) SetLimits(ctx context.Context, h *driver.Handle, cpu float64, memoryMB, pids int64) error {
	cg, err := d.cg.Open(h.ID)
	if err != nil {
		return err
	}
	sub, err := cgroups.New(d.opts.CgroupParent + "/" + h.ID)
	if err != nil {
		return fmt.Errorf("sandbox %s: cgroups: %w", h.ID, err)
	}
	work, err := sub.Open("workload")
	if err != nil {
		return fmt.Errorf("sandbox %s: workload cgroup: %w", h.ID, err)
	}
	parent := cgroups.Resources{CPU: cpu, MemoryBytes: memoryMB<<20 + agentReserveMemory, Pids: pids + agentReservePids}
	child := cgroups.Resources{MemoryBytes: memoryMB << 20, Pids: pids}
	// Whichever order, one of the two steps may briefly narrow the gap
	// between them; the other order covers the opposite direction.
	if err := work.Set(child); err == nil {
		if err := cg.Set(parent); err != nil {
			return fmt.Errorf("sandbox %s: setting limits: %w", h.ID, err)
		}
		return nil
	}
	if err := cg.Set(parent); err != nil {
		return fmt.Errorf("sandbox %s: setting limits: %w", h.ID, err)
	}
	if err := work.Set(child); err != nil {
		return fmt.Errorf("sandbox %s: setting workload limits: %w", h.ID, err)
	}
	return nil
}
