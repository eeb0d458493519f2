package filter

import (
	"fmt"
	"runtime"
	"slices"

	"github.com/elastic/go-seccomp-bpf/arch"
	moby "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Rules is the seccomp policy in words, for docs and posture checks.
// Order of evaluation: Denied, NoSys, then the allow lists; anything else
// fails with DefaultErrno.
type Rules struct {
	// Allowed syscalls, unconditionally.
	Allowed []string
	// Conditional syscalls: allowed only when the arguments match.
	Conditional map[string]string
	// Denied syscalls fail with EPERM whatever Docker's profile says.
	Denied []string
	// NoSys syscalls fail with ENOSYS, so that libc falls back (clone3
	// to clone, whose flags the filter can inspect).
	NoSys []string
	// DefaultErrno for every syscall this kernel/arch table knows but no
	// rule allows. Syscalls newer than the table (numbers above
	// MaxKnownSyscall) fail with ENOSYS instead, as on an older kernel.
	DefaultErrno    unix.Errno
	MaxKnownSyscall int
}

// alwaysDenied is SECURITY.md's always-deny list. Some entries (adjtimex,
// clock_adjtime) are allowed by Docker's profile; the rest are already
// absent from it and are listed so that a future profile cannot add them.
var alwaysDenied = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"userfaultfd", "keyctl", "add_key", "request_key",
	"bpf", "perf_event_open",
	"kexec_load", "kexec_file_load",
	"open_by_handle_at",
	"mount", "umount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick",
	"open_tree", "open_tree_attr", "move_mount", "mount_setattr",
	"unshare", "setns", "pivot_root",
	"clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64",
	"settimeofday", "stime", "adjtimex",
	"init_module", "finit_module", "delete_module",
	"syslog",
}

// namespaceFlags may not appear in clone's flags. CLONE_NEWTIME shares its
// bit with clone's exit-signal byte (no valid signal sets it) and is
// listed for clone3's sake; clone3 itself is refused.
const namespaceFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
	unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// socketRule is one allowed combination of socket(2) arguments.
type socketRule struct {
	family   uint64
	protocol int64 // -1: any
	desc     string
}

// allowedSockets: the only families a sandbox needs. Everything else
// (AF_ALG, AF_VSOCK, AF_PACKET, AF_RDS, AF_TIPC, AF_KEY, AF_BLUETOOTH,
// AF_CAN, AF_XDP, netlink beyond NETLINK_ROUTE...) fails with EPERM.
var allowedSockets = []socketRule{
	{unix.AF_UNIX, -1, "AF_UNIX"},
	{unix.AF_INET, -1, "AF_INET"},
	{unix.AF_INET6, -1, "AF_INET6"},
	{unix.AF_NETLINK, unix.NETLINK_ROUTE, "AF_NETLINK with NETLINK_ROUTE"},
}

// ownRules are syscalls whose Docker rules we replace with our own.
var ownRules = []string{"socket", "clone", "clone3"}

// Policy returns the seccomp policy for this architecture.
func Policy() (Rules, error) {
	p, err := buildPolicy()
	if err != nil {
		return Rules{}, err
	}
	return p.rules, nil
}

// condition is one argument test, in go-seccomp-bpf's terms.
type condition struct {
	arg   uint32
	op    string // "Equal", "BitsNotSet"
	value uint64
}

// built is the policy in a form ready for the assembler and for Rules.
type built struct {
	info        *arch.Info
	rules       Rules
	conditional map[string][][]condition // name -> OR of ANDs
}

