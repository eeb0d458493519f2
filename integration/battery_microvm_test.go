package integration

// Battery verdicts for the microvm tier where the container tier's read
// host state a virtual machine does not have: the sandbox's processes run
// on the guest's own kernel, which is the boundary, and the host runs
// QEMU alone for it. So the host reads what it can: QEMU's posture (an
// unprivileged uid of the sandbox's range, no capabilities, no_new_privs,
// seccomp, namespaces of its own, nothing but the VM's own files open;
// posture.CheckMicrovm through GET /v1/sandboxes/{id}/security, and
// QEMU's /proc status read here), QEMU alone in the sandbox's cgroups and
// those cgroups' counters within the sandbox's caps; the limits inside
// are the guest kernel's (its pids cgroup, the VM's RAM and disk), read
// through the agent as evidence.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// microvmMinMemoryMB is the least memory a microvm sandbox may ask for
// (drivers/microvm.MinMemoryMB): its VM's RAM holds the guest kernel too.
const microvmMinMemoryMB = 128

// memoryFor is an item's memory limit on tier: the item's own, or the
// least the microvm tier boots in where that is more.
func memoryFor(tier string, mb int64) int64 {
	if tier == "microvm" {
		return max(mb, microvmMinMemoryMB)
	}
	return mb
}

// qemuPosture checks, on the host, the QEMU of microvm sandbox id: the
// daemon's posture check passes on it, it is alone in the sandbox's
// cgroups, and its /proc status shows an unprivileged uid, no
// capabilities, no_new_privs and seccomp filter mode. It returns QEMU's
// pid and host uid and a line of evidence.
func qemuPosture(t testing.TB, id string) (pid, uid int, ev string) {
	t.Helper()
	pid = sandboxPid(t, id)
	rep, err := env.client.SandboxSecurity(context.Background(), id)
	if err != nil {
		t.Fatalf("posture check: %v", err)
	}
	if !rep.Pass {
		for _, p := range rep.Processes {
			for _, c := range p.Checks {
				if !c.Pass {
					t.Errorf("posture check, pid %d (%s): %s = %q, want %s", p.Pid, p.Comm, c.Name, c.Got, c.Want)
				}
			}
		}
	}
	if pids := sandboxPids(id); len(pids) != 1 || pids[0] != pid {
		t.Errorf("the sandbox's cgroups hold %v; want QEMU (%d) alone", pids, pid)
	}
	st, err := procStatus(pid)
	if err != nil {
		t.Fatalf("QEMU's status: %v", err)
	}
	uids := strings.Fields(st["Uid"])
	if len(uids) > 0 {
		uid, _ = strconv.Atoi(uids[0])
	}
	for _, u := range append(uids, strings.Fields(st["Gid"])...) {
		if n, _ := strconv.Atoi(u); n < env.cfg.UIDBase || u != uids[0] {
			t.Errorf("QEMU runs as host uids/gids %s / %s; want one unprivileged id of the sandbox's range", st["Uid"], st["Gid"])
			break
		}
	}
	for _, c := range []string{"CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"} {
		if v, err := strconv.ParseUint(st[c], 16, 64); err != nil || v != 0 {
			t.Errorf("QEMU %s %q, want 0", c, st[c])
		}
	}
	if st["NoNewPrivs"] != "1" || st["Seccomp"] != "2" {
		t.Errorf("QEMU NoNewPrivs %q Seccomp %q, want 1 and 2", st["NoNewPrivs"], st["Seccomp"])
	}
	ev = fmt.Sprintf("host: QEMU pid %d alone in the sandbox's cgroups, uid %d, caps 0, NoNewPrivs 1, Seccomp 2, posture check pass=%v (%d checks)",
		pid, uid, rep.Pass, countChecks(rep))
	return pid, uid, ev
}

func countChecks(rep *api.SecurityReport) int {
	n := 0
	for _, p := range rep.Processes {
		n += len(p.Checks)
	}
	return n
}

