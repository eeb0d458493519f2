package integration

// The host-side posture check of SECURITY.md: every process of a sandbox,
// read from the host's /proc.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

func TestPosture(t *testing.T) {
	from := rowCount()
	t.Cleanup(func() { printTable("posture", from) })
	for _, tier := range batteryTiers(t) {
		ok := t.Run(tier, func(t *testing.T) { checkPosture(t, tier) })
		recordRow("posture", tier, t, ok)
	}
}

func checkPosture(t *testing.T, tier string) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: tier})
	init := sandboxPid(t, id)
	// A lingering background process, a root exec and a user exec.
	mustSh(t, id, "sleep 20 >/dev/null 2>&1 &")
	root := goExec(id, api.ExecRequest{Cmd: []string{"sleep", "2"}})
	user := goExec(id, api.ExecRequest{Shell: "sleep 2.5; true", User: "user"})
	findSandboxProc(t, id, "sleep 2")
	findSandboxProc(t, id, "sleep 2.5")
	defer func() { <-root; <-user }()

	hostNS := map[string]string{}
	for _, ns := range []string{"cgroup", "ipc", "mnt", "net", "pid", "user", "uts"} {
		hostNS[ns], _ = os.Readlink("/proc/self/ns/" + ns)
	}
	wantMap := fmt.Sprintf("0 %d %d", env.cfg.UIDBase, env.cfg.UIDCount)
	pids := sandboxPids(id)
	if len(pids) < 4 {
		t.Fatalf("the sandbox's cgroup holds %v; want init and three sleepers", pids)
	}
	var checked []string
	for _, pid := range pids {
		isInit := pid == init
		st, err := procStatus(pid)
		if err != nil {
			continue // exited meanwhile
		}
		fail := func(format string, args ...any) {
			t.Errorf("pid %d (%s): %s", pid, cmdline(pid), fmt.Sprintf(format, args...))
		}
		if st["NoNewPrivs"] != "1" {
			fail("NoNewPrivs %q", st["NoNewPrivs"])
		}
		if st["Seccomp"] != "2" {
			fail("Seccomp %q", st["Seccomp"])
		}
		caps := []string{"CapBnd", "CapAmb", "CapInh"}
		if !isInit {
			caps = append(caps, "CapEff", "CapPrm")
		}
		for _, c := range caps {
			if v, err := strconv.ParseUint(st[c], 16, 64); err != nil || v != 0 {
				fail("%s %q", c, st[c])
			}
		}
		for _, u := range append(strings.Fields(st["Uid"]), strings.Fields(st["Gid"])...) {
			n, _ := strconv.Atoi(u)
			if n < env.cfg.UIDBase || n >= env.cfg.UIDBase+env.cfg.UIDCount {
				fail("host uid/gid %s outside the sandbox range", u)
			}
		}
		for ns, h := range hostNS {
			got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
			if err != nil || got == h {
				fail("%s namespace %q is the host's (%v)", ns, got, err)
			}
		}
		um, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
		if strings.Join(strings.Fields(string(um)), " ") != wantMap {
			fail("uid_map %q, want %q", um, wantMap)
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		for _, ctrl := range []string{"memory", "pids", "cpu"} {
			if !cgroupLineUnder(string(cg), ctrl, "/"+env.cfg.CgroupParent+"/"+id) {
				fail("not in the sandbox's %s cgroup: %q", ctrl, cg)
			}
		}
		if !isInit {
			ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			var fds []string
			for _, e := range ents {
				fds = append(fds, e.Name())
			}
			if strings.Join(fds, " ") != "0 1 2" {
				fail("open fds %v, want 0 1 2", fds)
			}
		}
		checked = append(checked, fmt.Sprintf("%d(%s)", pid, strings.Fields(cmdline(pid) + " ?")[0]))
	}
	evidence(t, "checked %d processes %v: NoNewPrivs 1, Seccomp 2, caps 0 (init: bounding 0), own namespaces, uid_map %q, sandbox cgroups, fds 0-2",
		len(checked), checked, wantMap)
	_ = time.Second
}

// cgroupLineUnder says whether /proc/PID/cgroup puts ctrl at or under dir.
func cgroupLineUnder(procCgroup, ctrl, dir string) bool {
	for _, line := range strings.Split(procCgroup, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == ctrl && (f[2] == dir || strings.HasPrefix(f[2], dir+"/")) {
				return true
			}
		}
	}
	return false
}
