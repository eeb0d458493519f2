package posture

// The posture of a gvisor sandbox. Its processes are tasks of gVisor's
// kernel (the Sentry), not host processes: what the host runs for it is
// the Sentry itself (runsc-sandbox), its file server (runsc-gofer) and,
// on the systrap platform, one stub process per address space, children
// of the Sentry. Those are what a host-side check can and must judge: a
// sandbox process that escaped gVisor's kernel would be running as one of
// them.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// gvisorCaps are the capabilities runsc keeps for its Sentry and gofer,
// held in the sandbox's own user namespace (whose root is the
// unprivileged host uid_base), so they reach only files of the sandbox's
// uid range: CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
// CAP_FOWNER, CAP_FSETID (the gofer and the Sentry's direct file access
// serve the sandbox's root for it), CAP_SYS_CHROOT (the gofer's chroot
// into the root) and CAP_SYS_PTRACE (the systrap platform drives its stub
// processes). No CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETUID or anything
// else.
const gvisorCaps = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<4 | 1<<18 | 1<<19

// gvisorNamespaces are those runsc gives its processes; the cgroup
// namespace stays the host's (runsc does not unshare it; the sandbox's
// tasks see gVisor's own cgroupfs, never the host's).
var gvisorNamespaces = []string{"ipc", "mnt", "net", "pid", "user", "uts"}

// CheckTier is Check for a sandbox of the named isolation tier: the
// container tier's processes are the sandbox's own, the gvisor tier's are
// gVisor's (see CheckGvisor), the microvm tier's is QEMU (see
// CheckMicrovm).
func CheckTier(tier, id string, initPid int, o Options) api.SecurityReport {
	switch tier {
	case "gvisor":
		return CheckGvisor(id, initPid, o)
	case "microvm":
		return CheckMicrovm(id, initPid, o)
	}
	return Check(id, initPid, o)
}

// CheckGvisor inspects every host process of gvisor sandbox id (its
// cgroups hold the Sentry, the gofer and the Sentry's stubs); sentryPid
// is the Sentry's host pid. Each must run with NoNewPrivs 1 and seccomp
// filter mode, at most gVisor's capabilities (gvisorCaps) and only inside
// its own user namespace, as host uids of the sandbox's range with the
// unprivileged uid map, in namespaces other than the host's, in the
// sandbox's cgroups, with no open file outside the sandbox: every fd is a
// socket, pipe, anonymous inode or memfd, /dev/null, a file of the
// sandbox's run dir or cgroup, or one of the sandbox's own files (on its
// root overlay, or a source of the bundle's bind mounts), never another
// host file.
func CheckGvisor(id string, sentryPid int, o Options) api.SecurityReport {
	o = o.withDefaults()
	rep := api.SecurityReport{Sandbox: id, Pass: true, Processes: []api.ProcessPosture{}}
	hostNS := hostNamespaces(o, gvisorNamespaces)
	sawSentry := false
	pids := Pids(o.CgroupRoot, o.CgroupParent, id)
	files := bundleFiles(pids, o)
	for _, pid := range pids {
		pp, ok := checkGvisorProcess(pid, id, hostNS, files, o)
		if !ok {
			continue
		}
		if pid == sentryPid {
			sawSentry = true
			pp.Comm = "runsc-sandbox (Sentry)"
		}
		rep.Pass = rep.Pass && pp.Pass
		rep.Processes = append(rep.Processes, pp)
	}
	if !sawSentry {
		// The Sentry outside the sandbox's cgroups would be unlimited.
		rep.Processes = append(rep.Processes, api.ProcessPosture{Pid: sentryPid, Comm: "runsc-sandbox", Checks: []api.CheckValue{{
			Name: "in the sandbox's cgroups", Got: "not found there", Want: "the Sentry in " + o.CgroupParent + "/" + id}}})
		rep.Pass = false
	}
	return rep
}

func checkGvisorProcess(pid int, id string, hostNS map[string]string, files *sandboxFiles, o Options) (api.ProcessPosture, bool) {
	dir := filepath.Join(o.ProcRoot, strconv.Itoa(pid))
	pp, st, add, ok := startPosture(dir, pid)
	if !ok {
		return api.ProcessPosture{}, false
	}
	pp.Comm = gvisorRole(dir)
	capsWithin(add, st, allCaps, gvisorCaps, fmt.Sprintf("within %016x (gVisor's, in the sandbox's user namespace)", gvisorCaps))
	want := checkConfinement(add, dir, st, id, gvisorNamespaces, hostNS, o, true)
	n, outside := gvisorFDs(dir, id, want, files)
	add("open fds", fmt.Sprintf("%d, outside the sandbox: %s", n, strings.Join(outside, " ")), "none outside the sandbox", len(outside) == 0)
	return *pp, true
}

// gvisorRole names a runsc process by its command line: runsc-sandbox
// (the Sentry), runsc-gofer, or a stub (no command line of its own).
func gvisorRole(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
	name, _, _ := strings.Cut(string(b), "\x00")
	switch {
	case name == "":
		return "runsc stub"
	case strings.Contains(name, " "):
		name, _, _ = strings.Cut(name, " ")
	}
	return filepath.Base(name)
}

