package driver

import "context"

// Optional abilities. Every tier implements Driver; what only some tiers
// can do is an optional interface below, and a driver has that ability
// exactly when its type implements the interface: there is no second
// declaration (a flag) that could say otherwise. The service asks with As
// (or Has, for the abilities that are a property, not calls):
//
//	p, ok := driver.As[driver.Pauser](drv)
//	if !ok {
//		return errdefs.Precondition("isolation %s cannot pause sandboxes", drv.Name())
//	}
//	err := p.Pause(ctx, h)
//
// A driver states each of its abilities at compile time
// (var _ driver.Pauser = (*Driver)(nil)), and its conformance test lists
// them (drivertest.Config.Abilities): the suite fails when the driver's
// type has others, or lacks one (a method whose signature drifted), and
// runs one subtest per ability to show that it works.
//
// Adding an ability: its interface here, a row in abilities, an Ability
// name, a subtest in driver/drivertest/abilities_linux.go, and the
// methods on the drivers that have it.

// Pauser: freeze every process of a sandbox and thaw it again. A paused
// sandbox survives a daemon restart paused (Adopt), and Destroy works on
// it.
type Pauser interface {
	Pause(ctx context.Context, h *Handle) error
	Resume(ctx context.Context, h *Handle) error
}

// Checkpointer: save a sandbox's processes and memory and start a sandbox
// from the save (the gvisor tier's runsc checkpoint and restore). It gives
// memory snapshots, pause to disk and fork with memory; a Checkpointer
// must support both a checkpoint that stops the sandbox and one that
// leaves it running.
type Checkpointer interface {
	// Checkpoint saves h's processes and memory into dir (an existing,
	// empty directory). Without opts.LeaveRunning the sandbox stops once
	// saved: the caller then calls Destroy, keeping the writable layer,
	// and Restore starts it again on that layer.
	Checkpoint(ctx context.Context, h *Handle, dir string, opts CheckpointOptions) error
	// Restore starts the sandbox spec describes from the checkpoint in
	// dir, as Create does (same contract: returns once the guest answers,
	// leaves nothing on error). spec's root (layers and upper) must show
	// the files the checkpoint was taken with; its id, hostname, env and
	// limits are its own.
	Restore(ctx context.Context, spec *Spec, dir string) (*Handle, error)
}

// CheckpointChecker is a Checkpointer that can tell whether this host
// restores a checkpoint that was taken elsewhere (a memory snapshot moved
// from another node): what its checkpoints record of the host they were
// taken on (the runsc version; QEMU's accelerator and guest kernel, the
// VM's shape) against this host. The sandbox service asks it when a
// snapshot with memory lands, before it is recorded.
type CheckpointChecker interface {
	// CheckCheckpoint checks the checkpoint in dir; a mismatch is an
	// errdefs.Precondition error that names what differs.
	CheckCheckpoint(dir string) error
}

// CheckpointOptions tune Checkpoint.
type CheckpointOptions struct {
	// LeaveRunning: the sandbox goes on running after the checkpoint.
	LeaveRunning bool
	// Frozen, when set, runs while every process of the sandbox is frozen,
	// right before its memory is saved: the caller captures the writable
	// layer there, so files and memory are of the same instant. An error
	// aborts the checkpoint.
	Frozen func() error
}

// Resizer: change a running sandbox's limits in place; a warm pool uses
// it to serve requests whose limits differ from its sandboxes'.
type Resizer interface {
	// SetLimits gives a running sandbox new CPU (cores), memory (MiB) and
	// pids limits, as Spec has them.
	SetLimits(ctx context.Context, h *Handle, cpu float64, memoryMB, pids int64) error
}

