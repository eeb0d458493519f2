package proto

// The boot protocol: how a driver hands the agent it starts its sandbox.
// Private to the daemon and the agent of the same build (the agent is
// started from the daemon's own guest binary), so it is not versioned.

import "github.com/agentbox/agentbox/api"

// The boot channel. The container driver starts `agentbox-guest init` with
// fd 3 one end of a unix stream socket pair, possibly long before it knows
// which sandbox the process will become (pre-spawned inits, docs/
// PERFORMANCE.md). When it does, it sends one message and closes its end:
// a BootSpec as JSON, with SCM_RIGHTS on its first byte carrying, in this
// order, the guest's listening socket, the sandbox's log file (the agent's
// new stdout and stderr), then for each entry of BootSpec.Cgroups its
// workload and home directories. BootFiles counts the files before the
// cgroup directories.
//
// Before that, once its bounding set is empty and its /proc, /dev and /sys
// are staged, the init writes one byte, BootReady, on the channel: only
// then does the driver count it as waiting, and the driver reads that byte
// before it sends a spec (closing a socket with unread data would reset
// the init's end).
const (
	BootChannelFD = 3
	BootFiles     = 2
	BootReady     = byte('R')
	// BootExeFD is the guest binary, opened by the daemon: the init is
	// executed as /proc/self/fd/BootExeFD, not by its host path, and
	// closes it first thing. A path resolved in the init's new mount
	// namespace would make its executable a file of that namespace's
	// copy of the host's mount table, and a process's executable pins
	// its mount: the copy, detached at the pivot but held whole (its
	// mounts are locked to each other), would live as long as the
	// sandbox: about 3 MiB of kernel memory per sandbox with 4,000 live,
	// growing with the host's mount table (docs/PERFORMANCE.md, "Cost
	// curves").
	BootExeFD = 4
	// BootViewFD is the first of the init's uid range's views
	// (internal/idrange): detached mounts, one per storage root, which
	// the init attaches at the paths BootViewsEnv lists, in its own mount
	// namespace, before it waits. The views are in no other mount
	// namespace: the host's table does not grow with the ranges in use.
	BootViewFD = 5
)

// The environment of `agentbox-guest init` (container tier), set by the
// driver and cleared by the agent before it serves.
const (
	// BootStageEnv gives the init an empty host directory, the same for
	// every init, on which it mounts, in its own mount namespace and
	// before it has a sandbox, a tmpfs holding the sandbox's /proc, /dev
	// and /sys, to be moved into the root once it has one.
	BootStageEnv = "AGENTBOX_STAGE_DIR"
	// BootLxcfsEnv gives the init the mounted LXCFS whose proc files it
	// binds over its sandbox's /proc (docs/sandbox-view.md); unset for
	// none.
	BootLxcfsEnv = "AGENTBOX_LXCFS_DIR"
	// BootViewsEnv lists, one a line, where the init attaches the views
	// it was given from BootViewFD on; unset for none (the canonical
	// range).
	BootViewsEnv = "AGENTBOX_VIEWS"
)

// The environment of `agentbox-guest serve` (gvisor tier: runsc builds the
// root), set by the driver in the OCI spec and cleared by the agent before
// it serves. runsc gives the same environment to the checkpoint hook
// (`agentbox-guest hook`) after a restore, which is how a restored
// sandbox learns its identity.
const (
	// ServeSpecEnv holds the BootSpec as JSON.
	ServeSpecEnv = "AGENTBOX_BOOT_SPEC"
	// ServeSocketEnv is the unix socket path the agent listens on (in a
	// host directory bind-mounted into the sandbox).
	ServeSocketEnv = "AGENTBOX_GUEST_PATH"
	// ServePidsEnv is the sandbox's pids limit.
	ServePidsEnv = "AGENTBOX_PIDS_MAX"
)

// BootSpec is what a driver hands the guest agent when it gives it its
// sandbox: on the boot channel for `init` (how to build the sandbox's
// root before serving; paths are host paths, seen before pivot_root), in
// ServeSpecEnv for `serve` (where only the identity, env, user, workdir and
// seccomp filter are used).
type BootSpec struct {
	SandboxID string `json:"sandbox_id"`
	Hostname  string `json:"hostname"`
	// Overlay: the template's layers (lowest last, as overlayfs wants) plus
	// the sandbox's private writable layer.
	LowerDirs []string `json:"lower_dirs"`
	UpperDir  string   `json:"upper_dir"`
	WorkDir   string   `json:"work_dir"`
	// Rootfs is an empty directory where the overlay is mounted.
	Rootfs string `json:"rootfs"`
	// Env is the default environment of every process (KEY=VALUE).
	Env []string `json:"env"`
	// User is the default user of exec and files ("root" if empty).
	User string `json:"user,omitempty"`
	// Workdir is the default cwd of exec ("/" if empty, or the user's home).
	Workdir string `json:"workdir,omitempty"`
	// ShmSizeMB and TmpSizeMB size /dev/shm (a tmpfs, counted in the
	// sandbox's memory).
	ShmSizeMB int64 `json:"shm_size_mb"`
	// Cgroups describe the directories, passed with the spec, of the
	// sandbox's own cgroups (one per v1 hierarchy the guest uses, "pids"
	// and "freezer", or the one v2 directory with Controller ""). They are
	// delegated to the sandbox's root, so the guest can put each exec in a
	// child cgroup and a timeout kills the whole tree, double forks
	// included. Empty means: fall back to process groups.
	Cgroups []BootCgroup `json:"cgroups,omitempty"`
	// Seccomp turns on the seccomp filter (always, outside tests).
	Seccomp bool `json:"seccomp"`
	// SeccompFilter is the filter as classic BPF (struct sock_filter, 8
	// bytes each, host byte order), assembled once by the daemon
	// (harden.Program) rather than at every boot; empty: the guest
	// assembles it itself.
	SeccompFilter []byte `json:"seccomp_filter,omitempty"`
	// ResolvConf, when set, is written to the sandbox's /etc/resolv.conf
	// (as root, mode 0644, following a symlink inside the root) once the
	// root is ready, before the guest serves: the resolver of a sandbox
	// with egress. A failure is logged, not fatal.
	ResolvConf string `json:"resolv_conf,omitempty"`
	// UserLimits are the per-user kernel counts of the sandbox's
	// processes (nil, or fields 0: api.DefaultUserLimits); the container
	// tier's init and the microvm's agent apply them
	// (boot.LimitUserNS), the gvisor driver passes the rlimits in the OCI
	// spec.
	UserLimits *api.UserLimits `json:"user_limits,omitempty"`
	// DiskQuota is the sysfs directory of the writable layer's btrfs
	// quota group (/sys/fs/btrfs/FSID/qgroups/0_ID), a host path the
	// container tier's init opens before pivot_root: the limit and usage
	// its statfs view of the root answers from (internal/guest/sysview).
	// Empty: statfs of the root is the kernel's (the pool's figures).
	DiskQuota string `json:"disk_quota,omitempty"`
	// CPULimit is ceil of the sandbox's CPU limit, for an agent that cannot
	// read it from a cgroup of its own and whose limit does not change
	// (the gvisor tier): every exec's environment then says it as
	// OMP_NUM_THREADS when its kernel shows more CPUs (gVisor shows at
	// least 2). 0: none, or read from the cgroup.
	CPULimit int `json:"cpu_limit,omitempty"`
}