// destroyLeavesNothing destroys microvm sandbox id and checks that its
// QEMU and its cgroups are gone.
func destroyLeavesNothing(t *testing.T, id string, qemu int) {
	t.Helper()
	if err := env.client.DestroySandbox(context.Background(), id); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	var remains []string
	for _, ctrl := range []string{"cpu", "cpuacct", "memory", "pids", "freezer"} {
		if _, err := os.Stat(cgroupPath(ctrl, id)); err == nil {
			remains = append(remains, cgroupPath(ctrl, id))
		}
	}
	if pidAlive(qemu) {
		remains = append(remains, fmt.Sprintf("QEMU pid %d", qemu))
	}
	evidence(t, "after destroy: %v", remains)
	if len(remains) > 0 {
		t.Errorf("destroy left %v", remains)
	}
}

// guestCount runs a shell count inside and returns it (-1 on error).
func guestCount(id, script string) int {
	out, err := execOnce(id, script)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return -1
	}
	return n
}

// guestPidsDir is the guest kernel's pids cgroup of the workload, which
// the agent makes in the VM (internal/guest/vminit).
const guestPidsDir = "/sys/fs/cgroup/pids/workload"

// itemForkBombMicrovm (01): the same fork and thread bombs; the limit is
// the guest kernel's pids cgroup (read inside); on the host QEMU stays
// alone in the sandbox's cgroups with its threads within their pids.max,
// and the bombed VM is destroyed without a trace.
func itemForkBombMicrovm(t *testing.T, b *battery) {
	const limit = 64
	id := b.hostileSandbox(t, api.CreateSandboxRequest{Pids: limit})
	if got := mustSh(t, id, "cat "+guestPidsDir+"/pids.max"); got != strconv.Itoa(limit) {
		t.Errorf("the guest's workload pids.max = %q, want %d", got, limit)
	}
	qemu, _, ev := qemuPosture(t, id)
	hostMax := readHostInt(t, filepath.Join(cgroupPath("pids", id), "pids.max"))
	hostPeak := sample(50*time.Millisecond, func() int64 { return readHostInt(t, filepath.Join(cgroupPath("pids", id), "pids.current")) })
	res := b.hostile(t, id, api.ExecRequest{Shell: `for i in $(seq 300); do sleep 30 & done 2>/dev/null
bomb() { bomb | bomb & }; bomb 2>/dev/null; sleep 30`, TimeoutMs: 3000})
	answers := alive(id)
	// The fork bomb's cgroup may still be full (an exec there cannot
	// fork its cat); the thread bomb's is free once the probe exits.
	inside := guestCount(id, "cat "+guestPidsDir+"/pids.current")
	id2 := b.hostileSandbox(t, api.CreateSandboxRequest{Pids: limit})
	thr := b.hostile(t, id2, api.ExecRequest{Cmd: []string{"/tmp/probe", "threads", "1000"}, TimeoutMs: 3000})
	events := guestCount(id2, "grep max "+guestPidsDir+"/pids.events | cut -d' ' -f2")
	maxHost := hostPeak.Stop()
	evidence(t, "fork bomb under the guest's pids.max %d: timed_out=%v, next exec: %v, guest workload pids.current after %d (-1: no exec could fork to read it); thread bomb: exit %d %s, its guest pids.events max=%d; host: the sandbox's cgroup peaked at %d tasks (QEMU's threads; its pids.max %d); %s",
		limit, res.TimedOut, errClass(answers), inside, thr.ExitCode, lastLine(thr.Stderr), events, maxHost, hostMax, ev)
	if thr.ExitCode == 0 {
		t.Errorf("the thread bomb finished 1000 threads under a pids limit of %d: %s", limit, thr.Stdout)
	}
	if inside > limit {
		t.Errorf("the guest's workload holds %d tasks; the limit is %d", inside, limit)
	}
	if events < 1 {
		t.Errorf("the thread bomb's sandbox counted %d hits of its pids limit (guest pids.events max): the limit never held it", events)
	}
	if maxHost > hostMax {
		t.Errorf("the host saw %d tasks in the sandbox's cgroup; its pids.max is %d", maxHost, hostMax)
	}
	if err := alive(id2); err != nil {
		t.Errorf("sandbox does not answer after the thread bomb: %v", err)
	}
	if answers != nil && !errors.Is(answers, errdefs.ErrResourceExhausted) {
		t.Errorf("sandbox does not answer after the fork bomb: %v", answers)
	}
	destroyLeavesNothing(t, id, qemu)
}