// gvisorFDs counts a runsc process's open fds and lists those that are
// neither anonymous (socket, pipe, anon_inode, memfd), /dev/null, a file
// of the sandbox's run dir or cgroup (cgroupDir), one of the sandbox's own
// files (files), nor procfs (the gofer's /proc/self/fd).
func gvisorFDs(dir, id, cgroupDir string, files *sandboxFiles) (int, []string) {
	ents, _ := os.ReadDir(filepath.Join(dir, "fd"))
	var outside []string
	for _, e := range ents {
		fd := filepath.Join(dir, "fd", e.Name())
		target, err := os.Readlink(fd)
		if err != nil {
			continue // closed meanwhile
		}
		switch {
		case !strings.HasPrefix(target, "/"), strings.HasPrefix(target, "/memfd:"), target == "/dev/null",
			strings.Contains(target, "/sandboxes/"+id+"/"), strings.Contains(target, cgroupDir+"/"):
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(fd, &st); err == nil && files.has(st, target) {
			continue
		}
		// /dev/null by what it is: one opened by `runsc run`, which
		// starts in a mount namespace of its own (its /proc/meminfo,
		// drivers/gvisor), reads "/null" from the host's.
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == unix.Mkdev(1, 3) {
			continue
		}
		// The gofer keeps its own /proc/self/fd open (it shows as "/"
		// once it has unmounted procfs).
		var sfs unix.Statfs_t
		if err := unix.Statfs(fd, &sfs); err == nil && sfs.Type == unix.PROC_SUPER_MAGIC {
			continue
		}
		outside = append(outside, e.Name()+"="+target)
	}
	sort.Strings(outside)
	return len(ents), outside
}

// sandboxFiles are the host files a gvisor sandbox may hold open: those
// on its root (the host overlay runsc serves, one st_dev) and the sources
// of the bundle's bind mounts (the guest agent binary, the channel's
// directory and what is in it), and what was in a bound directory and is
// deleted now (the guest agent's socket of before a memory snapshot, which
// the gofer keeps open).
type sandboxFiles struct {
	rootDev uint64
	ok      bool
	ids     map[[2]uint64]bool
	// dirs maps a bound directory's destination (as runsc's processes
	// see it) to its source's st_dev.
	dirs map[string]uint64
}

// has reports whether the open file st, which the process names target,
// is one of the sandbox's. A deleted file counts when it was in a bound
// directory: its name is under the directory's destination and it is on
// the source's filesystem (the gofer serves that directory, and no other
// host file is reachable under that name).
func (f *sandboxFiles) has(st unix.Stat_t, target string) bool {
	if !f.ok {
		return false
	}
	if st.Dev == f.rootDev || f.ids[[2]uint64{st.Dev, st.Ino}] {
		return true
	}
	name, deleted := strings.CutSuffix(target, " (deleted)")
	if !deleted {
		return false
	}
	for dest, dev := range f.dirs {
		// The gofer names the container's root /root in its own mount
		// namespace; the Sentry and the stubs name it /.
		for _, under := range []string{dest + "/", goferRoot + dest + "/"} {
			if strings.HasPrefix(name, under) && st.Dev == dev {
				return true
			}
		}
	}
	return false
}

// goferRoot is where runsc's gofer mounts the container's root in its
// mount namespace, as its open files' names show.
const goferRoot = "/root"

// bundleFiles reads the OCI bundle of the sandbox whose runsc processes
// are pids: its state dir is the --root of their command lines, next to
// bundle/config.json.
func bundleFiles(pids []int, o Options) *sandboxFiles {
	f := &sandboxFiles{ids: map[[2]uint64]bool{}, dirs: map[string]uint64{}}
	var root string
	for _, pid := range pids {
		b, _ := os.ReadFile(filepath.Join(o.ProcRoot, strconv.Itoa(pid), "cmdline"))
		for _, arg := range strings.Split(string(b), "\x00") {
			if v, ok := strings.CutPrefix(arg, "--root="); ok {
				root = v
			}
		}
		if root != "" {
			break
		}
	}
	if root == "" {
		return f
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(root), "bundle", "config.json"))
	if err != nil {
		return f
	}
	var spec struct {
		Root struct {
			Path string `json:"path"`
		} `json:"root"`
		Mounts []struct {
			Type        string `json:"type"`
			Source      string `json:"source"`
			Destination string `json:"destination"`
		} `json:"mounts"`
	}
	if json.Unmarshal(b, &spec) != nil {
		return f
	}
	var st unix.Stat_t
	if unix.Stat(spec.Root.Path, &st) != nil {
		return f
	}
	f.rootDev, f.ok = st.Dev, true
	add := func(p string) {
		if unix.Stat(p, &st) == nil {
			f.ids[[2]uint64{st.Dev, st.Ino}] = true
		}
	}
	for _, m := range spec.Mounts {
		if m.Type != "bind" {
			continue
		}
		add(m.Source)
		if unix.Stat(m.Source, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && filepath.IsAbs(m.Destination) {
			f.dirs[filepath.Clean(m.Destination)] = st.Dev
		}
		ents, _ := os.ReadDir(m.Source)
		for _, e := range ents {
			add(filepath.Join(m.Source, e.Name()))
		}
	}
	return f
}
