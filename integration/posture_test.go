package integration

// The host-side posture check of SECURITY.md: every process of a sandbox,
// read from the host's /proc.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

func TestPosture(t *testing.T) {
	from := rowCount()
	t.Cleanup(func() { printTable("posture", from) })
	for _, tier := range batteryRunTiers(t) {
		if !runsOn("posture", tier) {
			continue
		}
		ok := t.Run(tier, func(t *testing.T) { checkPosture(t, tier) })
		recordRow("posture", tier, t, ok)
	}
}

func checkPosture(t *testing.T, tier string) {
	switch tier {
	case "gvisor":
		checkPostureGvisor(t)
		return
	case "microvm":
		checkPostureMicrovm(t)
		return
	}
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
	base := sandboxUIDBase(t, id)
	if base < env.cfg.UIDBase+env.cfg.UIDCount || (base-env.cfg.UIDBase)%env.cfg.UIDCount != 0 {
		t.Errorf("the sandbox's host uid range starts at %d; want one of its own: uid_base + k x uid_count, k >= 1", base)
	}
	wantMap := fmt.Sprintf("0 %d %d", base, env.cfg.UIDCount)
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
			if n < base || n >= base+env.cfg.UIDCount {
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

// checkPostureGvisor: a gvisor sandbox's processes are tasks of gVisor's
// kernel; on the host it is the Sentry, the gofer and the Sentry's stubs.
// The daemon's posture check (GET /v1/sandboxes/{id}/security, which
// `agentbox inspect --security` prints) must pass on them, and the test
// reads the essentials from /proc itself: seccomp, no_new_privs, no
// CAP_SYS_ADMIN, an unprivileged user namespace of its own, the
// sandbox's cgroups. gVisor's kernel, asked from the host, shows the
// sandbox's own processes with their sandbox uids.
func checkPostureGvisor(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: "gvisor"})
	sentry := sandboxPid(t, id)
	mustSh(t, id, "sleep 20 >/dev/null 2>&1 &")
	user := goExec(id, api.ExecRequest{Shell: "sleep 2.5; true", User: "user"})
	defer func() { <-user }()
	p := findSentryProc(t, id, "sleep 2.5")
	rep, err := env.client.SandboxSecurity(context.Background(), id)
	if err != nil {
		t.Fatalf("the posture check: %v", err)
	}
	roles := map[string]int{}
	for _, pp := range rep.Processes {
		roles[strings.Fields(pp.Comm + " ?")[0]]++
		for _, c := range pp.Checks {
			if !c.Pass {
				t.Errorf("pid %d (%s): %s = %q, want %s", pp.Pid, pp.Comm, c.Name, c.Got, c.Want)
			}
		}
	}
	if !rep.Pass {
		t.Errorf("the posture check of a gvisor sandbox failed")
	}
	if roles["runsc-sandbox"] != 1 || roles["runsc-gofer"] != 1 || roles["runsc"] == 0 {
		t.Errorf("the posture check saw %v; want the Sentry, the gofer and its stubs", roles)
	}
	hostUser, _ := os.Readlink("/proc/self/ns/user")
	base := sandboxUIDBase(t, id)
	if base < env.cfg.UIDBase+env.cfg.UIDCount || (base-env.cfg.UIDBase)%env.cfg.UIDCount != 0 {
		t.Errorf("the sandbox's host uid range starts at %d; want one of its own: uid_base + k x uid_count, k >= 1", base)
	}
	var checked []string
	for _, pid := range sandboxPids(id) {
		st, err := procStatus(pid)
		if err != nil {
			continue
		}
		fail := func(format string, args ...any) {
			t.Errorf("host pid %d (%s): %s", pid, cmdline(pid), fmt.Sprintf(format, args...))
		}
		if st["NoNewPrivs"] != "1" || st["Seccomp"] != "2" {
			fail("NoNewPrivs %q Seccomp %q", st["NoNewPrivs"], st["Seccomp"])
		}
		for _, c := range []string{"CapBnd", "CapEff", "CapPrm", "CapAmb"} {
			if v, err := strconv.ParseUint(st[c], 16, 64); err != nil || v&(1<<21) != 0 {
				fail("%s %q holds CAP_SYS_ADMIN", c, st[c])
			}
		}
		if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid)); ns == hostUser {
			fail("runs in the host's user namespace")
		}
		for _, u := range strings.Fields(st["Uid"]) {
			if n, _ := strconv.Atoi(u); n < base || n >= base+env.cfg.UIDCount {
				fail("host uid %s outside the sandbox range", u)
			}
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		for _, ctrl := range []string{"memory", "pids", "cpu"} {
			if !cgroupLineUnder(string(cg), ctrl, "/"+env.cfg.CgroupParent+"/"+id) {
				fail("not in the sandbox's %s cgroup: %q", ctrl, cg)
			}
		}
		checked = append(checked, strconv.Itoa(pid))
	}
	if !slices.Contains(checked, strconv.Itoa(sentry)) {
		t.Errorf("the Sentry %d is not in the sandbox's cgroups (%v)", sentry, checked)
	}
	if u := p.Status.UID; u.Real != 1000 || u.Effective != 1000 {
		t.Errorf("gVisor's kernel runs the user's exec as uid %d/%d, want 1000", u.Real, u.Effective)
	}
	evidence(t, "agentbox inspect --security: pass=%v over %d host processes %v (the Sentry, the gofer, stubs): NoNewPrivs 1, Seccomp 2, caps within gVisor's in its own user namespace, host uids of the sandbox range, sandbox cgroups, no host file open; the test's own /proc reading agrees on %d; gVisor's kernel runs the user's exec as uid %d",
		rep.Pass, len(rep.Processes), roles, len(checked), p.Status.UID.Real)
}

// checkPostureMicrovm: a microvm sandbox's processes are the guest
// kernel's; on the host it is QEMU alone. With a background process, a
// root exec and a user exec running inside, the daemon's posture check
// (posture.CheckMicrovm) must pass on QEMU and the test reads QEMU's
// essentials from /proc itself (qemuPosture): an unprivileged uid, no
// capabilities, no_new_privs, seccomp, alone in the sandbox's cgroups.
// Inside, the user exec runs as uid 1000 with no_new_privs and the guest
// kernel is not the host's.
func checkPostureMicrovm(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: "microvm"})
	mustSh(t, id, "sleep 20 >/dev/null 2>&1 &")
	root := goExec(id, api.ExecRequest{Cmd: []string{"sleep", "2"}})
	user := goExec(id, api.ExecRequest{Shell: "grep -E '^(Uid|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t\\n' '  '; sleep 2.5", User: "user"})
	defer func() { <-root }()
	time.Sleep(time.Second)
	_, _, ev := qemuPosture(t, id)
	u := <-user
	if u.err != nil {
		t.Fatal(u.err)
	}
	var host unix.Utsname
	_ = unix.Uname(&host)
	guestKernel := mustSh(t, id, "uname -r")
	inside := strings.Join(strings.Fields(u.res.Stdout), " ")
	evidence(t, "%s; inside: guest kernel %s, a user exec: %s", ev, guestKernel, inside)
	if guestKernel == strings.TrimRight(string(host.Release[:]), "\x00") {
		t.Errorf("the sandbox runs on the host's kernel %s", guestKernel)
	}
	if !strings.Contains(inside, "Uid: 1000 1000 1000 1000") || !strings.Contains(inside, "NoNewPrivs: 1") {
		t.Errorf("a user exec inside runs as %q; want uid 1000 with NoNewPrivs 1", inside)
	}
}