// itemMemoryBombMicrovm (02): the sandbox's memory is its VM's RAM, so
// the bombs meet the guest kernel's OOM killer; on the host the
// sandbox's cgroup (RAM plus QEMU's reserve) stays within its cap, the
// host's OOM killer is not involved, and QEMU lives on.
func itemMemoryBombMicrovm(t *testing.T, b *battery) {
	limitMB := memoryFor(b.tier, 64)
	id := b.hostileSandbox(t, api.CreateSandboxRequest{MemoryMB: limitMB})
	qemu, _, ev := qemuPosture(t, id)
	cg := cgroupPath("memory", id)
	whole := readHostInt(t, filepath.Join(cg, "memory.limit_in_bytes"))
	hostOOMBefore := keyedValue(t, filepath.Join(cg, "memory.oom_control"), "oom_kill")
	guestOOMBefore := guestCount(id, "grep oom_kill /proc/vmstat | cut -d' ' -f2")
	shm := b.hostile(t, id, api.ExecRequest{Shell: "dd if=/dev/zero of=/dev/shm/fill bs=1M count=512 2>&1 | tail -n1; echo rc=$?; rm -f /dev/shm/fill", TimeoutMs: 60000})
	heap := b.hostile(t, id, api.ExecRequest{Cmd: []string{"/tmp/probe", "alloc", "1024"}, TimeoutMs: 60000})
	hostOOMAfter := keyedValue(t, filepath.Join(cg, "memory.oom_control"), "oom_kill")
	peak := readHostInt(t, filepath.Join(cg, "memory.max_usage_in_bytes"))
	answers := alive(id)
	guestOOMAfter := guestCount(id, "grep oom_kill /proc/vmstat | cut -d' ' -f2")
	evidence(t, "VM RAM %d MiB: shm: %s; heap: signal %q last %s; guest oom_kill %d -> %d; host: the sandbox cgroup's oom_kill %d -> %d, max_usage %d MiB (cap %d MiB: RAM + QEMU's reserve); %s",
		limitMB, strings.ReplaceAll(strings.TrimSpace(shm.Stdout), "\n", " "), heap.Signal, lastLine(heap.Stdout), guestOOMBefore, guestOOMAfter, hostOOMBefore, hostOOMAfter, peak>>20, whole>>20, ev)
	if strings.Contains(heap.Stdout, "alloc_done") {
		t.Errorf("the heap bomb allocated 1 GiB in a VM of %d MiB", limitMB)
	}
	const slack = 2 << 20
	if peak > whole+slack {
		t.Errorf("sandbox memory.max_usage_in_bytes %d is above its cap %d", peak, whole)
	}
	if hostOOMAfter != hostOOMBefore {
		t.Errorf("the host's OOM killer acted in the sandbox's cgroup (oom_kill %d -> %d): the VM's RAM is not what bounds it", hostOOMBefore, hostOOMAfter)
	}
	if guestOOMAfter <= guestOOMBefore {
		t.Errorf("the guest kernel counted no OOM kill (%d -> %d): the bombs did not reach the VM's RAM", guestOOMBefore, guestOOMAfter)
	}
	if !pidAlive(qemu) {
		t.Errorf("QEMU (host pid %d) died in the bomb", qemu)
	}
	if answers != nil {
		t.Errorf("sandbox does not answer after its OOM: %v", answers)
	}
	if _, err := env.client.Health(context.Background()); err != nil {
		t.Errorf("daemon unhealthy after the memory bomb: %v", err)
	}
}

