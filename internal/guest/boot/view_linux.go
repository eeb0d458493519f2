package boot

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// What a program inside sees of the machine (docs/sandbox-view.md). A
// fresh /proc shows the host kernel's counters; Stage puts over them:
//
//   - LXCFS's views, where the daemon gives one: /proc/meminfo (the
//     sandbox's memory cgroup, so free and MemTotal say its limit, and a
//     resize shows at once), /proc/uptime (its init's age), /proc/swaps
//     and /proc/loadavg (its own tasks when lxcfs runs with
//     --enable-loadavg), and its CPUs: /proc/cpuinfo, /proc/stat and
//     /sys/devices/system/cpu/online count ceil(its CFS quota) CPUs
//     when lxcfs runs with --enable-cfs and the sandbox has a cpuset
//     cgroup (internal/cgroups), else every CPU of the host;
//   - files of its own for the host-wide counters that say something of
//     the host or of other tenants: /proc/cmdline (the host's boot line),
//     /proc/sys/kernel/random/boot_id (a random id per sandbox),
//     /proc/cgroups (one cgroup per controller, not the host's count,
//     which grows with every sandbox) and /proc/diskstats (empty: the
//     storage pool's I/O is the host's).
var lxcfsFiles = []string{"/proc/meminfo", "/proc/uptime", "/proc/swaps", "/proc/loadavg", "/proc/cpuinfo", "/proc/stat"}

// lxcfsSysFiles are LXCFS's views under /sys, bound where the LXCFS
// serves them (each on its own: an older LXCFS may lack one).
var lxcfsSysFiles = []string{"/sys/devices/system/cpu/online"}

// stageView binds the views over the staged /proc under root; lxcfs is
// the mounted LXCFS ("" for none). The files of its own live in view, a
// directory on the stage's tmpfs.
func stageView(root, view, lxcfs string) error {
	in := func(p string) string { return filepath.Join(root, p) }
	var binds [][2]string
	if lxcfs != "" {
		var got [][2]string
		for _, f := range lxcfsFiles {
			src := filepath.Join(lxcfs, f)
			if _, err := os.Stat(src); err != nil {
				// lxcfs stopped or crashed: the sandbox still starts, with
				// the host's figures, rather than none starting at all.
				fmt.Fprintf(os.Stderr, "agentbox-guest: LXCFS at %s has no %s (%v); this sandbox sees the host's memory, uptime and CPUs\n", lxcfs, f, err)
				got = nil
				break
			}
			got = append(got, [2]string{src, in(f)})
		}
		binds = append(binds, got...)
		for _, f := range lxcfsSysFiles {
			if src := filepath.Join(lxcfs, f); got != nil && exists(src) && exists(in(f)) {
				binds = append(binds, [2]string{src, in(f)})
			}
		}
	}
	if err := os.MkdirAll(view, 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", view, err)
	}
	own := map[string]string{
		"/proc/cmdline":                   "agentbox\n",
		"/proc/sys/kernel/random/boot_id": randomUUID() + "\n",
		"/proc/diskstats":                 "",
	}
	if b, err := os.ReadFile("/proc/cgroups"); err == nil {
		own["/proc/cgroups"] = oneCgroupEach(string(b))
	}
	for target, body := range own {
		if _, err := os.Stat(in(target)); err != nil {
			continue // not in this kernel
		}
		src := filepath.Join(view, strings.ReplaceAll(strings.TrimPrefix(target, "/proc/"), "/", "_"))
		if err := os.WriteFile(src, []byte(body), 0o444); err != nil {
			return fmt.Errorf("writing the sandbox's %s: %w", target, err)
		}
		binds = append(binds, [2]string{src, in(target)})
	}
	for _, b := range binds {
		if err := unix.Mount(b[0], b[1], "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s over %s: %w", b[0], b[1], err)
		}
		if err := unix.Mount("", b[1], "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil &&
			!errors.Is(err, unix.EPERM) {
			// EPERM: a FUSE mount's locked flags (nosuid, nodev) differ;
			// LXCFS's files are read-only anyway.
			return fmt.Errorf("making %s read-only: %w", b[1], err)
		}
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// oneCgroupEach rewrites /proc/cgroups with 1 as every controller's
// num_cgroups: the host's counts rise with every sandbox of every tenant.
func oneCgroupEach(s string) string {
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && !strings.HasPrefix(line, "#") {
			f[2] = "1"
			line = strings.Join(f, "\t")
		}
		out.WriteString(line + "\n")
	}
	return out.String()
}

func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
