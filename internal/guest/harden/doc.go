// Package harden drops the guest agent's privileges before it runs user
// code: no_new_privs, an empty capability bounding/ambient/inheritable set
// for everything it execs, and a seccomp-bpf filter derived from Docker's
// default profile plus agentbox's always-deny list (see docs/seccomp.md).
//
// The guest agent is PID 1 of the sandbox and root of its user namespace.
// It calls:
//
//	harden.DropBoundingSetOnThread() // on its main thread at start, and on
//	                                 // every thread before it forks
//	harden.InstallFilter(prog)       // once the root is set up; irreversible
//
// Capabilities, no_new_privs and seccomp filters are per-thread in Linux,
// and a Go process has several threads long before main runs. Children
// take the sets of the thread that forks them, so emptying the bounding
// set of each forking thread is what reaches every child (the agent's
// other threads never exec). The filter goes to every thread with
// SECCOMP_FILTER_FLAG_TSYNC, which also sets no_new_privs on each;
// NoNewPrivs alone uses syscall.AllThreadsSyscall, which refuses to work
// in a binary linked with cgo, so the agent is built with CGO_ENABLED=0.
package harden
