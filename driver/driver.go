// Package driver defines the isolation tier interface. A driver turns a Spec
// into a running sandbox whose guest agent answers on a channel, and tears
// it down leaving nothing behind. Drivers register by name; the sandbox
// service never type-switches on a concrete driver. What only some tiers
// can do (pause, checkpoint, resize, ...) is an optional interface, found
// with As (abilities.go).
//
// Lifecycle, as the service drives it:
//
//	h, err := d.Create(ctx, spec)   // returns when the guest answers /ping
//	conn, err := d.DialGuest(ctx, h) // as often as needed
//	err = d.Destroy(ctx, h)          // idempotent; kills, unmounts, removes
//
// After a daemon restart the service calls Adopt with each persisted Handle;
// a driver answers errdefs.ErrNotFound when the sandbox did not survive,
// and Cleanup removes whatever belongs to no known sandbox.
//
// A sandbox's processes live in the cgroup Options.CgroupParent/<Spec.ID>
// (its children included), made by the driver: the daemon's usage sampler
// (internal/usage) reads the sandbox's CPU, memory, pids and OOM kills
// there, so there is no stats call in the contract.
//
// Every implementation runs the conformance suite in driver/drivertest
// (drivertest.Suite) against real sandboxes.
package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/idrange"
)

// PrespawnCgroupPrefix begins the names of the cgroups in which the
// container tier's pre-spawned inits wait, below the cgroup parent every
// tier shares: another tier's Cleanup leaves them alone (the container
// driver's own removes those of an earlier daemon).
const PrespawnCgroupPrefix = "init-"

// Spec is everything a driver needs to create one sandbox.
type Spec struct {
	ID       string
	Hostname string
	// Template layers, lowest last. Read-only host directories.
	Layers []string
	// UpperDir and WorkDir are the sandbox's private writable layer,
	// prepared (with its hard disk limit) by storage.
	UpperDir string
	WorkDir  string
	Env      []string // KEY=VALUE, the template's defaults plus the request's
	User     string   // default exec user
	Workdir  string   // default exec cwd
	// Limits. Zero means "no limit" only for Pids; the service fills
	// defaults before calling the driver.
	CPU      float64 // cores
	MemoryMB int64
	Pids     int64
	// DiskMB is the disk limit storage put on the writable layer; a
	// driver whose writable layer is a disk image (microvm) sizes the
	// image by it, so the sandbox sees ENOSPC at its limit. 0: not given.
	DiskMB int64
	// DiskQuota is the sysfs directory of the writable layer's btrfs
	// quota group (storage.QgroupSysfsDir), whose limit and usage the
	// container tier's statfs view of the root answers from; "" when the
	// layer has none.
	DiskQuota string
	// UserLimits are the per-user kernel counts of the sandbox's
	// processes (api.UserLimits, every field filled in); nil: the
	// guest's defaults (api.DefaultUserLimits).
	UserLimits *api.UserLimits `json:",omitempty"`
	// RunDir is a private host directory for the driver (sockets, state);
	// it exists and is removed by the service after Destroy.
	RunDir string
	// NetNS, when set, is the path of a network namespace (a bind mount)
	// the sandbox must run in, its veth, address and routes already in
	// place (egress internet or custom). The service sets it only for
	// drivers that implement NetNSAtCreate; "" means a fresh namespace
	// with only loopback.
	NetNS string
	// Started, when set, is called by drivers that implement
	// StartNotifier, from Create, as soon as the sandbox's init and its namespaces exist and
	// before the init runs anything of the sandbox's (the container
	// driver: first thing, with a pre-spawned init), with the init's host
	// pid: the service wires the sandbox's network into that namespace
	// while the driver goes on and the guest boots. Should that init turn
	// out gone before it is given the sandbox, Started is called again
	// with its replacement's pid; the latest call names the sandbox's
	// init. It must return at once (start work, do not do it); drivers
	// that never call it are fine, the service then connects the network
	// after Create. It is not persisted.
	Started func(pid int) `json:"-"`
	// ResolvConf, when set, is the sandbox's /etc/resolv.conf, which
	// StartNotifiers write at boot, before the guest answers;
	// others ignore it (the service then writes the file after Create).
	ResolvConf string `json:"-"`
}

// Handle identifies a running sandbox to its driver. It is persisted by the
// service, so that a restarted daemon can re-adopt the sandbox.
type Handle struct {
	ID string `json:"id"`
	// Pid is the host pid of the sandbox's first process; PidStart its
	// start time in clock ticks (from /proc/PID/stat), so that a recycled
	// pid is never mistaken for the sandbox.
	Pid      int    `json:"pid"`
	PidStart uint64 `json:"pid_start"`
	// Socket is the guest channel, for tiers that use a unix socket.
	Socket string `json:"socket,omitempty"`
	// UIDBase is the first host uid (and gid) of the sandbox's own range
	// (uid_ranges: each sandbox gets one; internal/idrange); 0 when the
	// sandbox runs in the canonical range, uid_base.
	UIDBase int `json:"uid_base,omitempty"`
	// Accelerator is what runs a virtual machine tier's sandbox ("kvm",
	// or "tcg": QEMU's emulation); empty for tiers on the host's kernel.
	// The API shows it.
	Accelerator string `json:"accelerator,omitempty"`
	// Private holds driver-specific state.
	Private json.RawMessage `json:"private,omitempty"`
}