// BootCgroup is one hierarchy's pair of cgroup directories passed with the
// spec: the workload's (execs go into a child of it, or into it when
// NoChild) and the agent's own, above it.
type BootCgroup struct {
	Controller string `json:"controller"`
	NoChild    bool   `json:"no_child,omitempty"`
}

// The microvm tier (drivers/microvm): the guest kernel starts the agent as
// the initramfs's /init with the argument VMMode. The agent's channel is
// the virtio-serial port named VMPort, a single byte stream on which the
// host opens one stream per connection with a multiplexer (yamux). Each
// time the host connects to the port (at create, again after a daemon
// restart, after a restore) it first writes one line, VMHelloPrefix and
// a VMHello as JSON; the agent answers VMAckFor(hello.Nonce), and then
// the host starts the multiplexer's client and the agent the server.
//
// The port outlives the host's connections, so the stream can hold
// another connection's bytes on either side, and the handshake is made
// to be right whatever comes first:
//
//   - An agent that has not yet seen the old host go (a quick reconnect;
//     a VM restored from a saved state, whose old session runs on until
//     virtio-serial tells it its host is gone) may read the new hello as
//     the old session's data; its session then fails and it waits for a
//     hello again. Leftovers of that hello or of the old session's frames
//     may come before the next hello, on its line even: the agent skips
//     them and takes a hello wherever VMHelloPrefix starts one.
//   - The host, which got no ack, connects once more with a new nonce;
//     an agent slow to answer may by then have acked the older hello, and
//     a guest's write made while no host is connected waits and reaches
//     the next connection. So each ack names its hello, and the host
//     skips whatever comes before the ack for its own: an old session's
//     last frames, and acks of hellos that it gave up on (the session
//     such an ack starts reads the newer hello as frames and fails, so
//     the newer hello goes unacked and is said again).
const (
	VMHelloPrefix = "agentbox-vm-hello "
	VMMode        = "vm"
	VMPort        = "agent"
	// VMLowersArg is the kernel argument giving the number of read-only
	// layer disks (serial "agentbox-l<i>", topmost first); the writable
	// disk's serial is VMUpperSerial. 0 (a trial boot) serves from the
	// initramfs.
	VMLowersArg   = "agentbox.lowers"
	VMUpperSerial = "agentbox-rw"
)

// VMAckFor is the agent's answer to the hello with this nonce.
func VMAckFor(nonce string) string { return "\nagentbox-vm-ack " + nonce + "\n" }

// VMHello is the line that starts each host connection to a microvm
// sandbox's agent: the first one carries the sandbox (its boot spec and
// pids limit), later ones (a restarted daemon re-adopting it) nothing,
// except the first hello to a VM restored from a checkpoint (a snapshot
// with memory, a fork, a resume from disk): it carries the restored
// sandbox's hostname, env, pids limit and network, which the agent
// takes.
type VMHello struct {
	// Nonce names this hello (a fresh random one for each connection
	// the host makes); the agent's ack repeats it.
	Nonce string    `json:"nonce"`
	Boot  *BootSpec `json:"boot,omitempty"`
	Pids  int64     `json:"pids,omitempty"`
	// Net configures the VM's one network interface (a sandbox with
	// egress); nil: loopback only.
	Net *VMNet `json:"net,omitempty"`
	// Time is the host's wall clock (Unix nanoseconds) as it says hello
	// to a restored VM, whose clock stood still while its state was
	// saved: the agent sets the guest's clock to it. 0: left alone.
	Time int64 `json:"time,omitempty"`
}

// VMNet is the address of a microvm's interface: the sandbox's veth end's
// address, which the host side hands over (its packets are redirected to
// and from the VM's tap).
type VMNet struct {
	Address string `json:"address"` // CIDR, e.g. 10.200.0.2/30
	Gateway string `json:"gateway"`
	MTU     int    `json:"mtu,omitempty"`
	// MAC is the veth end's MAC, which the VM's interface takes (frames
	// the host side sends are addressed to it). A VM restored from
	// another's state has that VM's MAC until its hello gives it this.
	MAC string `json:"mac,omitempty"`
}
