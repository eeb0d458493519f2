// Package containerinit is `agentbox-guest init`: PID 1 of a
// container-tier sandbox. The daemon starts it in fresh namespaces; it
// drops its bounding set, stages the root (internal/guest/boot), waits
// for its boot spec on the boot channel (a pre-spawned init waits there
// before it has a sandbox), builds and enters the sandbox's root, hardens
// itself (no_new_privs, seccomp) and serves the guest protocol
// (internal/guest/proto) on the socket it inherited. The gvisor tier's
// agent is internal/guest/gvisorserve.
package containerinit

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/guest/boot"
	"github.com/agentbox/agentbox/internal/guest/harden"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/guest/sysview"
	"github.com/agentbox/agentbox/internal/version"
)

// Run is `agentbox-guest init`: it boots the sandbox and serves the guest
// protocol until the socket fails. Call it on the main thread, locked to
// it (the thread whose capability sets /proc/PID/status shows); it
// unlocks it.
func Run() error {
	// Executed from this descriptor (proto.BootExeFD), which it needs no
	// more: the executable holds its own reference.
	unix.Close(proto.BootExeFD)
	// Everything before Receive is the same for every sandbox, so the
	// daemon may start this process before it has a sandbox for it (a
	// pre-spawned init) and it waits there, its /proc, /dev and /sys
	// ready. The bounding set: the main thread's here, every other
	// thread's before it forks a sandbox process (guest's reaper), which
	// is all that reaches a child; the effective set stays, so the mounts
	// still work.
	err := harden.DropBoundingSetOnThread()
	runtime.UnlockOSThread()
	if err != nil {
		return err
	}
	stage, lxcfs, views := os.Getenv(proto.BootStageEnv), os.Getenv(proto.BootLxcfsEnv), os.Getenv(proto.BootViewsEnv)
	os.Unsetenv(proto.BootStageEnv)
	os.Unsetenv(proto.BootLxcfsEnv)
	os.Unsetenv(proto.BootViewsEnv)
	if err := boot.Stage(stage, lxcfs); err != nil {
		return err
	}
	// Our uid range's views, attached in our mount namespace only (now
	// private: Stage); the pivot detaches them with the host's tree.
	if views != "" {
		paths := strings.Split(views, "\n")
		var fds []int
		for i := range paths {
			fds = append(fds, proto.BootViewFD+i)
		}
		err := boot.AttachViews(fds, paths)
		for _, fd := range fds {
			unix.Close(fd)
		}
		if err != nil {
			return err
		}
	}
	// Before any sandbox process exists, so that every one inherits it:
	// sysinfo and statfs of the root answered with the sandbox's figures
	// (internal/guest/sysview). Without it (a kernel before 5.7) they are
	// the host's.
	view, viewErr := sysview.Install(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err := boot.Announce(proto.BootChannelFD); err != nil {
		return err
	}
	r, err := boot.Receive(proto.BootChannelFD)
	if err != nil {
		return err
	}
	unix.Close(proto.BootChannelFD)
	var diskErr error
	if view != nil && r.Spec.DiskQuota != "" {
		diskErr = view.OpenDisk(r.Spec.DiskQuota) // a host path: before the pivot
	}
	// From here on our output is the sandbox's log.
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(r.Log, fd, 0); err != nil {
			return fmt.Errorf("the sandbox's log: %w", err)
		}
	}
	unix.Close(r.Log)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	lnFile := os.NewFile(uintptr(r.Listener), "guest.sock")
	ln, err := net.FileListener(lnFile)
	if err != nil {
		return fmt.Errorf("guest socket: %w", err)
	}
	lnFile.Close()

	prep, err := boot.Prepare(r, stage)
	if err != nil {
		return err
	}
	spec := prep.Spec
	switch {
	case viewErr != nil:
		log.Warn("sysinfo(2), statfs(2) and sched_getaffinity(2) show the host's figures", "err", viewErr)
	case diskErr != nil:
		log.Warn("statfs(2) of the root shows the storage pool's figures", "err", diskErr)
	}
	if viewErr == nil {
		if err := view.Ready(); err != nil { // statfs's view stands without it
			log.Warn("sysinfo(2) shows the host's figures", "err", err)
		}
	}
	// Nothing of ours is readable or traceable from the sandbox's processes.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl dumpable: %w", err)
	}
	if err := hardenInit(spec); err != nil {
		return err
	}
	var cgs []guest.CgroupDir
	for _, c := range prep.CgroupFDs {
		cgs = append(cgs, guest.CgroupDir{FD: c.FD, HomeFD: c.HomeFD, V2: c.Controller == "", Freezer: c.Controller == "freezer", NoChild: c.NoChild,
			CPU: c.Controller == "cpu" || c.Controller == ""})
	}
	cfg := guest.Config{
		Env:     spec.Env,
		User:    spec.User,
		Workdir: spec.Workdir,
		Cgroups: cgs,
		Logger:  log.With("sandbox", spec.SandboxID),
		Version: version.Version,
	}
	if viewErr == nil {
		// Counted before the filter: the init's own sched_getaffinity
		// would wait on its listener.
		cfg.CPUs = view.CPUs()
	}
	srv := guest.NewServer(cfg)
	if viewErr == nil {
		view.SetCPUs(srv.CPUs)
	}
	return srv.Serve(ln)
}

// hardenInit gives every thread no_new_privs and, unless a driver test
// turned it off, the seccomp filter the daemon assembled for it.
func hardenInit(spec proto.BootSpec) error {
	if !spec.Seccomp {
		return harden.NoNewPrivs()
	}
	return harden.InstallEncoded(spec.SeccompFilter)
}
