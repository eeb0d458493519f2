package integration

// Memory snapshots on the microvm tier (QEMU's migration of the device
// state to a file plus an image of the guest's RAM, restored with
// -incoming, drivers/microvm/checkpoint_linux.go): pause to disk across a
// daemon restart, a snapshot with memory and a create from it (with a
// network of its own), fork with memory. The python3 server of
// gvisor_memory_test.go holds its state only in memory. Each test logs
// its timings; AGENTBOX_MICROVM_SAMPLES=n repeats the timed step n times
// and logs the median (docs/microvm.md's figures).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// samples is how many times the memory tests time each step (1 in CI).
func samples() int {
	n, err := strconv.Atoi(os.Getenv("AGENTBOX_MICROVM_SAMPLES"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// ms is the median of ds (state_test.go's p50) to the millisecond.
func ms(ds []time.Duration) time.Duration { return p50(ds).Round(time.Millisecond) }

// TestMicrovmPauseToDisk: a live python3 server's VM is saved to disk (no
// QEMU left on the host), the daemon restarts, resume restores the VM and
// the server's memory is as it was, its thread still counting.
func TestMicrovmPauseToDisk(t *testing.T) {
	needMicrovm(t)
	needBase(t)
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "microvm"})
	v0, n0 := startMemServer(t, id)
	mustSh(t, id, "echo on-disk > /root/file")
	before, err := env.client.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}

	var pauses, resumes []time.Duration
	dir := filepath.Join(env.cfg.DataDir, "checkpoints", id)
	for i := range samples() {
		t0 := time.Now()
		sb, err := env.client.PauseSandboxToDisk(ctx, id)
		if err != nil {
			t.Fatalf("pause to disk: %v", err)
		}
		pauses = append(pauses, time.Since(t0))
		if sb.State != api.StatePaused || !sb.PausedToDisk {
			t.Fatalf("after pause to disk: state %s, paused_to_disk %v", sb.State, sb.PausedToDisk)
		}
		if i == 0 {
			for _, f := range []string{"state", "ram", "disk.img", "microvm.json"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("the checkpoint lacks %s: %v", f, err)
				}
			}
			var ram syscall.Stat_t
			if fi, err := os.Stat(filepath.Join(dir, "state")); err == nil && syscall.Stat(filepath.Join(dir, "ram"), &ram) == nil {
				t.Logf("the VM's device state: %.1f KiB, its RAM image: %.1f MiB allocated (RAM %d MiB)",
					float64(fi.Size())/(1<<10), float64(ram.Blocks*512)/(1<<20), before.Resources.MemoryMB)
			}
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(before.Pid) + "/cmdline"); err == nil && strings.Contains(string(b), "qemu") {
				t.Errorf("QEMU (pid %d) still runs after pause to disk", before.Pid)
			}
			if _, err := env.client.Exec(ctx, id, api.ExecRequest{Shell: "true"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("exec on a sandbox paused to disk: %v, want failed_precondition", err)
			}
			restartDaemon(t, func() {})
			if sb, err := env.client.GetSandbox(ctx, id); err != nil || sb.State != api.StatePaused || !sb.PausedToDisk {
				t.Fatalf("after the restart: %+v, %v; want paused to disk", sb, err)
			}
		}
		t0 = time.Now()
		if _, err := env.client.ResumeSandbox(ctx, id); err != nil {
			t.Fatalf("resume from disk: %v", err)
		}
		resumes = append(resumes, time.Since(t0))
	}
	v1, n1 := askMem(t, id, "get")
	if v1 != v0 || n1 < n0 {
		t.Errorf("after the restore the server answers %s %d; before it %s %d", v1, n1, v0, n0)
	}
	n2 := waitCount(func() int { _, n := askMem(t, id, "get"); return n }, func(n int) bool { return n > n1 }, time.Minute)
	if n2 <= n1 {
		t.Errorf("the counter thread stopped: %d then %d a minute later", n1, n2)
	}
	if out := mustSh(t, id, "cat /root/file"); out != "on-disk" {
		t.Errorf("the file after the restore: %q", out)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("checkpoint %s is still there after the restore", dir)
	}
	t.Logf("microvm (%s) pause to disk p50 %v, resume from disk p50 %v (%d samples)", before.Accelerator, ms(pauses), ms(resumes), len(pauses))
	// Destroy after a second pause to disk removes its checkpoint.
	if _, err := env.client.PauseSandboxToDisk(ctx, id); err != nil {
		t.Fatalf("second pause to disk: %v", err)
	}
	if err := env.client.DestroySandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("destroy left the checkpoint %s", dir)
	}
}

