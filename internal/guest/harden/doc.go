// Package harden drops the guest agent's privileges before it runs user
// code: no_new_privs, an empty capability bounding/ambient/inheritable set
// for everything it execs, and a seccomp-bpf filter derived from Docker's
// default profile plus agentbox's always-deny list (see docs/seccomp.md).
//
// The guest agent is PID 1 of the sandbox and root of its user namespace.
// It calls, in this order, once mounts and the root are set up:
//
//	harden.DropBoundingSet() // needs CAP_SETPCAP, so before anything else
//	harden.InstallSeccomp()  // sets no_new_privs first; irreversible
//
// Every step applies to all threads of the process: capabilities,
// no_new_privs and seccomp filters are per-thread in Linux, and a Go
// process has several threads long before main runs. The capability and
// no_new_privs steps use syscall.AllThreadsSyscall, which the Go runtime
// runs on every thread it owns; the seccomp filter uses
// SECCOMP_FILTER_FLAG_TSYNC. AllThreadsSyscall refuses to work in a binary
// linked with cgo (threads it does not know about could keep privileges),
// so the agent must be built with CGO_ENABLED=0, as it is.
package harden
