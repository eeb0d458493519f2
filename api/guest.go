package api

// The guest protocol: HTTP/1.1 spoken by the daemon to the guest agent over
// the sandbox's channel (a unix socket for the container tier). The daemon's
// /v1/sandboxes/{id}/<path> routes for exec and files forward to the same
// <path> on the guest, so both speak the same bodies:
//
//	GET    /ping                          -> GuestInfo
//	POST   /exec          ExecRequest     -> ExecResult (buffered)
//	POST   /exec/stream   NDJSON: ExecRequest, then StdinFrame lines
//	                                      -> NDJSON ExecEvent lines
//	GET    /files?path=P                  -> raw bytes of a regular file
//	PUT    /files?path=P[&mode=0644][&user=U]  raw body -> FileInfo
//	                                         (parents are created)
//	DELETE /files?path=P[&recursive=true]
//	GET    /files/stat?path=P             -> FileInfo
//	GET    /files/list?path=P[&depth=1]   -> ListFilesResponse
//	POST   /files/mkdir   MkdirRequest    -> FileInfo (mkdir -p)
//	POST   /files/rename  RenameRequest
//	GET    /files/archive?path=P          -> tar stream of P (file or dir)
//	PUT    /files/archive?path=P[&user=U] tar body, extracted under P
//
// Errors are ErrorBody with the status errdefs gives for the code.
// Every path is resolved by the guest inside the sandbox's own mount
// namespace; magic links (/proc/*/fd, /proc/*/root, ...) are refused.

// GuestInfo is the guest's answer to /ping.
type GuestInfo struct {
	Version string `json:"version"`
	Pid     int    `json:"pid"`
	Uptime  string `json:"uptime"`
}

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
)

// BootStageEnv names the environment variable that gives `agentbox-guest
// init` an empty host directory, the same for every init, on which it
// mounts, in its own mount namespace and before it has a sandbox, a tmpfs
// holding the sandbox's /proc, /dev and /sys, to be moved into the root
// once it has one.
const BootStageEnv = "AGENTBOX_STAGE_DIR"

// BootLxcfsEnv names the environment variable that gives a container-tier
// init the mounted LXCFS whose proc files it binds over its sandbox's
// /proc (docs/sandbox-view.md); unset for none.
const BootLxcfsEnv = "AGENTBOX_LXCFS_DIR"

// BootSpec is what the container driver hands the guest agent on the boot
// channel when it gives an `agentbox-guest init` its sandbox: how to build
// the sandbox's root before serving. Paths are host paths, seen before
// pivot_root.
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
}

// BootCgroup is one hierarchy's pair of cgroup directories passed with the
// spec: the workload's (execs go into a child of it, or into it when
// NoChild) and the agent's own, above it.
type BootCgroup struct {
	Controller string `json:"controller"`
	NoChild    bool   `json:"no_child,omitempty"`
}