// TestMicrovmSnapshotWithMemory: a snapshot with memory of a VM with a
// network, then a create from it (its tier chosen from the snapshot):
// the server goes on running with the snapshot's value, the new sandbox
// has its own hostname and its own address (the agent reconfigured the
// interface on the restored VM's hello), and the source goes on.
func TestMicrovmSnapshotWithMemory(t *testing.T) {
	needMicrovm(t)
	needBase(t)
	ctx := context.Background()
	netw := &api.Network{Egress: api.EgressInternet}
	src := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "microvm", Network: netw})
	v0, _ := startMemServer(t, src)
	mustSh(t, src, "echo from-snapshot > /root/file")

	var snaps, creates []time.Duration
	var id string
	for i := range samples() {
		t0 := time.Now()
		snap, err := env.client.CreateMemorySnapshot(ctx, src, "")
		if err != nil {
			t.Fatalf("snapshot with memory: %v", err)
		}
		snaps = append(snaps, time.Since(t0))
		t.Cleanup(func() { _ = env.client.DeleteSnapshot(context.Background(), snap.ID) })
		if !snap.Memory {
			t.Errorf("snapshot %+v does not say memory", snap)
		}
		if i == 0 {
			askMem(t, src, "set changed-after")
			mustSh(t, src, "echo changed-after > /root/file")
		}
		t0 = time.Now()
		sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: snap.ID, Network: netw})
		if err != nil {
			t.Fatalf("create from a memory snapshot: %v", err)
		}
		creates = append(creates, time.Since(t0))
		if i > 0 { // a timing sample only
			_ = env.client.DestroySandbox(ctx, sb.ID)
			_ = env.client.DeleteSnapshot(ctx, snap.ID)
			continue
		}
		t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), sb.ID) })
		id = sb.ID
	}
	sb, err := env.client.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Isolation != "microvm" {
		t.Errorf("created from a microvm memory snapshot on %q", sb.Isolation)
	}
	if v, _ := askMem(t, id, "get"); v != v0 {
		t.Errorf("the restored server answers %q, the snapshot's value is %q", v, v0)
	}
	if out, srcHost := mustSh(t, id, "cat /root/file; hostname"), mustSh(t, src, "hostname"); out == "from-snapshot\n"+srcHost || !strings.HasPrefix(out, "from-snapshot\n") {
		t.Errorf("the restored sandbox's file and hostname: %q, want the snapshot's file and a hostname of its own (the source's is %s)", out, srcHost)
	}
	srcSb, _ := env.client.GetSandbox(ctx, src)
	if sb.Network == nil || sb.Network.Address == "" || srcSb.Network == nil || sb.Network.Address == srcSb.Network.Address {
		t.Fatalf("the restored sandbox's network %+v, the source's %+v: want an address of its own", sb.Network, srcSb.Network)
	}
	addr := mustSh(t, id, "ip -4 -o addr show | grep -v ' lo ' | awk '{print $4}'; ip route | grep -c '^default via'")
	if addr != sb.Network.Address+"\n1" {
		t.Errorf("the restored VM's addresses and default routes: %q, want its own %s and one route", addr, sb.Network.Address)
	}
	if v, _ := askMem(t, src, "get"); v != "changed-after" {
		t.Errorf("the source answers %q after the snapshot", v)
	}
	t.Logf("microvm (%s) snapshot with memory p50 %v, create from it p50 %v (%d samples)", sb.Accelerator, ms(snaps), ms(creates), len(snaps))
	// The tier snapshots with memory only.
	if _, err := env.client.CreateSnapshot(ctx, src, ""); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "with memory") {
		t.Errorf("a snapshot of the files alone: %v, want failed_precondition saying with memory", err)
	}
}

// qemuMemory sums the fields of /proc/PID/smaps_rollup (in KiB) over the
// QEMU processes of sandboxes ids.
func qemuMemory(t *testing.T, ids []string) map[string]int64 {
	t.Helper()
	sum := map[string]int64{}
	for _, id := range ids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", sandboxPid(t, id)))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) == 3 && f[2] == "kB" {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				sum[strings.TrimSuffix(f[0], ":")] += n
			}
		}
	}
	return sum
}

