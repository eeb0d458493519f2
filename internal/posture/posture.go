// Package posture is the host-side posture check of SECURITY.md: for each
// process of a sandbox it reads the host's /proc and says whether the
// process runs as the hardening checklist promises (NoNewPrivs, seccomp
// filter mode, no capabilities, its own namespaces, an unprivileged uid
// map, the sandbox's cgroups, only the expected fds). The verdicts come
// from the host, never from anything the sandbox reports about itself.
//
// The integration tests and GET /v1/sandboxes/{id}/security (`agentbox
// inspect --security ID`) both use Check, through CheckTier: a gvisor
// sandbox's host processes are gVisor's own, judged by CheckGvisor
// (gvisor.go), a microvm sandbox's is QEMU, judged by CheckMicrovm
// (microvm.go).
package posture

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// Options say what a sandbox's processes should look like.
type Options struct {
	// ProcRoot is the host's /proc (default "/proc").
	ProcRoot string
	// CgroupRoot is where the cgroup hierarchies are mounted (default
	// "/sys/fs/cgroup").
	CgroupRoot string
	// CgroupParent is the daemon's cgroup_parent.
	CgroupParent string
	// UIDBase and UIDCount are the host uid range of the sandbox.
	UIDBase, UIDCount int
	// SharedRange: the sandbox runs in the range every sandbox shares
	// (uid_ranges = 0, or storage that cannot be id-mapped), not one of
	// its own; the check "a uid range of its own" fails.
	SharedRange bool
	// SharedWith names another live sandbox found in the same range (a
	// failure too).
	SharedWith string
	// ownerOf reads a user namespace's owner (nsOwner; the tests' fake
	// /proc has none).
	ownerOf func(path string) (string, error)
	// HostPaths are the daemon's directories (data, run), which no
	// sandbox's mount table may name (mounts.go).
	HostPaths []string
}

// namespaces are those a sandbox process must not share with the host.
var namespaces = []string{"cgroup", "ipc", "mnt", "net", "pid", "user", "uts"}

// Check inspects every process in sandbox id's cgroup; initPid is the
// host pid of its init (the guest agent), which keeps its own fds and a
// capability set it drops before running user code.
func Check(id string, initPid int, o Options) api.SecurityReport {
	o = o.withDefaults()
	rep := api.SecurityReport{Sandbox: id, Pass: true, Processes: []api.ProcessPosture{}}
	hostNS := hostNamespaces(o, namespaces)
	pids := Pids(o.CgroupRoot, o.CgroupParent, id)
	if len(pids) == 0 {
		rep.Pass = false
		return rep
	}
	for _, pid := range pids {
		pp, ok := checkProcess(pid, pid == initPid, id, hostNS, o)
		if !ok {
			continue // exited meanwhile
		}
		rep.Pass = rep.Pass && pp.Pass
		rep.Processes = append(rep.Processes, pp)
	}
	if len(rep.Processes) == 0 {
		rep.Pass = false
	}
	return rep
}

// Pids lists the host pids in sandbox id's pids cgroup (v1), or its
// unified cgroup (v2), sorted.
func Pids(cgroupRoot, parent, id string) []int {
	dirs := []string{filepath.Join(cgroupRoot, "pids", parent, id), filepath.Join(cgroupRoot, parent, id)}
	var pids []int
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					pids = append(pids, n)
				}
			}
			return nil
		})
		if len(pids) > 0 {
			break
		}
	}
	sort.Ints(pids)
	return pids
}

func checkProcess(pid int, isInit bool, id string, hostNS map[string]string, o Options) (api.ProcessPosture, bool) {
	dir := filepath.Join(o.ProcRoot, strconv.Itoa(pid))
	pp, st, add, ok := startPosture(dir, pid)
	if !ok {
		return api.ProcessPosture{}, false
	}
	caps := []string{"CapBnd", "CapAmb", "CapInh"}
	if !isInit {
		caps = append(caps, "CapEff", "CapPrm")
	}
	capsWithin(add, st, caps, 0, "0")
	checkConfinement(add, dir, st, id, namespaces, hostNS, o, true)
	// Its user namespace is its own root's (launcher.StartOwned): what
	// the kernel counts per user one level up is charged there, not to
	// the host's root.
	ownerOf := o.ownerOf
	if ownerOf == nil {
		ownerOf = nsOwner
	}
	owner, err := ownerOf(filepath.Join(dir, "ns", "user"))
	add("user namespace owner", owner, strconv.Itoa(o.UIDBase)+" (the sandbox's root)", err == nil && owner == strconv.Itoa(o.UIDBase))
	if isInit {
		checkMounts(add, dir, o) // every process of the sandbox shares its mount namespace
	}
	if !isInit {
		ents, _ := os.ReadDir(filepath.Join(dir, "fd"))
		var fds []string
		for _, e := range ents {
			fds = append(fds, e.Name())
		}
		sort.Slice(fds, func(i, j int) bool { a, _ := strconv.Atoi(fds[i]); b, _ := strconv.Atoi(fds[j]); return a < b })
		add("open fds", strings.Join(fds, " "), "0 1 2", strings.Join(fds, " ") == "0 1 2")
	}
	return *pp, true
}

// cgroupControllers are the controllers a sandbox must be confined by that
// /proc/PID/cgroup shows: memory, pids and cpu on v1, the unified
// hierarchy ("unified") on v2.
func cgroupControllers(procCgroup string) []string {
	var out []string
	have := map[string]bool{}
	for _, line := range strings.Split(procCgroup, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			have[c] = true
		}
		if f[0] == "0" && f[1] == "" {
			have["unified"] = true
		}
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if have[c] {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		out = append(out, "unified")
	}
	return out
}

