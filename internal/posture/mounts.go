package posture

import (
	"os"
	"path/filepath"
	"strings"
)

// pseudoFS are filesystems whose mount roots are paths inside the kernel's
// own trees (a bind of /dev/null shows root /null), not the host's layout;
// a tmpfs of the host's that would name it is caught by Options.HostPaths.
var pseudoFS = map[string]bool{"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true,
	"mqueue": true, "cgroup": true, "cgroup2": true, "tmpfs": true, "fuse.lxcfs": true}

// checkMounts adds the check that the sandbox's mount table
// (/proc/PID/mountinfo, which shows what the process itself sees) names
// nothing of the host's layout: no mount option or source naming a host
// path (the root overlay's layers are given as /proc/self/fd/N), no mount
// of a host filesystem's subdirectory, and none of o.HostPaths anywhere.
func checkMounts(add func(name, got, want string, pass bool), dir string, o Options) {
	b, err := os.ReadFile(filepath.Join(dir, "mountinfo"))
	if err != nil {
		add("mountinfo hides the host", err.Error(), "readable, no host path", false)
		return
	}
	bad := MountinfoLeaks(string(b), o.HostPaths)
	got := "no host path"
	if len(bad) > 0 {
		got = strings.Join(bad, "; ")
	}
	add("mountinfo hides the host", got, "no host path", len(bad) == 0)
}

// MountinfoLeaks returns what in a /proc/PID/mountinfo text shows the
// host's layout; empty means nothing does.
func MountinfoLeaks(mountinfo string, hostPaths []string) []string {
	var bad []string
	for _, line := range strings.Split(mountinfo, "\n") {
		if line == "" {
			continue
		}
		for _, p := range hostPaths {
			if p != "" && p != "/" && strings.Contains(line, p) {
				bad = append(bad, "names "+p+": "+line)
			}
		}
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 {
			continue
		}
		root, fstype, source := f[3], g[0], g[1]
		if root != "/" && !pseudoFS[fstype] {
			bad = append(bad, "a host "+fstype+"'s "+root+" at "+f[4])
		}
		if strings.HasPrefix(source, "/") && !strings.HasPrefix(source, "/dev/") {
			bad = append(bad, "source "+source+" at "+f[4])
		}
		if len(g) < 3 {
			continue
		}
		for _, opt := range strings.Split(g[2], ",") {
			k, v, ok := strings.Cut(opt, "=")
			if !ok {
				continue
			}
			for _, p := range strings.Split(v, ":") {
				if strings.HasPrefix(p, "/") && p != "/" && !strings.HasPrefix(p, "/proc/self/fd/") {
					bad = append(bad, k+"="+p+" at "+f[4])
				}
			}
		}
	}
	return bad
}