// itemTimeoutEscapeMicrovm (07): the sleepers that ignore TERM and leave
// the exec's session must not outlive its timeout. The guest's processes
// are not the host's to read: they are counted inside (ps through the
// agent, as the other tiers' hosts count them); on the host QEMU stays
// alone in the sandbox's cgroups, and destroy leaves nothing.
func itemTimeoutEscapeMicrovm(t *testing.T, b *battery) {
	id := b.sandbox(t, api.CreateSandboxRequest{})
	qemu, _, ev := qemuPosture(t, id)
	script := `trap '' TERM HUP
( trap '' TERM; setsid sh -c 'trap "" TERM HUP; sleep 1001' & )
( ( trap '' TERM; exec sleep 1002 ) & )
( setsid sh -c '( trap "" TERM; sleep 1003 & ) ; sleep 1004' & )
sleep 1005`
	const count = `for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline; echo; done 2>/dev/null | grep -c '^sleep 100[1-5] $'; true`
	ch := goExec(id, api.ExecRequest{Shell: script, TimeoutMs: escapeTimeoutMs})
	during := waitCount(func() int { return guestCount(id, count) }, func(n int) bool { return n >= 5 }, escapeTimeoutMs*time.Millisecond*8/10)
	out := <-ch
	if out.err != nil {
		t.Fatalf("exec: %v", out.err)
	}
	left := waitCount(func() int { return guestCount(id, count) }, func(n int) bool { return n == 0 }, 30*time.Second)
	evidence(t, "sleepers inside during %d; timed_out=%v after %.0f ms; left inside after: %d; %s",
		during, out.res.TimedOut, out.res.DurationMs, left, ev)
	if during < 5 {
		t.Errorf("only %d sleepers ran: the script did not start them", during)
	}
	if !out.res.TimedOut {
		t.Errorf("exec was not flagged timed out")
	}
	if out.res.DurationMs > escapeTimeoutMs+60000 {
		t.Errorf("exec with a %d ms timeout took %.0f ms: its processes held it past the timeout", escapeTimeoutMs, out.res.DurationMs)
	}
	if left != 0 {
		t.Errorf("%d sleepers outlived the timeout", left)
	}
	if pids := sandboxPids(id); len(pids) != 1 || pids[0] != qemu {
		t.Errorf("after the timeout the sandbox's cgroups hold %v; want QEMU (%d) alone", pids, qemu)
	}
	destroyLeavesNothing(t, id, qemu)
}

// itemKillAllMicrovm (08): a zombie storm and kill -9 -1 inside. The
// zombies are the guest kernel's (counted inside); on the host, sleepers
// as root, as QEMU's very uid and as uid_base must survive, and so must
// QEMU.
func itemKillAllMicrovm(t *testing.T, b *battery) {
	id := b.sandbox(t, api.CreateSandboxRequest{Pids: 256})
	qemu, uid, ev := qemuPosture(t, id)
	sleepers := hostSleepers(t, uid)
	storm := goExec(id, api.ExecRequest{Shell: stormShell, TimeoutMs: 150000})
	const zombies = `grep -h '^State:' /proc/[0-9]*/status 2>/dev/null | grep -c Z; true`
	z := waitCount(func() int { return guestCount(id, zombies) }, func(n int) bool { return n >= stormZombies }, time.Minute)
	kill := b.hostile(t, id, api.ExecRequest{Shell: "sleep 30 & sleep 30 & kill -9 -1; echo rc=$?", TimeoutMs: 10000})
	<-storm
	var dead []int
	for _, c := range sleepers {
		if !pidAlive(c.Process.Pid) {
			dead = append(dead, c.Process.Pid)
		}
	}
	zAfter := waitCount(func() int { return guestCount(id, zombies) }, func(n int) bool { return n == 0 }, time.Minute)
	evidence(t, "zombies inside during the storm: %d, after: %d; kill -9 -1: %q; host sleepers (root, QEMU's uid %d, %d, uid_base) killed: %v; %s",
		z, zAfter, strings.TrimSpace(kill.Stdout), uid, uid+1000, dead, ev)
	if z < stormZombies {
		t.Errorf("the zombie storm made %d zombies in a minute, want %d; the test did not run", z, stormZombies)
	}
	if len(dead) > 0 {
		t.Errorf("kill -9 -1 inside a sandbox killed host processes %v", dead)
	}
	if !pidAlive(qemu) {
		t.Errorf("the sandbox's QEMU died")
	}
	if err := alive(id); err != nil {
		t.Errorf("sandbox does not answer after kill -9 -1: %v", err)
	}
	if err := alive(b.sib); err != nil {
		t.Errorf("sibling sandbox does not answer: %v", err)
	}
	if zAfter != 0 {
		t.Errorf("%d zombies remain in the sandbox a minute after kill -9 -1", zAfter)
	}
}