// cgroupOf is ctrl's path in /proc/PID/cgroup ("unified": the v2 line).
func cgroupOf(procCgroup, ctrl string) string {
	for _, line := range strings.Split(procCgroup, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if ctrl == "unified" && f[0] == "0" && f[1] == "" {
			return f[2]
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == ctrl {
				return f[2]
			}
		}
	}
	return ""
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func status(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// checkConfinement adds the checks every host process of a sandbox must
// pass, whatever its tier: host uids and gids in the sandbox's range (never
// root), its own namespaces (those of nsList), with userns the sandbox's
// uid map, and the sandbox's cgroups. It returns the cgroup path they
// must be under.
func checkConfinement(add func(name, got, want string, pass bool), dir string, st map[string]string, id string, nsList []string, hostNS map[string]string, o Options, userns bool) string {
	var ids []string
	inRange := true
	for _, u := range append(strings.Fields(st["Uid"]), strings.Fields(st["Gid"])...) {
		n, err := strconv.Atoi(u)
		ids = append(ids, u)
		if err != nil || n < o.UIDBase || n >= o.UIDBase+o.UIDCount || n == 0 {
			inRange = false
		}
	}
	add("host uids/gids", strings.Join(ids, " "), fmt.Sprintf("in [%d, %d)", o.UIDBase, o.UIDBase+o.UIDCount), inRange)
	own := fmt.Sprintf("[%d, %d), no other sandbox's", o.UIDBase, o.UIDBase+o.UIDCount)
	if o.SharedRange {
		own = fmt.Sprintf("[%d, %d), shared by every sandbox", o.UIDBase, o.UIDBase+o.UIDCount)
	} else if o.SharedWith != "" {
		own = fmt.Sprintf("[%d, %d), also sandbox %s's", o.UIDBase, o.UIDBase+o.UIDCount, o.SharedWith)
	}
	add("a uid range of its own", own, "a range no other sandbox has (uid_ranges)", !o.SharedRange && o.SharedWith == "")
	for _, ns := range nsList {
		got, err := os.Readlink(filepath.Join(dir, "ns", ns))
		add(ns+" namespace", got, "not the host's "+hostNS[ns], err == nil && got != hostNS[ns])
	}
	if userns {
		um, _ := os.ReadFile(filepath.Join(dir, "uid_map"))
		gotMap := strings.Join(strings.Fields(string(um)), " ")
		wantMap := fmt.Sprintf("0 %d %d", o.UIDBase, o.UIDCount)
		add("uid_map", gotMap, wantMap, gotMap == wantMap)
	}
	cg, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
	want := "/" + o.CgroupParent + "/" + id
	for _, ctrl := range cgroupControllers(string(cg)) {
		add(ctrl+" cgroup", cgroupOf(string(cg), ctrl), want+"[/...]", under(cgroupOf(string(cg), ctrl), want))
	}
	return want
}

// nsOwner is the host uid that owns the user namespace at path
// (NS_GET_OWNER_UID).
func nsOwner(path string) (string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err.Error(), err
	}
	defer unix.Close(fd)
	uid, err := unix.IoctlGetUint32(fd, unix.NS_GET_OWNER_UID)
	if err != nil {
		return err.Error(), err
	}
	return strconv.FormatUint(uint64(uid), 10), nil
}

// withDefaults is o with /proc and /sys/fs/cgroup where it names none.
func (o Options) withDefaults() Options {
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.CgroupRoot == "" {
		o.CgroupRoot = "/sys/fs/cgroup"
	}
	return o
}

// hostNamespaces reads the host's namespaces of kinds list (this
// process's), which a sandbox's processes must not share.
func hostNamespaces(o Options, list []string) map[string]string {
	ns := map[string]string{}
	for _, k := range list {
		ns[k], _ = os.Readlink(filepath.Join(o.ProcRoot, "self", "ns", k))
	}
	return ns
}

// allCaps are the capability sets of /proc/PID/status.
var allCaps = []string{"CapBnd", "CapEff", "CapPrm", "CapAmb", "CapInh"}

// startPosture reads the status of process dir and starts its posture
// with the checks every tier makes: no_new_privs set, seccomp in filter
// mode. add records one more check on it; ok is false for a process that
// is gone.
func startPosture(dir string, pid int) (pp *api.ProcessPosture, st map[string]string, add func(name, got, want string, pass bool), ok bool) {
	st, err := status(filepath.Join(dir, "status"))
	if err != nil {
		return nil, nil, nil, false
	}
	pp = &api.ProcessPosture{Pid: pid, Comm: st["Name"], Pass: true}
	add = func(name, got, want string, pass bool) {
		pp.Checks = append(pp.Checks, api.CheckValue{Name: name, Got: got, Want: want, Pass: pass})
		pp.Pass = pp.Pass && pass
	}
	add("NoNewPrivs", st["NoNewPrivs"], "1", st["NoNewPrivs"] == "1")
	add("Seccomp", st["Seccomp"], "2", st["Seccomp"] == "2")
	return pp, st, add, true
}

// capsWithin checks that each capability set of caps (status fields, in
// hex) holds nothing outside allowed; want says what is allowed.
func capsWithin(add func(name, got, want string, pass bool), st map[string]string, caps []string, allowed uint64, want string) {
	for _, c := range caps {
		v, err := strconv.ParseUint(st[c], 16, 64)
		add(c, st[c], want, err == nil && v&^allowed == 0)
	}
}
