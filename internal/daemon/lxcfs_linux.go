package daemon

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lxcfsOptions are the views the daemon's lxcfs serves beyond memory and
// uptime: each sandbox's own load average, and its CPU count from its CFS
// quota (/proc/cpuinfo, /proc/stat, /sys/devices/system/cpu/online).
var lxcfsOptions = []string{"--enable-loadavg", "--enable-cfs"}

// lxcfsCFSSuffix names the directory of the daemon's own lxcfs when an
// lxcfs without --enable-cfs holds lxcfs_dir (see ensureLxcfs).
const lxcfsCFSSuffix = ".cfs"

// ensureLxcfs returns the directory where an LXCFS with the CPU views is
// mounted for new sandboxes, starting one if none is: `lxcfs
// --enable-loadavg --enable-cfs dir`, in a session of its own so that it
// outlives the daemon (sandboxes keep running across a restart, and their
// /proc/meminfo is a file of it), its output in runDir/lxcfs.log. An LXCFS
// with --enable-cfs already at dir is used as it is. One without it
// (Debian's lxcfs.service mounts /var/lib/lxcfs so; an older agentbox
// started one so) is left where it is, since running sandboxes bind its
// files and stopping it would break their reads, and the daemon's own
// goes to dir+".cfs" instead, used from then on. A mount whose lxcfs has
// died (killed with the session that started it: every read answers
// ENOTCONN, "Transport endpoint is not connected") is detached and a new
// lxcfs mounted in its place. On failure it logs why and returns "":
// sandboxes then see the host's figures (docs/sandbox-view.md).
func ensureLxcfs(ctx context.Context, dir, runDir string, log *slog.Logger) string {
	if dir == "" {
		return ""
	}
	base := filepath.Clean(dir)
	dir = base
	pidfile := filepath.Join(runDir, "lxcfs.pid")
	if lxcfsMounted(dir) && lxcfsServes(dir) == nil && !lxcfsHasCFS(dir) {
		dir += lxcfsCFSSuffix
		pidfile = filepath.Join(runDir, "lxcfs"+lxcfsCFSSuffix+".pid")
		log.Info("lxcfs: the one mounted runs without --enable-cfs (sandboxes would see the host's CPUs); leaving it to the sandboxes that use it, new ones get one with the CPU views", "old", base, "dir", dir)
	}
	if lxcfsMounted(dir) {
		err := lxcfsServes(dir)
		if err == nil {
			return dir
		}
		log.Warn("lxcfs: the mount's server is gone; detaching it and starting a new one", "dir", dir, "err", err)
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			log.Warn("lxcfs: cannot detach the dead mount; sandboxes see the host's memory", "dir", dir, "err", err)
			return ""
		}
	}
	bin, err := exec.LookPath("lxcfs")
	if err != nil {
		log.Warn("lxcfs is not installed: sandboxes see the host's memory, uptime and load (install the lxcfs package: scripts/install-deps.sh)", "err", err)
		return ""
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Warn("lxcfs: cannot make its directory; sandboxes see the host's memory", "dir", dir, "err", err)
		return ""
	}
	logf, err := os.OpenFile(filepath.Join(runDir, "lxcfs.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		log.Warn("lxcfs: cannot open its log", "err", err)
		return ""
	}
	defer logf.Close()
	// Not CommandContext: it must outlive this daemon.
	args := append([]string{"--foreground"}, lxcfsOptions...)
	cmd := exec.Command(bin, append(args, "--pidfile", pidfile, dir)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		log.Warn("lxcfs did not start; sandboxes see the host's memory", "err", err)
		return ""
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it if it ends while this daemon runs
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if lxcfsMounted(dir) && lxcfsServes(dir) == nil {
			log.Info("lxcfs started", "dir", dir, "pid", cmd.Process.Pid)
			// Should it die while this daemon runs, the next sandboxes
			// get a new one (those running keep the dead files: their
			// reads fail, as a restart of Debian's lxcfs.service does it).
			go func() {
				err := <-exited
				if ctx.Err() != nil {
					return
				}
				log.Warn("lxcfs exited; starting a new one", "err", err, "log", filepath.Join(runDir, "lxcfs.log"))
				ensureLxcfs(ctx, base, runDir, log)
			}()
			return dir
		}
		select {
		case err := <-exited:
			log.Warn("lxcfs exited before mounting; sandboxes see the host's memory (see its log)", "err", err, "log", filepath.Join(runDir, "lxcfs.log"))
			return ""
		case <-deadline.C:
			log.Warn("lxcfs did not mount within 15 s; sandboxes see the host's memory", "dir", dir)
			return ""
		case <-ctx.Done():
			return ""
		case <-tick.C:
		}
	}
}

// lxcfsServes says whether the lxcfs mounted at dir answers: nil when
// its /proc/meminfo can be read.
func lxcfsServes(dir string) error {
	f, err := os.Open(filepath.Join(dir, "proc", "meminfo"))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Read(make([]byte, 64))
	return err
}

// lxcfsMounted says whether a FUSE mount of lxcfs sits at dir.
func lxcfsMounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 1 && f[4] == filepath.Clean(dir) && g[0] == "fuse.lxcfs" {
			return true
		}
	}
	return false
}

// lxcfsHasCFS says whether the lxcfs serving dir runs with --enable-cfs,
// from the command lines of this pid namespace's lxcfs processes. One
// whose process is not found (another pid namespace) counts as without.
func lxcfsHasCFS(dir string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != "lxcfs" {
			continue
		}
		serves, cfs := false, false
		for _, a := range args[1:] {
			serves = serves || (!strings.HasPrefix(a, "-") && filepath.Clean(a) == dir)
			cfs = cfs || a == "--enable-cfs"
		}
		if serves {
			return cfs
		}
	}
	return false
}