// Driver is one isolation tier.
type Driver interface {
	// Name is the tier's name in the API ("container", "gvisor").
	Name() string
	// Create starts a sandbox and returns once its guest agent answers.
	// On error nothing is left behind.
	Create(ctx context.Context, spec *Spec) (*Handle, error)
	// DialGuest opens a new connection to the sandbox's guest agent.
	DialGuest(ctx context.Context, h *Handle) (net.Conn, error)
	// Exited returns a channel closed when the sandbox's init exits, for
	// sandboxes created or adopted by this process.
	Exited(h *Handle) <-chan struct{}
	// Destroy stops every process of the sandbox and removes its host
	// resources (cgroups, namespaces, sockets). It is idempotent.
	Destroy(ctx context.Context, h *Handle) error
	// Adopt re-attaches a sandbox created by an earlier daemon process. It
	// returns an error wrapping errdefs.ErrNotFound if the sandbox is gone.
	Adopt(ctx context.Context, h *Handle) error
	// Cleanup removes host resources of sandboxes whose ids are not in
	// keep, and returns what it removed, for the log.
	Cleanup(ctx context.Context, keep map[string]bool) ([]string, error)
}

// Options are the daemon-wide settings a driver is constructed with.
type Options struct {
	// GuestBinary is the host path of the static guest agent.
	GuestBinary string
	// UIDBase and UIDCount: sandbox uid/gid 0..UIDCount-1 map to host
	// UIDBase..UIDBase+UIDCount-1 (template files are stored shifted).
	UIDBase  int
	UIDCount int
	// IDRanges, when set, gives each sandbox a host range of its own,
	// and the id-mapped views of the storage its layers are under
	// (internal/idrange); nil: every sandbox runs in the one range above.
	IDRanges *idrange.Pool
	// CgroupParent is the cgroup (relative to each hierarchy's root) under
	// which sandboxes get their own cgroups, e.g. "agentbox".
	CgroupParent string
	// Seccomp turns the seccomp filter on (always, outside driver tests).
	Seccomp bool
	// RunRoot is the directory holding the service's per-sandbox RunDirs
	// (<RunRoot>/sandboxes/<id>). Cleanup touches host state (mounts) only
	// under it, so that daemons sharing a host never remove each other's.
	// Empty (driver tests): any RunDir that looks like a sandbox's.
	RunRoot string
	// Prespawn is how many sandbox inits a driver that can start them
	// ahead of a create keeps waiting (container tier; 0: none, each
	// create starts its own).
	Prespawn int
	// CacheDir is a directory of this daemon's data where a driver may
	// keep files it derives from templates (the microvm tier's disk
	// images of template layers); "" for a driver's own default.
	CacheDir string
	// LxcfsDir is a mounted LXCFS whose proc files a tier that shares the
	// host's kernel binds over its sandboxes' own (docs/sandbox-view.md);
	// "" for none.
	LxcfsDir string
	Logger   *slog.Logger
}

// Constructor builds a driver from the daemon's options.
type Constructor func(Options) (Driver, error)

var (
	mu       sync.Mutex
	registry = map[string]Constructor{}
)

// Register makes a driver constructor available by name. It panics on a
// duplicate name (a programming error).
func Register(name string, newDriver Constructor) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("driver %q registered twice", name))
	}
	registry[name] = newDriver
}

// Names lists the registered drivers.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	var names []string
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New constructs the named driver.
func New(name string, opts Options) (Driver, error) {
	mu.Lock()
	f, ok := registry[name]
	mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown isolation %q (have %v)", name, Names())
	}
	return f(opts)
}

// Unsupported is implemented by a tier that cannot yet do some of what
// the service offers on the others (the microvm tier's first milestone:
// no network, snapshots, fork, pause or reset). The service asks with
// Refuses before it starts such an operation and answers its error as is,
// so the user reads what the tier lacks instead of a half-done result.
// It is not an ability (abilities.go): those say what a tier can do.
type Unsupported interface {
	Unsupported(op Op) error
}

// ExitReporter is implemented by a tier that can say, in its own words,
// why a sandbox's init ended when nobody asked it to (the gvisor tier:
// a panic in runsc's logs, OOM kills in its cgroup). The service calls
// it before Destroy removes that evidence and puts the answer in its log
// and in the sandbox's error. Like Unsupported, it is a diagnostic, not
// an ability.
type ExitReporter interface {
	// ExitReason is a one-line account of h's end, "" when the tier
	// knows nothing more than that the init exited.
	ExitReason(h *Handle) string
}

// ExitReason asks d (or the driver it wraps) why h's init ended; "" when
// d is no ExitReporter or knows nothing.
func ExitReason(d Driver, h *Handle) string {
	r, ok := As[ExitReporter](d)
	if !ok || h == nil {
		return ""
	}
	return r.ExitReason(h)
}

// Op is an operation a tier may refuse through Unsupported.
type Op string

// The operations the service asks about.
const (
	OpNetwork  Op = "network"  // egress other than none, at create or later
	OpSnapshot Op = "snapshot" // snapshots (with or without memory), creates from one
	// OpFileSnapshot: a snapshot or fork of the files alone (no memory),
	// and a create from a snapshot that does not restore its memory.
	OpFileSnapshot Op = "file-snapshot"
	OpFork         Op = "fork"  // fork, with or without memory
	OpPause        Op = "pause" // pause, and pause to disk
	OpReset        Op = "reset" // reset in place
)

// Refuses returns d's error for op when d (or the driver it wraps) is
// Unsupported and refuses it; nil otherwise.
func Refuses(d Driver, op Op) error {
	u, ok := As[Unsupported](d)
	if !ok {
		return nil
	}
	return u.Unsupported(op)
}
