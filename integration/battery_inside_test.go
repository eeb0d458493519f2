package integration

// Battery items on what a program inside a sandbox sees of the host
// (docs/sandbox-view.md): its mount table, and the host-wide counters of
// /proc. The verdict compares what the sandbox reads with what the host
// reads itself.

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/posture"
	"github.com/agentbox/agentbox/internal/storage"
)

// hostPaths are the daemon's directories, which nothing a sandbox reads
// may name.
func hostPaths() []string {
	return []string{env.cfg.DataDir, env.cfg.RunDir, "/var/lib/agentbox", "/run/agentbox"}
}

// itemMountinfo (33): /proc/self/mountinfo inside names nothing of the
// host's layout (the root overlay's layers were the pool's paths).
// Container tier: the host reads the init's mount table (what the
// sandbox's processes see) and the posture check must pass; gvisor: the
// table is gVisor's own, read inside; microvm: the table is the guest
// kernel's, read inside, and the host checks QEMU's posture (no host
// file open but the VM's own).
func itemMountinfo(t *testing.T, b *battery) {
	id := b.shared(t)
	res := b.hostile(t, id, api.ExecRequest{Shell: `cat /proc/self/mountinfo; echo ==; cat /proc/1/mountinfo`})
	inside := res.Stdout
	if !strings.Contains(inside, " / / ") {
		t.Fatalf("no root mount in the sandbox's mountinfo:\n%s", inside)
	}
	bad := posture.MountinfoLeaks(inside, hostPaths())
	if b.tier == "microvm" {
		bad = slices.DeleteFunc(bad, guestOwnMount)
	}
	if len(bad) > 0 {
		t.Errorf("the sandbox's mountinfo shows the host's layout: %v\n%s", bad, inside)
	}
	if b.tier == "microvm" {
		// The table is the guest kernel's, not the host's to read; the
		// host's side of the VM is QEMU, which holds no host file but
		// the VM's own.
		_, _, ev := qemuPosture(t, id)
		evidence(t, "%s", ev)
	}
	if b.tier != "gvisor" && b.tier != "microvm" {
		hostView, err := os.ReadFile("/proc/" + strconv.Itoa(sandboxPid(t, id)) + "/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if bad := posture.MountinfoLeaks(string(hostView), hostPaths()); len(bad) > 0 {
			t.Errorf("the init's mount table, read on the host, shows the host's layout: %v", bad)
		}
		root := firstLineWith(string(hostView), " / / ")
		if !strings.Contains(root, "lowerdir=/proc/self/fd/") {
			t.Errorf("the root overlay, read on the host: %q; want its layers named by fd", root)
		}
		evidence(t, "root mount read on the host: %s", root)
	}
	rep, err := env.client.SandboxSecurity(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	// gVisor's table and the guest kernel's are not the host's to read.
	found := b.tier == "gvisor" || b.tier == "microvm"
	for _, p := range rep.Processes {
		for _, c := range p.Checks {
			if c.Name == "mountinfo hides the host" {
				found = true
				if !c.Pass {
					t.Errorf("inspect --security: %s = %s", c.Name, c.Got)
				}
			}
		}
	}
	if !found {
		t.Errorf("inspect --security has no mountinfo check: %+v", rep)
	}
	evidence(t, "%d mounts inside, none naming a host path; security report pass=%v", strings.Count(inside, "\n")/2, rep.Pass)
	cgroupsHideHost(t, b, id)
}

// cgroupsHideHost: /proc/self/cgroup of an exec and of PID 1 name no
// host cgroup: each sandbox process sits in a cgroup namespace rooted at
// its sandbox's cgroup (made at the init's clone, or by the init), so a
// path is "/" or below it, never "..", the daemon's cgroup parent or a
// waiting init's cgroup.
func cgroupsHideHost(t *testing.T, b *battery, id string) {
	res := b.hostile(t, id, api.ExecRequest{Shell: `cat /proc/self/cgroup; echo ==; cat /proc/1/cgroup`})
	var paths int
	for line := range strings.Lines(res.Stdout) {
		line = strings.TrimSpace(line)
		if line == "" || line == "==" {
			continue
		}
		_, rest, _ := strings.Cut(line, ":")
		_, path, ok := strings.Cut(rest, ":")
		paths++
		if !ok || !strings.HasPrefix(path, "/") || strings.Contains(path, "..") ||
			strings.Contains(path, env.cfg.CgroupParent) || strings.Contains(path, "init-") {
			t.Errorf("a cgroup path inside names the host's: %q", line)
		}
	}
	if paths == 0 {
		t.Fatalf("no cgroup lines inside:\n%s", res.Stdout)
	}
	evidence(t, "/proc/self/cgroup and /proc/1/cgroup inside: %d paths, each at or below the sandbox's own root", paths)
}

// itemHostCounters (34): the host-wide counters of /proc say nothing of
// the host or of other tenants: the host's boot line and boot id, the
// number of cgroups (which grows with every sandbox), the storage pool's
// disk I/O.
func itemHostCounters(t *testing.T, b *battery) {
	id := b.shared(t)
	const script = `echo "cmdline=$(cat /proc/cmdline 2>/dev/null)"
echo "bootid=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
echo "cgroups=$(awk 'NR>1{s+=$3} END{print s+0}' /proc/cgroups 2>/dev/null)"
echo "diskstats=$(cat /proc/diskstats 2>/dev/null | awk '{print $3}' | tr '\n' ' ')"`
	read := func() map[string]string {
		res := b.hostile(t, id, api.ExecRequest{Shell: script})
		out := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				out[k] = strings.TrimSpace(v)
			}
		}
		return out
	}
	before := read()
	hostCmdline, _ := os.ReadFile("/proc/cmdline")
	hostBootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if c := strings.TrimSpace(string(hostCmdline)); c != "" && strings.Contains(before["cmdline"], c) {
		t.Errorf("the sandbox reads the host's boot line %q", c)
	}
	if h := strings.TrimSpace(string(hostBootID)); before["bootid"] == h {
		t.Errorf("the sandbox reads the host's boot id %s", h)
	}
	hostDisks, _ := os.ReadFile("/proc/diskstats")
	if b.tier == "microvm" {
		// The guest's disks are its own virtio disks (vda, vdb...,
		// named as a host's may be): as many as the disk images QEMU
		// holds, read on the host.
		checkGuestDisks(t, id, strings.Fields(before["diskstats"]))
		hostDisks = nil
	}
	for _, line := range strings.Split(string(hostDisks), "\n") {
		if f := strings.Fields(line); len(f) > 3 && slices.Contains(strings.Fields(before["diskstats"]), f[2]) {
			t.Errorf("the sandbox's /proc/diskstats shows the host's %s", f[2])
		}
	}
	// Another tenant's sandbox appears: the count inside stays.
	b.sandbox(t, api.CreateSandboxRequest{})
	after := read()
	if before["cgroups"] != after["cgroups"] {
		t.Errorf("/proc/cgroups inside counted %s cgroups, %s after a sandbox was created elsewhere", before["cgroups"], after["cgroups"])
	}
	evidence(t, "cmdline %q (host's differs), boot id %s (host's %s), cgroups %s before and after another sandbox, diskstats %q",
		before["cmdline"], before["bootid"], strings.TrimSpace(string(hostBootID)), after["cgroups"], before["diskstats"])
}

