package harden

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// InstallSeccomp sets no_new_privs and installs the agentbox seccomp
// filter on every thread of the process (SECCOMP_FILTER_FLAG_TSYNC). The
// filter is inherited by every child and cannot be removed. Call it after
// all mounts are done: mount, pivot_root and friends are denied from then
// on, for the agent as well.
func InstallSeccomp() error { return InstallSeccompAllowing() }

// InstallSeccompAllowing is InstallSeccomp with the named syscalls of the
// always-deny list allowed, for a runtime kernel that answers them itself
// and never passes them to the host's (gVisor's syslog(2) reads gVisor's
// own made-up boot log).
func InstallSeccompAllowing(allow ...string) error {
	prog, err := program(allow)
	if err != nil {
		return err
	}
	return InstallFilter(prog)
}

// InstallFilter is InstallSeccomp with a filter assembled beforehand
// (Program, DecodeFilter), so that a boot does not pay for assembling it.
func InstallFilter(prog []syscall.SockFilter) error {
	if len(prog) == 0 || len(prog) > unix.BPF_MAXINSNS {
		return fmt.Errorf("%w: a seccomp program of %d instructions", errInternal, len(prog))
	}
	// no_new_privs on this thread only: with TSYNC the kernel sets it on
	// every thread it gives the filter to (seccomp_sync_threads), so one
	// stop of the world fewer than an all-threads prctl.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", wrapErrno(err))
	}
	fprog := syscall.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, e := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		return fmt.Errorf("installing the seccomp filter: %w", wrapErrno(e))
	}
	if r != 0 {
		// With TSYNC a positive result is the thread that could not be
		// synchronized (it has a filter of its own that is not ours).
		return fmt.Errorf("%w: installing the seccomp filter: thread %d could not be synchronized",
			errInternal, r)
	}
	return nil
}

// InstallEncoded installs filter, a program as EncodeFilter writes it
// (what a driver assembled once and sent in the boot spec); an empty one
// is assembled here, with the allow list of InstallSeccompAllowing.
func InstallEncoded(filter []byte, allow ...string) error {
	if len(filter) == 0 {
		return InstallSeccompAllowing(allow...)
	}
	prog, err := DecodeFilter(filter)
	if err != nil {
		return err
	}
	return InstallFilter(prog)
}

// EncodeFilter is prog as bytes for proto.BootSpec.SeccompFilter (struct
// sock_filter in host byte order); DecodeFilter reads it back.
func EncodeFilter(prog []syscall.SockFilter) []byte {
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		b = binary.NativeEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b
}

// DecodeFilter parses EncodeFilter's bytes.
func DecodeFilter(b []byte) ([]syscall.SockFilter, error) {
	if len(b) == 0 || len(b)%8 != 0 || len(b)/8 > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("%w: a seccomp filter of %d bytes (want a multiple of 8, at most %d instructions)",
			errInternal, len(b), unix.BPF_MAXINSNS)
	}
	prog := make([]syscall.SockFilter, len(b)/8)
	for i := range prog {
		in := b[8*i:]
		prog[i] = syscall.SockFilter{Code: binary.NativeEndian.Uint16(in), Jt: in[2], Jf: in[3], K: binary.NativeEndian.Uint32(in[4:])}
	}
	return prog, nil
}

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