// Standby: boot a sandbox's next init ahead of time, next to the running
// one, and switch to it at once: what makes a reset in place cost a few
// milliseconds instead of a stop and a start. The standby shares the
// sandbox's cgroups (so its limits, and Destroy, cover it) but has fresh
// namespaces and its own writable layer; nothing reaches it before
// Promote.
type Standby interface {
	// Prepare starts a standby init for spec, whose ID is a running
	// sandbox's and whose RunDir is a directory of its own; it returns
	// once the standby answers.
	Prepare(ctx context.Context, spec *Spec) (*Handle, error)
	// Promote makes next the sandbox's init: it kills cur (every process
	// of its namespaces) and from then on Exited, Pause, Destroy and the
	// rest act on next. gone is closed once cur's init has exited, its
	// mounts with it, so that its writable layer can be removed. cur's
	// socket is removed before Promote returns (an init booted on that
	// path later keeps its own). An error (next died meanwhile) leaves cur
	// running.
	Promote(ctx context.Context, cur, next *Handle) (gone <-chan struct{}, err error)
	// Discard kills a standby that will not be promoted and waits for it.
	Discard(ctx context.Context, next *Handle) error
}

// NetNSAtCreate: the sandbox's network is fixed when it starts, so the
// service prepares it before Create (Spec.NetNS, which the driver runs the
// sandbox in) instead of attaching a veth to the running init's
// namespace; a running sandbox cannot gain or lose its interface (egress
// to or from none). Drivers without it start each sandbox in a fresh
// network namespace the service can attach to through Handle.Pid.
type NetNSAtCreate interface {
	// TakesNetNSAtCreate declares the ability; nothing calls it.
	TakesNetNSAtCreate()
}

// StartNotifier: Create (and Standby.Prepare) call Spec.Started with the
// init's pid as soon as its namespaces exist, and write Spec.ResolvConf at
// boot, so that the service wires the network while the guest boots.
type StartNotifier interface {
	// CallsStarted declares the ability; nothing calls it.
	CallsStarted()
}

// Wrapper is a Driver around another one (the service's restore wrapper,
// whose Create is the inner driver's Restore): As looks through it, so
// the wrapped driver's abilities stay visible.
type Wrapper interface {
	Unwrap() Driver
}

// As returns d's ability T (one of the optional interfaces above), looking
// through Wrappers; ok is false when d does not have it.
func As[T any](d Driver) (_ T, ok bool) {
	for d != nil {
		if t, ok := d.(T); ok {
			return t, true
		}
		w, ok := d.(Wrapper)
		if !ok {
			break
		}
		d = w.Unwrap()
	}
	var zero T
	return zero, false
}

// Has reports whether d has ability T.
func Has[T any](d Driver) bool {
	_, ok := As[T](d)
	return ok
}

// Ability names an optional ability, for logs and the conformance suite.
type Ability string

// The abilities, one per optional interface.
const (
	AbilityPause         Ability = "pause"           // Pauser
	AbilityCheckpoint    Ability = "checkpoint"      // Checkpointer
	AbilityResize        Ability = "resize"          // Resizer
	AbilityStandby       Ability = "standby"         // Standby
	AbilityNetNSAtCreate Ability = "netns-at-create" // NetNSAtCreate
	AbilityStartNotifier Ability = "start-notifier"  // StartNotifier
)

// abilities maps each Ability to its interface.
var abilities = []struct {
	name Ability
	has  func(Driver) bool
}{
	{AbilityPause, Has[Pauser]},
	{AbilityCheckpoint, Has[Checkpointer]},
	{AbilityResize, Has[Resizer]},
	{AbilityStandby, Has[Standby]},
	{AbilityNetNSAtCreate, Has[NetNSAtCreate]},
	{AbilityStartNotifier, Has[StartNotifier]},
}

// Abilities lists the optional abilities d has, in a fixed order.
func Abilities(d Driver) []Ability {
	var out []Ability
	for _, a := range abilities {
		if a.has(d) {
			out = append(out, a.name)
		}
	}
	return out
}

// AllAbilities lists every optional ability, in the order Abilities uses.
func AllAbilities() []Ability {
	out := make([]Ability, len(abilities))
	for i, a := range abilities {
		out[i] = a.name
	}
	return out
}