// buildPolicy builds the policy; allow names syscalls of alwaysDenied to
// allow all the same (InstallSeccompAllowing).
func buildPolicy(allow ...string) (*built, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp on %s: %w", runtime.GOARCH, err)
	}
	known := func(name string) bool { _, ok := info.SyscallNames[name]; return ok }
	b := &built{
		info:        info,
		conditional: map[string][][]condition{},
		rules: Rules{
			Conditional:  map[string]string{},
			DefaultErrno: unix.EPERM,
			NoSys:        []string{"clone3"},
		},
	}
	for n := range info.SyscallNumbers {
		b.rules.MaxKnownSyscall = max(b.rules.MaxKnownSyscall, n)
	}
	for _, name := range alwaysDenied {
		if !known(name) {
			continue
		}
		if slices.Contains(allow, name) {
			b.rules.Allowed = append(b.rules.Allowed, name)
			continue
		}
		b.rules.Denied = append(b.rules.Denied, name)
	}
	skip := func(name string) bool {
		return !known(name) || slices.Contains(alwaysDenied, name) || slices.Contains(ownRules, name)
	}

	for _, sc := range moby.DefaultProfile().Syscalls {
		if sc.Action != specs.ActAllow || !applies(sc) {
			continue
		}
		conds, ok := convertArgs(sc.Args)
		if !ok {
			continue // an operator we do not translate: leave it denied
		}
		for _, name := range sc.Names {
			if skip(name) {
				continue
			}
			if conds == nil {
				if !slices.Contains(b.rules.Allowed, name) {
					b.rules.Allowed = append(b.rules.Allowed, name)
				}
				continue
			}
			b.conditional[name] = append(b.conditional[name], conds)
		}
	}
	// Conditional rules for a name that is also allowed outright are moot.
	for name := range b.conditional {
		if slices.Contains(b.rules.Allowed, name) {
			delete(b.conditional, name)
		}
	}
	for name, alts := range b.conditional {
		b.rules.Conditional[name] = describe(alts)
	}

	b.conditional["clone"] = [][]condition{{{arg: 0, op: "BitsNotSet", value: namespaceFlags}}}
	b.rules.Conditional["clone"] = "flags without CLONE_NEWUSER, NEWNS, NEWPID, NEWNET, NEWUTS, NEWIPC, NEWCGROUP, NEWTIME"
	desc := "family "
	for i, s := range allowedSockets {
		c := []condition{{arg: 0, op: "Equal", value: s.family}}
		if s.protocol >= 0 {
			c = append(c, condition{arg: 2, op: "Equal", value: uint64(s.protocol)})
		}
		b.conditional["socket"] = append(b.conditional["socket"], c)
		if i > 0 {
			desc += ", "
		}
		desc += s.desc
	}
	b.rules.Conditional["socket"] = desc
	slices.Sort(b.rules.Allowed)
	return b, nil
}

// applies reports whether a Docker rule applies to a process with no
// capabilities on this architecture and a recent kernel (we need 5.x
// anyway; MinKernel rules in the profile ask for 4.8 at most).
func applies(sc *moby.Syscall) bool {
	if in := sc.Includes; in != nil {
		if len(in.Caps) > 0 {
			return false // only for holders of a capability; we grant none
		}
		if len(in.Arches) > 0 && !slices.Contains(in.Arches, runtime.GOARCH) {
			return false
		}
	}
	if ex := sc.Excludes; ex != nil {
		// Excludes.Caps would exclude holders of the capability: not us.
		if len(ex.Arches) > 0 && slices.Contains(ex.Arches, runtime.GOARCH) {
			return false
		}
	}
	return true
}

// convertArgs translates Docker's argument tests. ok is false for an
// operator we do not translate; nil conditions means unconditional.
func convertArgs(args []specs.LinuxSeccompArg) (conds []condition, ok bool) {
	for _, a := range args {
		switch {
		case a.Op == specs.OpEqualTo:
			conds = append(conds, condition{arg: uint32(a.Index), op: "Equal", value: a.Value})
		case a.Op == specs.OpMaskedEqual && a.ValueTwo == 0:
			conds = append(conds, condition{arg: uint32(a.Index), op: "BitsNotSet", value: a.Value})
		default:
			return nil, false
		}
	}
	return conds, true
}

func describe(alts [][]condition) string {
	s := ""
	for i, alt := range alts {
		if i > 0 {
			s += " or "
		}
		for j, c := range alt {
			if j > 0 {
				s += " and "
			}
			switch c.op {
			case "Equal":
				s += fmt.Sprintf("arg%d == %#x", c.arg, c.value)
			default:
				s += fmt.Sprintf("arg%d & %#x == 0", c.arg, c.value)
			}
		}
	}
	return s
}
