package posture

// The posture of a microvm sandbox. Its processes run on the guest's own
// kernel inside a virtual machine: the host runs QEMU alone for it, and a
// sandbox process that escaped the guest kernel would be running as QEMU.
// So QEMU is what the host-side check judges: unprivileged, confined,
// holding no host file but the VM's own.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/api"
)

// microvmNamespaces are those the driver gives QEMU: an empty network
// (a tap is handed to it), its own mounts, IPC and UTS. QEMU's user, pid
// and cgroup namespaces stay the host's: it runs as an unprivileged host
// uid of the sandbox's range with no capabilities, so there is nothing a
// user namespace would take away.
var microvmNamespaces = []string{"ipc", "mnt", "net", "uts"}

// CheckMicrovm inspects the host processes of microvm sandbox id: its
// cgroups must hold QEMU (qemuPid) and nothing else, and QEMU must run
// with NoNewPrivs 1, seccomp filter mode (-sandbox on), no capability at
// all (bounding set included), as one host uid and gid of the sandbox's
// range, in namespaces of its own (microvmNamespaces), in the sandbox's
// cgroups, holding open only anonymous files (sockets, pipes, anonymous
// inodes, its RAM's memfd), /dev/null, /dev/net/tun or /dev/kvm, files
// of the sandbox's own directories (its run dir, its writable disk), and
// template layer images read-only.
func CheckMicrovm(id string, qemuPid int, o Options) api.SecurityReport {
	o = o.withDefaults()
	rep := api.SecurityReport{Sandbox: id, Pass: true, Processes: []api.ProcessPosture{}}
	hostNS := hostNamespaces(o, microvmNamespaces)
	sawQEMU := false
	for _, pid := range Pids(o.CgroupRoot, o.CgroupParent, id) {
		pp, ok := checkMicrovmProcess(pid, id, hostNS, o)
		if !ok {
			continue // exited meanwhile
		}
		if pid == qemuPid {
			sawQEMU = true
			pp.Comm = "qemu (the VM)"
		} else {
			// Only QEMU has a reason to be there.
			pp.Checks = append(pp.Checks, api.CheckValue{Name: "QEMU alone in the sandbox's cgroups", Got: fmt.Sprintf("pid %d (%s)", pid, pp.Comm), Want: fmt.Sprintf("QEMU, pid %d, alone", qemuPid)})
			pp.Pass = false
		}
		rep.Pass = rep.Pass && pp.Pass
		rep.Processes = append(rep.Processes, pp)
	}
	if !sawQEMU {
		// QEMU outside the sandbox's cgroups would be unlimited.
		rep.Processes = append(rep.Processes, api.ProcessPosture{Pid: qemuPid, Comm: "qemu", Checks: []api.CheckValue{{
			Name: "in the sandbox's cgroups", Got: "not found there", Want: "QEMU in " + o.CgroupParent + "/" + id}}})
		rep.Pass = false
	}
	return rep
}

func checkMicrovmProcess(pid int, id string, hostNS map[string]string, o Options) (api.ProcessPosture, bool) {
	dir := filepath.Join(o.ProcRoot, strconv.Itoa(pid))
	pp, st, add, ok := startPosture(dir, pid)
	if !ok {
		return api.ProcessPosture{}, false
	}
	capsWithin(add, st, allCaps, 0, "0")
	// QEMU runs in no user namespace of its own: its ids are host ids, so
	// there is no uid map to check.
	checkConfinement(add, dir, st, id, microvmNamespaces, hostNS, o, false)
	n, outside := microvmFDs(dir, id)
	add("open fds", fmt.Sprintf("%d, outside the VM's own: %s", n, strings.Join(outside, " ")), "none outside the VM's own files", len(outside) == 0)
	return *pp, true
}

// microvmFDs counts QEMU's open fds and lists those that are none of:
// anonymous (socket, pipe, anon_inode), a memfd (the guest's RAM),
// /dev/null, /dev/net/tun or /dev/kvm, a file under one of the sandbox's
// own directories (.../sandboxes/ID/: its run dir with the console log,
// its writable disk), or a template layer image (an erofs image in the
// driver's layers cache) open read-only.
func microvmFDs(dir, id string) (int, []string) {
	ents, _ := os.ReadDir(filepath.Join(dir, "fd"))
	var outside []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, "fd", e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		switch {
		case !strings.HasPrefix(target, "/"), strings.HasPrefix(target, "/memfd:"),
			target == "/dev/null", target == "/dev/net/tun", target == "/dev/kvm",
			strings.Contains(target, "/sandboxes/"+id+"/"):
			continue
		case strings.HasSuffix(target, ".erofs") && filepath.Base(filepath.Dir(target)) == "layers" && readOnlyFD(dir, e.Name()):
			continue
		}
		outside = append(outside, e.Name()+"="+target)
	}
	sort.Strings(outside)
	return len(ents), outside
}

// readOnlyFD says whether fd of the process at dir is open for reading
// only (its fdinfo's flags, octal, have no access mode bits).
func readOnlyFD(dir, fd string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "fdinfo", fd))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && n&3 == 0
		}
	}
	return false
}
