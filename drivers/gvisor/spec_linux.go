package gvisor

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

// In-sandbox paths of what the driver bind-mounts.
const (
	guestPath  = "/.agentbox/agentbox-guest" // the guest agent, read-only
	sockDir    = "/.agentbox/sock"           // host dir <run>/sock, the channel
	guestSock  = sockDir + "/guest.sock"
	defaultEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// The subset of the OCI runtime spec the driver writes.
type (
	ociSpec struct {
		Version  string     `json:"ociVersion"`
		Process  ociProcess `json:"process"`
		Root     ociRoot    `json:"root"`
		Hostname string     `json:"hostname"`
		Mounts   []ociMount `json:"mounts"`
		Linux    ociLinux   `json:"linux"`
	}
	ociProcess struct {
		User            ociUser   `json:"user"`
		Args            []string  `json:"args"`
		Env             []string  `json:"env"`
		Cwd             string    `json:"cwd"`
		Capabilities    ociCaps   `json:"capabilities"`
		Rlimits         []ociRlim `json:"rlimits,omitempty"`
		NoNewPrivileges bool      `json:"noNewPrivileges"`
	}
	ociRlim struct {
		Type string `json:"type"`
		Hard uint64 `json:"hard"`
		Soft uint64 `json:"soft"`
	}
	ociUser struct {
		UID uint32 `json:"uid"`
		GID uint32 `json:"gid"`
	}
	ociCaps struct {
		Bounding  []string `json:"bounding"`
		Effective []string `json:"effective"`
		Permitted []string `json:"permitted"`
	}
	ociRoot struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	}
	ociMount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	ociLinux struct {
		Namespaces  []ociNS    `json:"namespaces"`
		UIDMappings []ociIDMap `json:"uidMappings,omitempty"`
		GIDMappings []ociIDMap `json:"gidMappings,omitempty"`
		CgroupsPath string     `json:"cgroupsPath,omitempty"`
	}
	ociIDMap struct {
		ContainerID uint32 `json:"containerID"`
		HostID      uint32 `json:"hostID"`
		Size        uint32 `json:"size"`
	}
	ociNS struct {
		Type string `json:"type"`
		Path string `json:"path,omitempty"`
	}
)

// guestCaps are the capabilities of the guest agent inside gVisor (they
// are gVisor's, not the host's): it switches users for execs, owns and
// chmods files of any user, and signals processes.
var guestCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP",
	// Only to mount gVisor's cgroup hierarchies; no exec has it (every
	// sandbox process forks from a thread whose bounding set the agent
	// emptied).
	"CAP_SYS_ADMIN",
}

// serveAllow are the syscalls of the always-deny list that the agent's
// seccomp filter allows inside gVisor: syslog(2) reads gVisor's own
// made-up boot log (`dmesg` shows gVisor), never the host's.
var serveAllow = []string{"syslog"}

// shmSizeMB is the size of a sandbox's /dev/shm: half its memory, at
// least 64 MiB.
func shmSizeMB(memoryMB int64) int64 {
	if shm := memoryMB / 2; shm >= 16 {
		return shm
	}
	return 64
}

// writeBundle writes <bundle>/config.json for spec, with rootfs the host
// overlay and the guest agent as the sandbox's first process; filter is
// the agent's seccomp filter (harden.EncodeFilter). shm is /dev/shm's
// size in MiB: shmSizeMB of the sandbox's memory, or, for a restore, the
// checkpointed sandbox's (runsc refuses a restore whose mounts differ).
// The spec's cgroupsPath is the view's cgroup (view_linux.go).
func writeBundle(bundle, rootfs, guestBin, hostSock string, spec *driver.Spec, uidBase, uidCount int, filter []byte, shm int64) error {
	boot := proto.BootSpec{
		SandboxID:     spec.ID,
		Hostname:      spec.Hostname,
		Env:           spec.Env,
		User:          spec.User,
		Workdir:       spec.Workdir,
		Seccomp:       true,
		SeccompFilter: filter,
		CPULimit:      int(math.Ceil(spec.CPU)),
	}
	bootJSON, err := json.Marshal(&boot)
	if err != nil {
		return err
	}
	s := ociSpec{
		Version: "1.0.2",
		Process: ociProcess{
			Args: []string{guestPath, "serve"},
			Env: []string{defaultEnv, proto.ServeSpecEnv + "=" + string(bootJSON), proto.ServeSocketEnv + "=" + guestSock,
				fmt.Sprintf("%s=%d", proto.ServePidsEnv, spec.Pids)},
			Cwd: "/",
			Capabilities: ociCaps{
				Bounding: guestCaps, Effective: guestCaps, Permitted: guestCaps,
			},
			Rlimits:         rlimits(spec),
			NoNewPrivileges: true,
		},
		Root:     ociRoot{Path: rootfs},
		Hostname: spec.Hostname,
		Mounts: []ociMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", fmt.Sprintf("size=%dm", shm)}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: guestPath, Type: "bind", Source: guestBin, Options: []string{"rbind", "ro"}},
			{Destination: sockDir, Type: "bind", Source: hostSock, Options: []string{"rbind", "rw"}},
		},
		Linux: ociLinux{Namespaces: []ociNS{
			{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "network", Path: spec.NetNS}, {Type: "user"},
		},
			// Template files are stored shifted: host uid_base is the
			// sandbox's root, as in the container tier.
			UIDMappings: []ociIDMap{{ContainerID: 0, HostID: uint32(uidBase), Size: uint32(uidCount)}},
			GIDMappings: []ociIDMap{{ContainerID: 0, HostID: uint32(uidBase), Size: uint32(uidCount)}},
			CgroupsPath: viewCgroup,
		},
	}
	b, err := json.MarshalIndent(&s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600)
}

// nprocReserve is the agent's own share of root's RLIMIT_NPROC count (its
// threads count, though its CAP_SYS_ADMIN exempts it from the check).
const nprocReserve = 64

// nprocLimit bounds the tasks of each uid in the sandbox. gVisor's pids
// cgroup does not hold (docs/gvisor.md), but the Sentry enforces
// RLIMIT_NPROC for every task without CAP_SYS_ADMIN or CAP_SYS_RESOURCE,
// which no exec has.
// rlimits are the agent's (and so every exec's): nprocLimit's, and the
// user limits that are rlimits (gVisor keeps its own inotify counts).
func rlimits(spec *driver.Spec) []ociRlim {
	l := api.DefaultUserLimits.Over(spec.UserLimits)
	return append(nprocLimit(spec.Pids),
		ociRlim{Type: "RLIMIT_MSGQUEUE", Hard: uint64(l.MsgqueueBytes), Soft: uint64(l.MsgqueueBytes)},
		ociRlim{Type: "RLIMIT_SIGPENDING", Hard: uint64(l.Sigpending), Soft: uint64(l.Sigpending)})
}

func nprocLimit(pids int64) []ociRlim {
	if pids <= 0 {
		return nil
	}
	n := uint64(pids) + nprocReserve
	return []ociRlim{{Type: "RLIMIT_NPROC", Hard: n, Soft: n}}
}
