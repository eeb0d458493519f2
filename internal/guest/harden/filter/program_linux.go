package filter

import (
	"errors"
	"fmt"
	"slices"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// errInternal marks a policy this package cannot assemble: a bug, not
// the caller's input.
var errInternal = errors.New("internal error")

// Program returns the filter as classic BPF, ready for seccomp(2).
func Program() ([]syscall.SockFilter, error) { return program(nil) }

// ProgramAllowing is Program with the named syscalls of the always-deny
// list allowed (InstallSeccompAllowing's filter).
func ProgramAllowing(allow ...string) ([]syscall.SockFilter, error) { return program(allow) }

func program(allow []string) ([]syscall.SockFilter, error) {
	b, err := buildPolicy(allow...)
	if err != nil {
		return nil, err
	}
	insts, err := b.libPolicy().Assemble()
	if err != nil {
		return nil, fmt.Errorf("%w: assembling the seccomp policy: %w", errInternal, err)
	}

	// Syscall numbers above the table (added by kernels newer than
	// go-seccomp-bpf knows) fail with ENOSYS, so libc falls back as it
	// would on an older kernel. The library's program reloads what it
	// needs and only jumps forward within itself, so prepending is safe.
	out := []syscall.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // A = nr
		{Code: unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K, Jt: 0, Jf: 1, K: uint32(b.rules.MaxKnownSyscall)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
	}
	for _, in := range insts {
		raw, err := in.Assemble()
		if err != nil {
			return nil, fmt.Errorf("%w: assembling the seccomp policy: %w", errInternal, err)
		}
		out = append(out, syscall.SockFilter{Code: raw.Op, Jt: raw.Jt, Jf: raw.Jf, K: raw.K})
	}
	if len(out) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("%w: seccomp program has %d instructions, over the kernel's %d",
			errInternal, len(out), unix.BPF_MAXINSNS)
	}
	return out, nil
}

// libPolicy expresses the policy in go-seccomp-bpf's terms. Groups are
// evaluated in order and the first match wins.
func (b *built) libPolicy() *seccomp.Policy {
	nosys := seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	p := &seccomp.Policy{
		DefaultAction: seccomp.ActionErrno, // EPERM
		Syscalls: []seccomp.SyscallGroup{
			{Names: b.rules.Denied, Action: seccomp.ActionErrno},
			{Names: b.rules.NoSys, Action: nosys},
			{Names: b.rules.Allowed, Action: seccomp.ActionAllow},
		},
	}
	names := make([]string, 0, len(b.conditional))
	for n := range b.conditional {
		names = append(names, n)
	}
	slices.Sort(names) // deterministic program
	cond := seccomp.SyscallGroup{Action: seccomp.ActionAllow}
	for _, n := range names {
		for _, alt := range b.conditional[n] {
			var ac seccomp.ArgumentConditions
			for _, c := range alt {
				ac = append(ac, seccomp.Condition{Argument: c.arg, Operation: seccomp.Operation(c.op), Value: c.value})
			}
			cond.NamesWithCondtions = append(cond.NamesWithCondtions, seccomp.NameWithConditions{Name: n, Conditions: ac})
		}
	}
	p.Syscalls = append(p.Syscalls, cond)
	return p
}