// itemSetuidMicrovm (25): a setuid-root binary run by user 1000 stays
// user 1000 (the agent runs user code with no_new_privs), read inside;
// whatever it became, it would be a user of the guest's kernel: on the
// host the only process is QEMU, unprivileged.
func itemSetuidMicrovm(t *testing.T, b *battery) {
	id := b.hostileSandbox(t, api.CreateSandboxRequest{})
	mustSh(t, id, "cp /tmp/probe /tmp/suid && chown 0:0 /tmp/suid && chmod 4755 /tmp/suid")
	ch := goExec(id, api.ExecRequest{Cmd: []string{"/tmp/suid", "ids", "3"}, User: "user", TimeoutMs: 10000})
	time.Sleep(time.Second)
	_, _, ev := qemuPosture(t, id)
	out := <-ch
	if out.err != nil {
		t.Fatal(out.err)
	}
	evidence(t, "inside: %q; %s", strings.TrimSpace(out.res.Stdout), ev)
	if !strings.HasPrefix(out.res.Stdout, "ids 1000 1000 1000 nnp=1") {
		t.Errorf("inside the sandbox the setuid binary reports %q", out.res.Stdout)
	}
}

// itemFDsCwdMicrovm (26): an exec'd process holds fds 0-2 only (read in
// the guest's /proc by another exec), QEMU holds no host file beyond the
// VM's own (the posture check), and /proc magic links as cwd are
// refused.
func itemFDsCwdMicrovm(t *testing.T, b *battery) {
	id := b.sandbox(t, api.CreateSandboxRequest{})
	ch := goExec(id, api.ExecRequest{Cmd: []string{"sleep", "3"}})
	var fds string
	waitCount(func() int {
		fds = strings.Join(strings.Fields(sh(t, id, `for p in $(pidof sleep); do ls /proc/$p/fd; done 2>/dev/null; true`).Stdout), " ")
		return len(fds)
	}, func(n int) bool { return n > 0 }, 10*time.Second)
	_, _, ev := qemuPosture(t, id)
	<-ch
	evidence(t, "the guest's /proc shows fds %q of an exec'd process; %s", fds, ev)
	if fds != "0 1 2" {
		t.Errorf("an exec'd process has fds %q; want only 0 1 2", fds)
	}
	checkCwdTricks(t, b, id)
}

// guestOwnMount says whether a finding of posture.MountinfoLeaks in a
// microvm guest's mount table is the guest's own root overlay: its
// layers and writable disk are mounted by the agent at /layers/N and
// /rw inside the VM, paths of the guest's, not of the host's layout.
func guestOwnMount(finding string) bool {
	for _, p := range []string{"lowerdir=/layers/", "upperdir=/rw/", "workdir=/rw/"} {
		if strings.HasPrefix(finding, p) {
			return true
		}
	}
	return false
}

// checkGuestDisks: the block devices a microvm guest lists are its own
// virtio disks, as many as the disk images (template layers and the
// writable disk) its QEMU holds open on the host.
func checkGuestDisks(t testing.TB, id string, inside []string) {
	t.Helper()
	qemu := sandboxPid(t, id)
	images := map[string]bool{}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", qemu))
	for _, e := range ents {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", qemu, e.Name()))
		if strings.HasSuffix(target, ".erofs") || strings.HasSuffix(target, "/microvm-rw.img") {
			images[target] = true
		}
	}
	var vd []string
	for _, d := range inside {
		switch {
		case strings.HasPrefix(d, "vd"):
			vd = append(vd, d)
		case strings.HasPrefix(d, "loop"), strings.HasPrefix(d, "ram"):
		default:
			t.Errorf("the guest lists block device %s, not one of its virtio disks", d)
		}
	}
	evidence(t, "guest disks %v; QEMU holds %d disk images on the host", vd, len(images))
	if len(vd) != len(images) {
		t.Errorf("the guest lists disks %v; its QEMU holds %d disk images", vd, len(images))
	}
}
