package gvisorserve

import (
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/guest/harden"
)

// channelUID owns the guest channel's directory inside a `serve` sandbox.
// No exec runs as it (templates' users are below it; nobody is 65534),
// and after hardenServe no process but the agent has the capabilities to
// get past its permissions or to become it.
const channelUID = 65535

// hardenServe is the `serve` agent's own hardening inside the runtime's
// kernel, on top of the runtime's (gVisor confines its Sentry on the host
// with seccomp, namespaces and no_new_privs), so that sandbox processes
// meet the same rules as on the container tier:
//
//   - the channel's directory (sockDir, a host directory bind-mounted in)
//     belongs to channelUID with mode 0700: sandbox processes, root
//     included, cannot list it or connect to the agent's socket. It stays
//     mounted, so the agent (which keeps CAP_DAC_OVERRIDE) can listen
//     there again after a checkpoint;
//   - an empty capability bounding set, inheritable and ambient set on
//     the main thread (Serve) and on every thread before it forks a
//     sandbox process (guest's reaper, harden.DropBoundingSetOnThread):
//     execs start without capabilities, even as root (no CAP_MKNOD,
//     CAP_SYS_CHROOT, CAP_SETUID, CAP_SYS_ADMIN, ...);
//   - the seccomp filter of the container tier (all threads, inherited by
//     every exec): mount, namespaces, bpf, keyctl, io_uring, rare socket
//     families, clock setters and the rest of SECURITY.md's list fail
//     with EPERM inside gVisor's kernel as they do on the host's; only
//     syslog(2) is allowed, which gVisor answers with its own made-up
//     log. filter is that program as the driver assembled it
//     (proto.BootSpec.SeccompFilter, with syslog allowed).
//
// Call it after every mount the agent makes.
func hardenServe(sockDir string, filter []byte) error {
	if err := os.Chown(sockDir, channelUID, channelUID); err != nil {
		return fmt.Errorf("the channel's directory: %w", err)
	}
	if err := os.Chmod(sockDir, 0o700); err != nil {
		return fmt.Errorf("the channel's directory: %w", err)
	}
	// The driver's filter allows syslog(2): inside gVisor it reads
	// gVisor's own made-up boot log (`dmesg` shows gVisor), never the
	// host's.
	return harden.InstallEncoded(filter)
}
