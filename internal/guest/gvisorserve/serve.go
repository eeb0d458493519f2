// Package gvisorserve is `agentbox-guest serve` and `agentbox-guest hook`:
// the guest agent of tiers whose runtime builds the sandbox's root itself
// (gvisor: runsc mounts the root, /proc, /dev and applies its own
// hardening). It skips boot.Prepare, reads the boot spec from the
// environment (proto.ServeSpecEnv) and listens on a unix socket path the
// driver chose (a host directory bind-mounted into the sandbox), mounts
// the sandbox's cgroups in the runtime's own cgroupfs (cgroup.go),
// hardens itself (harden.go), then serves the same guest.Server as `init`
// on a channel that a checkpoint closes and a restore opens again
// (checkpoint.go).
package gvisorserve

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/guest/harden"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/version"
)

// Serve is `agentbox-guest serve`: it serves the guest protocol until the
// channel fails. Call it on the main thread, locked to it (the thread
// whose capability sets /proc/PID/status shows); it unlocks it.
func Serve() error {
	// The bounding set, as in `init`: the main thread's here, every other
	// thread's before it forks a sandbox process (guest's reaper), which
	// is all that reaches a child. Per thread, because inside gVisor the
	// all-threads drop (one stop of the world per capability) took 40-100
	// ms of every create; the effective set stays, so the mounts below
	// still work.
	err := harden.DropBoundingSetOnThread()
	runtime.UnlockOSThread()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var spec proto.BootSpec
	if err := json.Unmarshal([]byte(os.Getenv(proto.ServeSpecEnv)), &spec); err != nil {
		return fmt.Errorf("%s: %v (the driver passes the boot spec)", proto.ServeSpecEnv, err)
	}
	sock := os.Getenv(proto.ServeSocketEnv)
	if sock == "" {
		return fmt.Errorf("%s not set: the driver passes the socket path", proto.ServeSocketEnv)
	}
	os.Unsetenv(proto.ServeSpecEnv)
	os.Unsetenv(proto.ServeSocketEnv)
	// Only the sandbox's root may reach the agent's socket.
	if err := os.Chmod(filepath.Dir(sock), 0o700); err != nil {
		log.Warn("restricting the socket directory", "err", err)
	}
	pidsMax, _ := strconv.ParseInt(os.Getenv(proto.ServePidsEnv), 10, 64)
	os.Unsetenv(proto.ServePidsEnv)
	cgs, err := guest.MountOwnCgroups("/.agentbox/cgroup", pidsMax)
	if err != nil {
		// Without them a timeout kills only the exec's process group, and
		// nothing bounds the number of processes: refuse to serve.
		return fmt.Errorf("sandbox cgroups: %w", err)
	}
	if err := hardenServe(filepath.Dir(sock), spec.SeccompFilter); err != nil {
		return fmt.Errorf("hardening: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl dumpable: %w", err)
	}
	srv := guest.NewServer(guest.Config{
		Env:     spec.Env,
		User:    spec.User,
		Workdir: spec.Workdir,
		Cgroups: cgs,
		// gVisor's cgroupfs has no limit to read; its CPU count is at
		// least 2 (drivers/gvisor/view_linux.go).
		CPULimit: spec.CPULimit,
		Logger:   log.With("sandbox", spec.SandboxID),
		Version:  version.Version,
	})
	// The channel closes for a checkpoint and opens again after it
	// (checkpoint.go).
	return serveChannel(srv, sock, log, spec.SandboxID)
}
