// Command agentbox-guest is the guest agent: PID 1 of every sandbox. It is
// a static binary (CGO_ENABLED=0) that the daemon starts as
// `agentbox-guest init` in fresh namespaces; it builds the sandbox's root,
// hardens itself and serves the guest protocol (api/guest.go) on the socket
// it inherited.
package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/guest/boot"
	"github.com/agentbox/agentbox/internal/guest/harden"
	"github.com/agentbox/agentbox/internal/version"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "hook" {
		// Run by runsc inside a gvisor sandbox around a checkpoint
		// (checkpoint.go).
		if err := runHook(); err != nil {
			fmt.Fprintf(os.Stderr, "agentbox-guest hook: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) == 2 && os.Args[1] == "launcher" {
		// The daemon's pre-forked launcher, on the host (launcher.go).
		if err := runLauncher(); err != nil {
			fmt.Fprintf(os.Stderr, "agentbox-guest launcher: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 2 || (os.Args[1] != "init" && os.Args[1] != "serve") {
		fmt.Fprintln(os.Stderr, "agentbox-guest is started by the agentbox daemon as `agentbox-guest init` (or `serve`); it is not meant to be run by hand")
		os.Exit(2)
	}
	runMode := run
	if os.Args[1] == "serve" {
		runMode = runServe
	}
	if err := runMode(); err != nil {
		fmt.Fprintf(os.Stderr, "agentbox-guest: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	bootPipe := os.NewFile(3, "boot")
	spec, err := boot.ReadSpec(bootPipe)
	if err != nil {
		return err
	}
	bootPipe.Close()
	fdNum, err := strconv.Atoi(os.Getenv(api.GuestSocketEnv))
	if err != nil {
		return fmt.Errorf("%s not set: the daemon passes the guest socket", api.GuestSocketEnv)
	}
	lnFile := os.NewFile(uintptr(fdNum), "guest.sock")
	ln, err := net.FileListener(lnFile)
	if err != nil {
		return fmt.Errorf("guest socket: %w", err)
	}
	lnFile.Close()
	os.Unsetenv(api.GuestSocketEnv)

	prep, err := boot.Prepare(spec)
	if err != nil {
		return err
	}
	// Nothing of ours is readable or traceable from the sandbox's processes.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl dumpable: %w", err)
	}
	if err := harden.NoNewPrivs(); err != nil {
		return err
	}
	if err := harden.DropBoundingSet(); err != nil {
		return err
	}
	if spec.Seccomp {
		if err := harden.InstallSeccomp(); err != nil {
			return err
		}
	}
	var cgs []guest.CgroupDir
	for _, c := range prep.CgroupFDs {
		cgs = append(cgs, guest.CgroupDir{FD: c.FD, HomeFD: c.HomeFD, V2: c.Controller == "", Freezer: c.Controller == "freezer", NoChild: c.NoChild})
	}
	srv := guest.NewServer(guest.Config{
		Env:     spec.Env,
		User:    spec.User,
		Workdir: spec.Workdir,
		Cgroups: cgs,
		Logger:  log.With("sandbox", spec.SandboxID),
		Version: version.Version,
	})
	return srv.Serve(ln)
}