// ramMapping is /proc/pid/smaps's fields (KiB) of the guest RAM mapping
// of QEMU pid: the memfd the microvm driver gives it
// (drivers/microvm/ram_linux.go).
func ramMapping(t *testing.T, pid int) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]int64
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			if in = strings.Contains(l, "memfd:agentbox-vm-ram"); in && m == nil {
				m = map[string]int64{}
			}
			continue
		}
		if in && len(f) == 3 && f[2] == "kB" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			m[strings.TrimSuffix(f[0], ":")] += n
		}
	}
	if m == nil {
		t.Fatalf("QEMU %d maps no guest RAM memfd", pid)
	}
	return m
}

// TestMicrovmForkWithMemory: 3 children of a VM running a python3 server
// each answer with the parent's in-memory value, then change it
// independently; the parent keeps running with its own. The host shows
// the children sharing the snapshot's RAM pages (Pss well below Rss).
func TestMicrovmForkWithMemory(t *testing.T) {
	needMicrovm(t)
	needBase(t)
	ctx := context.Background()
	parent := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "microvm"})
	v0, _ := startMemServer(t, parent)
	mustSh(t, parent, "echo parent > /root/who")

	const count = 3
	var perChild []time.Duration
	var kids []api.Sandbox
	for range samples() {
		t0 := time.Now()
		ks, err := env.client.ForkSandboxWithMemory(ctx, parent, count)
		if err != nil {
			t.Fatalf("fork with memory: %v", err)
		}
		perChild = append(perChild, time.Since(t0)/count)
		for _, k := range ks {
			t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), k.ID) })
		}
		if kids == nil {
			kids = ks
		} else {
			for _, k := range ks {
				_ = env.client.DestroySandbox(ctx, k.ID)
			}
		}
	}
	if len(kids) != count {
		t.Fatalf("%d children", len(kids))
	}
	var kidIDs []string
	for _, k := range kids {
		kidIDs = append(kidIDs, k.ID)
	}
	m := qemuMemory(t, kidIDs)
	t.Logf("microvm fork with memory, %d children's QEMUs: Rss %d MiB, Pss %d MiB, Private_Dirty %d MiB, Shared_Clean %d MiB, Shared_Dirty %d MiB (sums)",
		count, m["Rss"]>>10, m["Pss"]>>10, m["Private_Dirty"]>>10, m["Shared_Clean"]>>10, m["Shared_Dirty"]>>10)
	// The children map the snapshot's RAM image copy-on-write: the host
	// counts the pages none has written once for all (a memfd's pages
	// count as dirty, having no file to be written back to).
	for _, id := range kidIDs {
		r := ramMapping(t, sandboxPid(t, id))
		t.Logf("child %s's guest RAM mapping: Rss %d MiB, Pss %d MiB, shared %d MiB, Private_Dirty %d MiB", id, r["Rss"]>>10, r["Pss"]>>10,
			(r["Shared_Clean"]+r["Shared_Dirty"])>>10, r["Private_Dirty"]>>10)
		if shared := r["Shared_Clean"] + r["Shared_Dirty"]; 2*shared < r["Rss"] || 3*r["Pss"] > 2*r["Rss"] {
			t.Errorf("child %s shares too little of its guest RAM with its siblings: %v", id, r)
		}
	}
	hosts := forkedApart(t, parent, "microvm", v0, kids)
	if len(hosts) != count || hosts[mustSh(t, parent, "hostname")] {
		t.Errorf("children's hostnames %v: want %d of their own", hosts, count)
	}
	if v, _ := askMem(t, parent, "get"); v != v0 {
		t.Errorf("the parent answers %q after the fork, want %q", v, v0)
	}
	if out := mustSh(t, parent, "cat /root/who"); out != "parent" {
		t.Errorf("the parent's file: %q", out)
	}
	t.Logf("microvm (%s) fork with memory, %d children: p50 %v per child (%d samples)", kids[0].Accelerator, count, ms(perChild), len(perChild))
	// A fork of the files alone is refused: they are the VM's disk.
	if _, err := env.client.ForkSandbox(ctx, parent, 1); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a fork without memory: %v, want failed_precondition", err)
	}
}