func firstLineWith(s, sub string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			return line
		}
	}
	return ""
}

// itemSysview (35): sysinfo, statfs and sched_getaffinity, which the
// container tier's agent answers itself through seccomp user
// notifications (internal/guest/sysview), turned against it: NULL and
// kernel pointers get the kernel's EFAULT (nothing is written anywhere),
// a buffer too short for the mask the kernel's EINVAL, a path running
// off its mapping the kernel's error, 16 threads x 500 calls at once
// all the same answer, 50 callers killed in the middle of their calls
// leave nothing waiting; then, read on the host, the agent is the same
// process with no more threads than it had, the root's size is the
// layer's quota group's limit, sysinfo's memory the memory cgroup's
// limit and the Go runtime's CPU count 1 in a cpu: 1 sandbox (gvisor:
// gVisor's own answers, and its MemTotal the same limit).
func itemSysview(t *testing.T, b *battery) {
	if b.tier == "microvm" {
		evidence(t, "the guest kernel answers sysinfo and statfs (a VM's figures are its own by construction)")
		return
	}
	id := b.hostileSandbox(t, api.CreateSandboxRequest{MemoryMB: 256, DiskMB: 400, CPU: 1})
	pid := sandboxPid(t, id)
	threads := func() int {
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(firstLineWith(string(st), "Threads:"), "Threads:")))
		return n
	}
	before := threads()
	got, res := b.probeFor(t, id, 2*time.Minute, "sysview", "16", "500")
	for _, p := range []string{"statfs_null_path", "statfs_null_buf", "statfs_kernel_buf", "fstatfs_kernel_buf", "sysinfo_null", "sysinfo_kernel_buf", "statfs_unterminated",
		"getaffinity_null", "getaffinity_kernel_buf"} {
		if got[p] != "EFAULT" {
			t.Errorf("%s: %s, want EFAULT as the kernel answers\n%s", p, got[p], res.Stdout)
		}
	}
	if got["getaffinity_short"] != "EINVAL" {
		t.Errorf("sched_getaffinity into 1 byte: %s, want the kernel's EINVAL\n%s", got["getaffinity_short"], res.Stdout)
	}
	for _, p := range []string{"flood", "killed_callers", "root", "memtotal", "cpus"} {
		if got[p] != "OK" {
			t.Errorf("%s: %s\n%s", p, got[p], res.Stdout+res.Stderr)
		}
	}
	answer := func(name string) int64 {
		for line := range strings.Lines(res.Stdout) {
			if f := strings.Fields(line); len(f) == 3 && f[0] == name {
				n, _ := strconv.ParseInt(f[2], 10, 64)
				return n
			}
		}
		return -1
	}
	memLimit := readHostInt(t, cgroupPath("memory", id)+"/memory.limit_in_bytes")
	if got := answer("memtotal"); got != memLimit {
		t.Errorf("sysinfo's total memory %d, want the memory cgroup's limit %d read on the host", got, memLimit)
	}
	if b.tier == "container" {
		qdir, err := storage.QgroupSysfsDir(filepath.Join(env.cfg.DataDir, "storage", "sandboxes", id))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := answer("root"), readHostInt(t, qdir+"/max_referenced"); got != want {
			t.Errorf("statfs of the root says %d bytes, want the layer's limit %d read on the host", got, want)
		}
		// cpu: 1 on a host of 2 or more CPUs: the Go runtime counts 1.
		if host := runtime.NumCPU(); host > 1 {
			if got := answer("cpus"); got != 1 {
				t.Errorf("the probe's runtime.NumCPU() is %d in a cpu: 1 sandbox, want 1 (the host has %d)", got, host)
			}
		}
		if now := sandboxPid(t, id); now != pid {
			t.Errorf("the agent is pid %d now, %d before: it was restarted", now, pid)
		}
		if after := threads(); after > before+8 {
			t.Errorf("the agent has %d threads after the flood, %d before", after, before)
		}
	}
	if r := b.hostile(t, id, api.ExecRequest{Shell: "echo alive"}); r.Stdout != "alive\n" {
		t.Errorf("the sandbox no longer answers after the item: %+v", r)
	}
	evidence(t, "bad pointers EFAULT; %s; root %d bytes, memory %d, %d CPUs; agent threads %d -> %d", strings.TrimSpace(firstLineWith(res.Stdout, "flood ")), answer("root"), answer("memtotal"), answer("cpus"), before, threads())
}
