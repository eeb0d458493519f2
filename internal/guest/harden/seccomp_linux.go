package harden

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// InstallFilter sets no_new_privs and installs prog, the agentbox seccomp
// filter (assembled by the daemon with package filter; DecodeFilter), on
// every thread of the process (SECCOMP_FILTER_FLAG_TSYNC). The filter is
// inherited by every child and cannot be removed. Call it after all
// mounts are done: mount, pivot_root and friends are denied from then
// on, for the agent as well.
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

// InstallEncoded installs filter, a program as EncodeFilter writes it:
// what the daemon assembled once (package filter) and sent in the boot
// spec. The agent does not assemble one itself: the assembler's tables
// (every architecture's syscall names, Docker's profile) cost each
// sandbox's start about 0.25 ms of CPU, so the guest binary links none
// of it.
func InstallEncoded(filter []byte) error {
	if len(filter) == 0 {
		return fmt.Errorf("%w: the boot spec carries no seccomp filter; the daemon assembles it (a daemon older than this guest agent? install both from one build)", errInternal)
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
