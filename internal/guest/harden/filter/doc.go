// Package filter assembles the sandbox's seccomp filter: Docker's
// default profile as it applies to a process with no capabilities, plus
// agentbox's always-deny list and its own socket and clone rules
// (docs/seccomp.md). The drivers assemble it once (Program,
// ProgramAllowing) and send it in the boot spec; the guest agent installs
// it with harden.InstallEncoded and links none of this package, whose
// tables (every architecture's syscall names, Docker's profile) would
// cost every sandbox's start their initialisation.
package filter
