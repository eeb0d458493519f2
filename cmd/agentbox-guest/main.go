//go:debug updatemaxprocs=0

// Command agentbox-guest is the guest agent: PID 1 of every sandbox. It is
// a static binary (CGO_ENABLED=0) that the daemon starts as
// `agentbox-guest init` in fresh namespaces (container tier); it builds the
// sandbox's root, hardens itself and serves the guest protocol
// (internal/guest/proto) on the socket it inherited. The container tier's
// `init` is internal/guest/containerinit, the gvisor tier's `serve` and
// `hook` internal/guest/gvisorserve, the microvm tier's `vm`
// internal/guest/vminit, the host's `launcher`
// internal/guest/launcher: this main only picks the mode.
//
// The runtime never re-reads the CPU count (the go:debug line above:
// Go 1.25's periodic GOMAXPROCS update calls sched_getaffinity from its
// monitor thread): the container tier's init answers that call for the
// sandbox's processes (internal/guest/sysview), and one of its own would
// wait on its own listener with the thread that retakes a blocked P.
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/agentbox/agentbox/internal/guest/containerinit"
	"github.com/agentbox/agentbox/internal/guest/gvisorserve"
	"github.com/agentbox/agentbox/internal/guest/launcher"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/guest/vminit"
)

// main runs on the main thread (see init), the one whose capability sets
// /proc/PID/status shows: `init` and `serve` empty its bounding set there.
func init() { runtime.LockOSThread() }

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch mode := os.Args[1]; {
	case mode == "init": // PID 1 of a container-tier sandbox
		err = containerinit.Run()
	case mode == "serve": // the agent of a gvisor sandbox
		err = gvisorserve.Serve()
	case mode == proto.VMMode: // PID 1 of a microvm guest (its initramfs's /init)
		err = vminit.Run()
	case mode == "hook" && len(os.Args) == 2:
		// Run by runsc inside a gvisor sandbox around a checkpoint.
		runtime.UnlockOSThread()
		err = gvisorserve.Hook()
	case mode == "launcher" && len(os.Args) == 2:
		// The daemon's pre-forked launcher, on the host.
		runtime.UnlockOSThread()
		err = launcher.ServeInherited()
	default:
		usage()
	}
	if err != nil {
		if os.Args[1] == "init" || os.Args[1] == "serve" || os.Args[1] == proto.VMMode {
			fmt.Fprintf(os.Stderr, "agentbox-guest: %v\n", err)
		} else {
			fmt.Fprintf(os.Stderr, "agentbox-guest %s: %v\n", os.Args[1], err)
		}
		os.Exit(1)
	}
}

func usage() {
	runtime.UnlockOSThread()
	fmt.Fprintln(os.Stderr, "agentbox-guest is started by the agentbox daemon as `agentbox-guest init` (or `serve`); it is not meant to be run by hand")
	os.Exit(2)
}
