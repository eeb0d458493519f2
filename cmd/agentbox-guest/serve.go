package main

// `agentbox-guest serve`: the guest agent of tiers whose runtime builds the
// sandbox's root itself (gvisor: runsc mounts the root, /proc, /dev and
// applies its own hardening). It skips boot.Prepare and harden, reads the
// boot spec from the environment and listens on a unix socket path the
// driver chose (a host directory bind-mounted into the sandbox), then
// serves the same guest.Server as `init`.

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/guest/harden"
	"github.com/agentbox/agentbox/internal/version"
)

// Environment of `serve` (set by the driver, cleared before serving).
const (
	serveSpecEnv   = "AGENTBOX_BOOT_SPEC"  // the api.BootSpec as JSON
	serveSocketEnv = "AGENTBOX_GUEST_PATH" // where to listen
)

func runServe() error {
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
	var spec api.BootSpec
	if err := json.Unmarshal([]byte(os.Getenv(serveSpecEnv)), &spec); err != nil {
		return fmt.Errorf("%s: %v (the driver passes the boot spec)", serveSpecEnv, err)
	}
	sock := os.Getenv(serveSocketEnv)
	if sock == "" {
		return fmt.Errorf("%s not set: the driver passes the socket path", serveSocketEnv)
	}
	os.Unsetenv(serveSpecEnv)
	os.Unsetenv(serveSocketEnv)
	// Only the sandbox's root may reach the agent's socket.
	if err := os.Chmod(filepath.Dir(sock), 0o700); err != nil {
		log.Warn("restricting the socket directory", "err", err)
	}
	pidsMax, _ := strconv.ParseInt(os.Getenv(servePidsEnv), 10, 64)
	os.Unsetenv(servePidsEnv)
	cgs, err := sandboxCgroups("/.agentbox/cgroup", pidsMax)
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
		Logger:  log.With("sandbox", spec.SandboxID),
		Version: version.Version,
	})
	// The channel closes for a checkpoint and opens again after it
	// (checkpoint.go).
	return serveChannel(srv, sock, log, spec.SandboxID)
}
