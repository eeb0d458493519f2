package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

// Tests of docs/state.md: pause and resume, snapshots, fork, reset,
// persistence and crash safety.

func cpuNanos(t *testing.T, id string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", env.cfg.CgroupParent, id, "cpuacct.usage"))
	if err != nil {
		t.Fatalf("reading cpu usage: %v", err)
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

func p50(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func TestStatePauseStopsCPU(t *testing.T) {
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	mustSh(t, id, "echo kept > /root/f; (while :; do :; done) >/dev/null 2>&1 &")
	time.Sleep(300 * time.Millisecond)
	sb, err := env.client.PauseSandbox(ctx, id)
	if err != nil || sb.State != api.StatePaused {
		t.Fatalf("pause: %+v, %v", sb, err)
	}
	before := cpuNanos(t, id)
	time.Sleep(1 * time.Second)
	if grew := cpuNanos(t, id) - before; grew > int64(20*time.Millisecond) {
		t.Fatalf("a paused sandbox used %v of CPU in 1 s", time.Duration(grew))
	}
	_, err = env.client.Exec(ctx, id, api.ExecRequest{Shell: "true"})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "agentbox resume "+id) {
		t.Fatalf("exec on a paused sandbox: %v; want failed precondition naming agentbox resume", err)
	}
	if sb, err = env.client.ResumeSandbox(ctx, id); err != nil || sb.State != api.StateRunning {
		t.Fatalf("resume: %+v, %v", sb, err)
	}
	// Thawed, the burner runs again: 50 ms of CPU takes it 50 ms alone,
	// and a few seconds at most on a 2-core host shared with other work;
	// frozen, it would never get there.
	before = cpuNanos(t, id)
	t0 := time.Now()
	for grew := int64(0); grew < int64(50*time.Millisecond); grew = cpuNanos(t, id) - before {
		if time.Since(t0) > 20*time.Second {
			t.Fatalf("the burner used only %v of CPU in 20 s after resume", time.Duration(grew))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := mustSh(t, id, "cat /root/f"); got != "kept" {
		t.Fatalf("after resume: %q", got)
	}
	// Latency, as a client sees it.
	var ps, rs []time.Duration
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		if _, err := env.client.PauseSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		if _, err := env.client.ResumeSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		ps, rs = append(ps, t1.Sub(t0)), append(rs, time.Since(t1))
	}
	t.Logf("pause p50 %v, resume p50 %v (API round trip, CPU burner inside)", p50(ps), p50(rs))

	// auto_resume: exec thaws the sandbox.
	ar := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", AutoResume: true})
	if _, err := env.client.PauseSandbox(ctx, ar); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, ar, "echo awake"); got != "awake" {
		t.Fatalf("auto_resume exec: %q", got)
	}
	if sb, _ := env.client.GetSandbox(ctx, ar); sb.State != api.StateRunning {
		t.Fatalf("after auto_resume exec: state %s", sb.State)
	}
}

func TestStateForkIsolation(t *testing.T) {
	ctx := context.Background()
	parent := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Metadata: map[string]string{"who": "parent"}})
	mustSh(t, parent, "mkdir -p /work && echo base > /work/shared && rm /bin/vi")
	kids, err := env.client.ForkSandbox(ctx, parent, 10)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if len(kids) != 10 {
		t.Fatalf("fork returned %d children", len(kids))
	}
	for _, k := range kids {
		t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), k.ID) })
		if k.Parent != parent || k.Snapshot == "" || k.State != api.StateRunning {
			t.Fatalf("child %+v: want parent %s, a snapshot, running", k, parent)
		}
	}
	// The parent keeps running; its later writes stay its own.
	mustSh(t, parent, "echo later > /work/parent-only")
	var wg sync.WaitGroup
	for i, k := range kids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mustSh(t, k.ID, fmt.Sprintf("echo %d > /work/mine && echo %d >> /work/shared", i, i))
		}()
	}
	wg.Wait()
	for i, k := range kids {
		got := mustSh(t, k.ID, "cat /work/mine /work/shared; ls /work; test -e /bin/vi && echo vi-back || true")
		want := fmt.Sprintf("%d\nbase\n%d\nmine\nshared", i, i)
		if got != want {
			t.Errorf("child %d sees %q, want %q", i, got, want)
		}
	}
	if got := mustSh(t, parent, "cat /work/shared; ls /work"); got != "base\nparent-only\nshared" {
		t.Errorf("parent sees %q", got)
	}
	// A fork of a fork stacks one more layer.
	grand, err := env.client.ForkSandbox(ctx, kids[3].ID, 1)
	if err != nil {
		t.Fatalf("fork of a fork: %v", err)
	}
	t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), grand[0].ID) })
	if got := mustSh(t, grand[0].ID, "cat /work/mine"); got != "3" {
		t.Errorf("grandchild sees %q", got)
	}
	// The internal snapshot goes with its last dependent.
	snap := kids[0].Snapshot
	for _, k := range append(kids, grand...) {
		if err := env.client.DestroySandbox(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.client.GetSnapshot(ctx, snap); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("fork's snapshot after its children: %v; want not found", err)
	}
	if _, err := os.Stat(filepath.Join(env.cfg.DataDir, "storage", "snapshots", snap)); err == nil {
		t.Errorf("fork's snapshot %s is left on disk", snap)
	}
}

func TestStateSnapshotConsistent(t *testing.T) {
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	// The writer appends a line, then records the count: a consistent
	// capture has lines == count or count+1, never anything else.
	mustSh(t, id, `mkdir /data; (i=0; while :; do i=$((i+1)); echo line >> /data/log; echo $i > /data/count.tmp; mv /data/count.tmp /data/count; done) >/dev/null 2>&1 &`)
	time.Sleep(200 * time.Millisecond)
	name := "snap-" + randHex(3)
	var last string
	for i := 0; i < 5; i++ {
		n := fmt.Sprintf("%s-%d", name, i)
		snap, err := env.client.CreateSnapshot(ctx, id, n)
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		if snap.Name != n || snap.SandboxID != id || snap.Template != "busybox" || snap.TemplateVersion == "" {
			t.Fatalf("snapshot %+v", snap)
		}
		t.Cleanup(func() { _ = env.client.DeleteSnapshot(context.Background(), snap.ID) })
		sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: n})
		if err != nil {
			t.Fatalf("create from snapshot: %v", err)
		}
		t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), sb.ID) })
		if sb.Snapshot != snap.ID || sb.Template != "busybox" {
			t.Fatalf("sandbox from snapshot: %+v", sb)
		}
		got := mustSh(t, sb.ID, "echo $(wc -l < /data/log) $(cat /data/count)")
		var lines, count int
		fmt.Sscan(got, &lines, &count)
		if lines == 0 || (lines != count && lines != count+1) {
			t.Errorf("snapshot %d: %d lines, count %d: not a consistent capture", i, lines, count)
		}
		last = n
		time.Sleep(100 * time.Millisecond)
	}
	// The source kept running.
	if got := mustSh(t, id, "cat /data/count"); got == "" {
		t.Fatal("source stopped writing")
	}
	// inspect, ls, rm (refused while a sandbox uses it).
	snap, err := env.client.GetSnapshot(ctx, last)
	if err != nil || snap.SizeBytes <= 0 {
		t.Fatalf("inspect: %+v, %v", snap, err)
	}
	out, _, code := cli(t, "", "snapshot", "ls")
	if code != 0 || !strings.Contains(out, last) {
		t.Fatalf("snapshot ls: %d %q", code, out)
	}
	if err := env.client.DeleteSnapshot(ctx, last); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("rm of a snapshot in use: %v; want failed precondition (409)", err)
	}
	// CLI: snapshot, create --snapshot, rm.
	cname := "cli-" + randHex(3)
	out, stderr, code := cli(t, "", "snapshot", id, "--name", cname)
	if code != 0 || strings.TrimSpace(out) != cname {
		t.Fatalf("agentbox snapshot: %d %q %q", code, out, stderr)
	}
	out, stderr, code = cli(t, "", "create", "--snapshot", cname)
	if code != 0 {
		t.Fatalf("create --snapshot: %d %q", code, stderr)
	}
	child := strings.TrimSpace(out)
	if got := mustSh(t, child, "test -s /data/log && echo yes"); got != "yes" {
		t.Fatalf("create --snapshot: %q", got)
	}
	if err := env.client.DestroySandbox(ctx, child); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code = cli(t, "", "snapshot", "rm", cname); code != 0 {
		t.Fatalf("snapshot rm: %d %q", code, stderr)
	}
}

func TestStateReset(t *testing.T) {
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	mustSh(t, id, "echo one > /root/f")
	snap, err := env.client.CreateSnapshot(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	mustSh(t, id, "echo two > /root/g; sleep 1000 &")
	sb, err := env.client.ResetSandbox(ctx, id, "")
	if err != nil || sb.ID != id || sb.State != api.StateRunning {
		t.Fatalf("reset: %+v, %v", sb, err)
	}
	if got := mustSh(t, id, "ls /root; ps | grep -c '[s]leep 1000' || true"); got != "0" {
		t.Fatalf("after reset to the template: %q; want no files, no sleeper", got)
	}
	out, stderr, code := cli(t, "", "reset", id, "--to", snap.ID)
	if code != 0 || strings.TrimSpace(out) != id {
		t.Fatalf("reset --to: %d %q %q", code, out, stderr)
	}
	if got := mustSh(t, id, "cat /root/f; ls /root"); got != "one\nf" {
		t.Fatalf("after reset to the snapshot: %q", got)
	}
	if sb, _ := env.client.GetSandbox(ctx, id); sb.Snapshot != snap.ID {
		t.Errorf("lineage after reset: snapshot %q, want %s", sb.Snapshot, snap.ID)
	}
	// From the second reset on, a standby init takes over: nothing of the
	// old state may show (files, /tmp, processes, exec cgroups).
	for i := 0; i < 3; i++ {
		mustSh(t, id, "echo two > /root/g; echo t > /tmp/t; sleep 1000 & sleep 1001 &")
		time.Sleep(300 * time.Millisecond) // the standby boots
		before, _ := env.client.GetSandbox(ctx, id)
		if _, err := env.client.ResetSandbox(ctx, id, snap.ID); err != nil {
			t.Fatal(err)
		}
		after, _ := env.client.GetSandbox(ctx, id)
		if after.Pid == before.Pid || after.State != api.StateRunning {
			t.Fatalf("reset %d: pid %d -> %d, state %s", i, before.Pid, after.Pid, after.State)
		}
		if got := mustSh(t, id, "ls /root /tmp; ps -o comm | grep -c '^sleep' || true; hostname"); got != "/root:\nf\n\n/tmp:\n0\nsbx-"+id {
			t.Fatalf("after standby reset %d: %q", i, got)
		}
	}
	// A paused sandbox resets too (its standby, frozen with it, is thawed).
	time.Sleep(300 * time.Millisecond)
	if _, err := env.client.PauseSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if sb, err := env.client.ResetSandbox(ctx, id, ""); err != nil || sb.State != api.StateRunning {
		t.Fatalf("reset of a paused sandbox: %+v %v", sb, err)
	}
	if got := mustSh(t, id, "cat /root/f"); got != "one" {
		t.Fatalf("after resetting a paused sandbox: %q", got)
	}
	var ds []time.Duration
	for i := 0; i < 20; i++ {
		mustSh(t, id, "echo x > /root/x")
		t0 := time.Now()
		if _, err := env.client.ResetSandbox(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	if got := mustSh(t, id, "ls /root"); got != "f" {
		t.Fatalf("after resets: %q", got)
	}
	var dc []time.Duration
	for i := 0; i < 10; i++ {
		t0 := time.Now()
		sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox"})
		if err != nil {
			t.Fatal(err)
		}
		if err := env.client.DestroySandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		dc = append(dc, time.Since(t0))
	}
	t.Logf("reset p50 %v over %d; create+destroy p50 %v (API round trips)", p50(ds), len(ds), p50(dc))
	if err := env.client.DestroySandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := env.client.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatalf("rm after its sandbox is gone: %v", err)
	}
	assertNoTrace(t, id)
	// An old init's layer goes in the background: polled.
	var m []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if m, _ = filepath.Glob(filepath.Join(env.cfg.DataDir, "storage", "sandboxes", id+".*")); len(m) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(m) > 0 {
		t.Errorf("standby layers left a minute after destroy: %v", m)
	}
}

// pcts returns p50 and p99 of ds.
func pcts(ds []time.Duration) (time.Duration, time.Duration) {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}

// TestStateMeasure measures the state operations through the Go SDK (so
// every figure includes an HTTP round trip and a store write) on a
// busybox and a base sandbox that each wrote 100 MB: pause, resume,
// snapshot, fork of 1 and of 10 children (per child), reset to the
// template and to a snapshot. It checks a forked child's data on each.
// AGENTBOX_STATE_MEASURE=N sets the rounds (3 by default, which CI runs;
// docs/state.md's figures are from N=30):
//
//	AGENTBOX_STATE_MEASURE=30 go test ./integration -run TestStateMeasure -v
func TestStateMeasure(t *testing.T) {
	needBase(t)
	n := 3
	if v := os.Getenv("AGENTBOX_STATE_MEASURE"); v != "" {
		fmt.Sscan(v, &n)
	}
	ctx := context.Background()
	tpls := []string{"busybox", "base"}
	ids, sums := map[string]string{}, map[string]string{}
	for _, tpl := range tpls {
		id := newSandbox(t, api.CreateSandboxRequest{Template: tpl, DiskMB: 1024})
		mustSh(t, id, "dd if=/dev/urandom of=/root/blob bs=1M count=100 2>/dev/null && sync")
		ids[tpl], sums[tpl] = id, mustSh(t, id, "md5sum /root/blob | cut -d' ' -f1")
	}
	// Every series alternates the templates round by round, so that the
	// machine's load weighs on both alike.
	ds := map[string][]time.Duration{}
	var order []string
	add := func(tpl, what string, d time.Duration) {
		k := fmt.Sprintf("%-8s %s", tpl, what)
		if _, ok := ds[k]; !ok {
			order = append(order, k)
		}
		ds[k] = append(ds[k], d)
	}
	timed := func(f func() error) time.Duration {
		t.Helper()
		t0 := time.Now()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		return time.Since(t0)
	}
	rounds := func(what string, k int, f func(tpl, id string, i int) time.Duration) {
		for i := 0; i < k; i++ {
			for _, tpl := range tpls {
				add(tpl, what, f(tpl, ids[tpl], i))
			}
		}
	}
	rounds("pause", n, func(_, id string, _ int) time.Duration {
		d := timed(func() error { _, err := env.client.PauseSandbox(ctx, id); return err })
		_, _ = env.client.ResumeSandbox(ctx, id)
		return d
	})
	rounds("resume", n, func(_, id string, _ int) time.Duration {
		_, _ = env.client.PauseSandbox(ctx, id)
		return timed(func() error { _, err := env.client.ResumeSandbox(ctx, id); return err })
	})
	rounds("snapshot (100 MB written)", n, func(_, id string, _ int) time.Duration {
		var sn *api.Snapshot
		d := timed(func() (err error) { sn, err = env.client.CreateSnapshot(ctx, id, ""); return err })
		if err := env.client.DeleteSnapshot(ctx, sn.ID); err != nil {
			t.Fatal(err)
		}
		return d
	})
	fork := func(count int) func(tpl, id string, i int) time.Duration {
		return func(tpl, id string, i int) time.Duration {
			var kids []api.Sandbox
			d := timed(func() (err error) { kids, err = env.client.ForkSandbox(ctx, id, count); return err })
			if i == 0 {
				if got := mustSh(t, kids[0].ID, "md5sum /root/blob | cut -d' ' -f1"); got != sums[tpl] {
					t.Fatalf("%s child's blob differs", tpl)
				}
			}
			for _, k := range kids {
				_ = env.client.DestroySandbox(ctx, k.ID)
			}
			return d / time.Duration(count)
		}
	}
	rounds("fork, 1 child", n, fork(1))
	rounds("fork, 10 children (per child)", max(1, n/5), fork(10))

	// Resets, as an RL loop does them: an episode (a command and a 100 ms
	// think) before each. The first reset of a sandbox, and the first to
	// another place, take the full path; the rest switch to the standby.
	snaps := map[string]string{}
	for _, tpl := range tpls {
		sn, err := env.client.CreateSnapshot(ctx, ids[tpl], "")
		if err != nil {
			t.Fatal(err)
		}
		snaps[tpl] = sn.ID
	}
	// The sandboxes started from their template: "" resets to it (after a
	// reset --to, "" would mean that snapshot).
	for _, to := range []string{"", "snapshot"} {
		what := "reset to the template"
		if to != "" {
			what = "reset to a snapshot (100 MB)"
		}
		rounds(what, n+1, func(tpl, id string, i int) time.Duration {
			mustSh(t, id, "echo episode > /tmp/e; echo x > /root/x")
			time.Sleep(100 * time.Millisecond)
			ref := ""
			if to != "" {
				ref = snaps[tpl]
			}
			d := timed(func() error { _, err := env.client.ResetSandbox(ctx, id, ref); return err })
			if i == 0 {
				add(tpl, what+", first (full path)", d)
				return -1
			}
			return d
		})
		for _, tpl := range tpls {
			want := ""
			if to != "" {
				want = "blob"
			}
			if got := mustSh(t, ids[tpl], "ls /root; ls /tmp"); got != want {
				t.Fatalf("%s after %s: %q, want %q", tpl, what, got, want)
			}
		}
	}
	// Back to back: n resets of one sandbox in a row, then the other's.
	for _, tpl := range tpls {
		for i := 0; i < n; i++ {
			add(tpl, "reset, back to back", timed(func() error { _, err := env.client.ResetSandbox(ctx, ids[tpl], ""); return err }))
		}
	}
	for _, k := range order {
		var kept []time.Duration
		for _, d := range ds[k] {
			if d >= 0 {
				kept = append(kept, d)
			}
		}
		a, b := pcts(kept)
		t.Logf("%-46s p50 %7.2f ms  p99 %7.2f ms  (n=%d)", k, float64(a.Microseconds())/1000, float64(b.Microseconds())/1000, len(kept))
	}
	for _, tpl := range tpls {
		if err := env.client.DestroySandbox(ctx, ids[tpl]); err != nil {
			t.Fatal(err)
		}
		if err := env.client.DeleteSnapshot(ctx, snaps[tpl]); err != nil {
			t.Fatal(err)
		}
		assertNoTrace(t, ids[tpl])
	}
}

func TestStatePersistence(t *testing.T) {
	ctx := context.Background()
	// on_timeout pause: the TTL pauses instead of destroying.
	ttl := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", TTLSeconds: 1, OnTimeout: api.OnTimeoutPause})
	mustSh(t, ttl, "echo ttl > /root/f")
	deadline := time.Now().Add(10 * time.Second)
	for {
		sb, err := env.client.GetSandbox(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == api.StatePaused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TTL with on_timeout pause: state %s after 10 s", sb.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(600 * time.Millisecond) // a few reaper passes: still paused
	if sb, _ := env.client.GetSandbox(ctx, ttl); sb.State != api.StatePaused {
		t.Fatalf("after more reaper passes: %s", sb.State)
	}

	// Paused (memory kept) and persistent running whose init dies while
	// the daemon is down (a host reboot): both keep their files.
	warm := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", OnTimeout: api.OnTimeoutPause, TTLSeconds: 3600})
	mustSh(t, warm, "echo warm > /root/f; sleep 1000 &")
	if _, err := env.client.PauseSandbox(ctx, warm); err != nil {
		t.Fatal(err)
	}
	cold := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", OnTimeout: api.OnTimeoutPause, TTLSeconds: 3600})
	mustSh(t, cold, "echo cold > /root/f")
	coldSb, _ := env.client.GetSandbox(ctx, cold)
	restartDaemon(t, func() {
		if p, err := os.FindProcess(coldSb.Pid); err == nil {
			_ = p.Kill()
		}
		time.Sleep(200 * time.Millisecond)
	})
	for id, want := range map[string]string{ttl: api.StatePaused, warm: api.StatePaused, cold: api.StateStopped} {
		sb, err := env.client.GetSandbox(ctx, id)
		if err != nil || sb.State != want {
			t.Fatalf("after restart %s: %+v, %v; want %s", id, sb, err, want)
		}
	}
	if _, err := env.client.Exec(ctx, cold, api.ExecRequest{Shell: "true"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("exec on a stopped sandbox: %v", err)
	}
	out, stderr, code := cli(t, "", "resume", warm)
	if code != 0 || strings.TrimSpace(out) != api.StateRunning {
		t.Fatalf("resume warm: %d %q %q", code, out, stderr)
	}
	if got := mustSh(t, warm, "cat /root/f; ps | grep -c '[s]leep 1000'"); got != "warm\n1" {
		t.Fatalf("warm after restart: %q", got)
	}
	for _, id := range []string{cold, ttl} {
		if _, err := env.client.ResumeSandbox(ctx, id); err != nil {
			t.Fatalf("resume %s: %v", id, err)
		}
	}
	if got := mustSh(t, cold, "cat /root/f"); got != "cold" {
		t.Fatalf("cold after resume: %q", got)
	}
	sb, _ := env.client.GetSandbox(ctx, ttl)
	if got := mustSh(t, ttl, "cat /root/f"); got != "ttl" || sb.ExpiresAt == nil || !sb.ExpiresAt.After(time.Now()) {
		t.Fatalf("ttl sandbox after resume: %q, expires %v", got, sb.ExpiresAt)
	}
	_ = env.client.DestroySandbox(ctx, ttl) // before its fresh 1 s TTL pauses it again
	for _, id := range []string{ttl, warm, cold} {
		_ = env.client.DestroySandbox(ctx, id)
		assertNoTrace(t, id)
	}
}

// TestStateCrash runs the daemon as its own process, SIGKILLs it in the
// middle of 50 concurrent creates, forks and snapshots, starts it again,
// and checks that every sandbox works or is gone without a trace and that
// every snapshot is whole (and usable) or absent.
func TestStateCrash(t *testing.T) {
	cfgPath := filepath.Join(filepath.Dir(env.cfg.DataDir), "crash.toml")
	conf := fmt.Sprintf(`data_dir = %q
run_dir = %q
socket = %q
listen = ""
guest_binary = %q
cgroup_parent = %q
storage_size_gb = %d
reap_interval = "200ms"
default_template = "busybox"
log_level = "warn"
[defaults]
ttl = "10m"
`, env.cfg.DataDir, env.cfg.RunDir, env.cfg.Socket, env.cfg.GuestBinary, env.cfg.CgroupParent, env.cfg.StorageSizeGB)
	if err := os.WriteFile(cfgPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	// The daemon that is killed keeps a warm pool, so that creates served
	// from it are cut short too; the one started after it has none, so
	// every layer left must belong to a recorded sandbox.
	poolPath := filepath.Join(filepath.Dir(env.cfg.DataDir), "crash-pool.toml")
	if err := os.WriteFile(poolPath, []byte(conf+"[[pool]]\ntemplate = \"busybox\"\nsize = 4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rounds := 2
	if v := os.Getenv("AGENTBOX_CRASH_ROUNDS"); v != "" {
		fmt.Sscan(v, &rounds)
	}
	restartDaemon(t, func() {
		for r := 0; r < rounds; r++ {
			crashRound(t, poolPath, cfgPath, r)
		}
	})
}

func startExternal(t *testing.T, cfgPath string) (*exec.Cmd, *client.Client) {
	t.Helper()
	_ = os.Remove(env.cfg.Socket)
	cmd := exec.Command(env.cliBin, "serve", "--config", cfgPath)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.WithHost("unix://"+env.cfg.Socket), client.WithAPIKey(env.key), client.WithoutEnvironment())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := c.Health(context.Background()); err == nil {
			return cmd, c
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("external daemon did not answer in 60 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// crashRound kills a daemon started with killedCfg and checks what one
// started with cfgPath makes of its state.
func crashRound(t *testing.T, killedCfg, cfgPath string, round int) {
	ctx := context.Background()
	d, c := startExternal(t, killedCfg)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ps, err := c.Pools(ctx)
		if err == nil && len(ps) == 1 && ps[0].Ready == ps[0].Size {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("round %d: the pool of the daemon to kill did not fill: %+v, %v", round, ps, err)
		}
	}
	// The data dir is the package's: what earlier tests left (a paused
	// sandbox, a snapshot of another sandbox) is not this round's to judge.
	before, err := c.ListSnapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	earlier := map[string]bool{}
	for _, sn := range before {
		earlier[sn.ID] = true
	}
	kept, err := c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	earlierSB := map[string]bool{}
	for _, sb := range kept {
		earlierSB[sb.ID] = true
	}
	var seeds []string
	for i := 0; i < 4; i++ {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo seed > /root/seed; sleep 1000 &"}); err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, sb.ID)
	}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seed := seeds[i%len(seeds)]
			switch i % 3 {
			case 0:
				_, _ = c.CreateSandbox(ctx, api.CreateSandboxRequest{})
			case 1:
				_, _ = c.ForkSandbox(ctx, seed, 2)
			case 2:
				_, _ = c.CreateSnapshot(ctx, seed, "")
			}
		}()
	}
	time.Sleep(time.Duration(200+rand.Intn(1300)) * time.Millisecond)
	_ = syscall.Kill(d.Process.Pid, syscall.SIGKILL) // kill -9
	_ = d.Wait()
	wg.Wait()

	d, c = startExternal(t, cfgPath)
	defer func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		_ = d.Wait()
	}()
	list, err := c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	working := 0
	for _, sb := range list {
		switch sb.State {
		case api.StateRunning:
			res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo ok"})
			if err != nil || strings.TrimSpace(res.Stdout) != "ok" {
				t.Errorf("round %d: sandbox %s is running but exec fails: %v", round, sb.ID, err)
			}
			live[sb.ID] = true
			working++
		case api.StateFailed, api.StateDestroyed:
			assertNoTrace(t, sb.ID)
		case api.StatePaused, api.StateStopped:
			// Kept with its layer; this round pauses nothing.
			if !earlierSB[sb.ID] {
				t.Errorf("round %d: sandbox %s is %s after recovery", round, sb.ID, sb.State)
			}
			live[sb.ID] = true
		default:
			t.Errorf("round %d: sandbox %s is %s after recovery", round, sb.ID, sb.State)
		}
	}
	for _, s := range seeds {
		if !live[s] {
			t.Errorf("round %d: seed sandbox %s did not survive", round, s)
		}
	}
	for _, id := range seeds[:1] {
		res, err := c.Exec(ctx, id, api.ExecRequest{Shell: "cat /root/seed; ps | grep -c '[s]leep 1000'"})
		if err != nil || res.Stdout != "seed\n1\n" {
			t.Errorf("round %d: seed after crash: %+v, %v", round, res, err)
		}
	}
	// Layers on disk belong to live sandboxes only.
	layers, _ := os.ReadDir(filepath.Join(env.cfg.DataDir, "storage", "sandboxes"))
	for _, l := range layers {
		if !live[l.Name()] {
			t.Errorf("round %d: layer %s is left", round, l.Name())
		}
	}
	// Every snapshot is whole and usable, and none is on disk unrecorded.
	// This round's (not in earlier) were all taken of seeds, by snapshot
	// or by fork, so a sandbox made from one has the seed's file.
	all, err := c.ListSnapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	isSeed := map[string]bool{}
	for _, s := range seeds {
		isSeed[s] = true
	}
	var snaps []api.Snapshot
	for _, sn := range all {
		recorded[sn.ID] = true
		if earlier[sn.ID] {
			continue
		}
		if !isSeed[sn.SandboxID] {
			t.Errorf("round %d: snapshot %s records source %s, which is not a seed", round, sn.ID, sn.SandboxID)
		}
		snaps = append(snaps, sn)
	}
	dirs, _ := os.ReadDir(filepath.Join(env.cfg.DataDir, "storage", "snapshots"))
	for _, dd := range dirs {
		if !recorded[dd.Name()] {
			t.Errorf("round %d: snapshot dir %s has no record", round, dd.Name())
		}
	}
	for i, sn := range snaps {
		if _, err := os.Stat(filepath.Join(env.cfg.DataDir, "storage", "snapshots", sn.ID, "upper")); err != nil {
			t.Errorf("round %d: snapshot %s is recorded but not whole: %v", round, sn.ID, err)
			continue
		}
		if i >= 3 {
			continue // a few are enough to show they start sandboxes
		}
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: sn.ID})
		if err != nil {
			t.Errorf("round %d: create from snapshot %s: %v", round, sn.ID, err)
			continue
		}
		res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "cat /root/seed"})
		if err != nil || res.Stdout != "seed\n" {
			t.Errorf("round %d: sandbox from snapshot %s: %+v, %v", round, sn.ID, res, err)
		}
		_ = c.DestroySandbox(ctx, sb.ID)
	}
	t.Logf("round %d: %d sandboxes work after the crash, %d snapshots whole", round, working, len(snaps))
	// Clean up everything this round made.
	for id := range live {
		if !earlierSB[id] {
			_ = c.DestroySandbox(ctx, id)
		}
	}
	for _, sn := range snaps {
		if !sn.Internal {
			_ = c.DeleteSnapshot(ctx, sn.ID)
		}
	}
	left, _ := c.ListSnapshots(ctx)
	for _, sn := range left {
		if !earlier[sn.ID] {
			t.Errorf("round %d: snapshot %s (internal %v) is left after destroying everything", round, sn.ID, sn.Internal)
		}
	}
}

// TestStateCyclesLeaveNothing runs create/snapshot/fork/reset/destroy
// cycles and checks that nothing stays on the host. AGENTBOX_STATE_CYCLES
// sets the count (100 by default; the soak runs 1000).
func TestStateCyclesLeaveNothing(t *testing.T) {
	cycles := 100
	if v := os.Getenv("AGENTBOX_STATE_CYCLES"); v != "" {
		fmt.Sscan(v, &cycles)
	}
	ctx := context.Background()
	before := countHost(t)
	snapDir := filepath.Join(env.cfg.DataDir, "storage", "snapshots")
	snapsBefore, _ := os.ReadDir(snapDir)
	for i := 0; i < cycles; i++ {
		sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox"})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if _, err := env.client.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo x > /tmp/x; sleep 100 &"}); err != nil {
			t.Fatalf("cycle %d exec: %v", i, err)
		}
		kids, err := env.client.ForkSandbox(ctx, sb.ID, 1)
		if err != nil {
			t.Fatalf("cycle %d fork: %v", i, err)
		}
		if i%10 == 0 {
			if _, err := env.client.ResetSandbox(ctx, kids[0].ID, ""); err != nil {
				t.Fatalf("cycle %d reset: %v", i, err)
			}
		}
		for _, id := range []string{kids[0].ID, sb.ID} {
			if err := env.client.DestroySandbox(ctx, id); err != nil {
				t.Fatalf("cycle %d destroy: %v", i, err)
			}
		}
		if i == 0 {
			assertNoTrace(t, sb.ID)
			assertNoTrace(t, kids[0].ID)
		}
	}
	after := settledCounts(t, before)
	if after.grewFrom(before) {
		t.Fatalf("after %d cycles and a minute to settle: before %+v, after %+v", cycles, before, after)
	}
	// A cycle has at most three sandboxes at once (the parent, its fork,
	// the fork's reset standby) and the container tier two waiting
	// inits: released ranges are handed out again first, so the views'
	// cache grows by the ranges in use at once, whatever the cycles.
	if grown := after.views - before.views; grown > 8 {
		t.Fatalf("after %d cycles: %d more uid range views (%d before); want at most the ranges ever in use at once", cycles, grown, before.views)
	}
	if snapsAfter, _ := os.ReadDir(snapDir); len(snapsAfter) != len(snapsBefore) {
		t.Fatalf("after %d cycles: %d snapshot dirs, before %d", cycles, len(snapsAfter), len(snapsBefore))
	}
}

// waitState polls sandbox id until it is in state want, for at most d.
func waitState(t *testing.T, id, want string, d time.Duration) *api.Sandbox {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		sb, err := env.client.GetSandbox(context.Background(), id)
		if want == api.StateDestroyed && errors.Is(err, errdefs.ErrNotFound) {
			// A destroyed sandbox is not found (docs/state.md).
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == want {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: state %s after %v, want %s (error %q)", id, sb.State, d, want, sb.Error)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStateIdleTimeout: idle_timeout applies on_timeout after no API use;
// a long exec is use the whole time; resume starts the clock again.
func TestStateIdleTimeout(t *testing.T) {
	// idle (seconds) leaves a loaded host room between two calls of
	// the test that are one use apart.
	const idle = 3
	ctx := context.Background()
	if _, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", IdleTimeoutSeconds: -1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("idle_timeout -1: %v, want invalid argument", err)
	}
	pause := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", IdleTimeoutSeconds: idle, OnTimeout: api.OnTimeoutPause})
	destroy := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", IdleTimeoutSeconds: idle})
	busy := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", IdleTimeoutSeconds: idle, OnTimeout: api.OnTimeoutPause})
	if sb, _ := env.client.GetSandbox(ctx, pause); sb.IdleTimeoutSeconds != idle {
		t.Fatalf("idle_timeout shown as %d", sb.IdleTimeoutSeconds)
	}
	// An exec of twice the idle timeout with no output: never idle
	// meanwhile.
	if got := mustSh(t, busy, fmt.Sprintf("sleep %d; echo done", 2*idle)); got != "done" {
		t.Fatalf("long exec: %q", got)
	}
	if sb, _ := env.client.GetSandbox(ctx, busy); sb.State != api.StateRunning {
		t.Fatalf("during a %d s exec a %d s idle timeout hit: %s", 2*idle, idle, sb.State)
	}
	waitState(t, pause, api.StatePaused, time.Minute)
	waitState(t, destroy, api.StateDestroyed, time.Minute)
	waitState(t, busy, api.StatePaused, time.Minute)
	// Paused: the idle clock stops, the sandbox stays paused.
	time.Sleep(idle*time.Second + 500*time.Millisecond)
	if sb, _ := env.client.GetSandbox(ctx, pause); sb.State != api.StatePaused {
		t.Fatalf("paused sandbox after more idle time: %s", sb.State)
	}
	if _, err := env.client.ResumeSandbox(ctx, pause); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, pause, "echo up"); got != "up" {
		t.Fatalf("after resume: %q", got)
	}
	waitState(t, pause, api.StatePaused, time.Minute)
	assertNoTrace(t, destroy)
}

// TestStateInitDiesPersistent: a persistent sandbox whose init dies while
// the daemon runs becomes stopped with its files, and resumes cold; a
// plain one is failed and removed.
func TestStateInitDiesPersistent(t *testing.T) {
	ctx := context.Background()
	keep := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", OnTimeout: api.OnTimeoutPause})
	plain := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	for _, id := range []string{keep, plain} {
		mustSh(t, id, "echo kept > /root/f; sleep 1000 &")
		sb, _ := env.client.GetSandbox(ctx, id)
		if err := syscall.Kill(sb.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	sb := waitState(t, keep, api.StateStopped, 10*time.Second)
	if sb.Error == "" {
		t.Errorf("stopped sandbox says nothing of why")
	}
	waitState(t, plain, api.StateFailed, 10*time.Second)
	assertNoTrace(t, plain)
	if _, err := env.client.Exec(ctx, keep, api.ExecRequest{Shell: "true"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("exec on the stopped sandbox: %v", err)
	}
	if sb, err := env.client.ResumeSandbox(ctx, keep); err != nil || sb.State != api.StateRunning {
		t.Fatalf("resume: %+v %v", sb, err)
	}
	if got := mustSh(t, keep, "cat /root/f; ps | grep -c '[s]leep 1000' || true"); got != "kept\n0" {
		t.Fatalf("after a cold resume: %q, want the file and no old process", got)
	}
	if err := env.client.DestroySandbox(ctx, keep); err != nil {
		t.Fatal(err)
	}
	assertNoTrace(t, keep)
}

// TestStateResetEgress: a sandbox with egress keeps its address and one
// working veth across full and standby resets, and its preview token.
func TestStateResetEgress(t *testing.T) {
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Network: &api.Network{Egress: api.EgressCustom, Allow: []string{"192.0.2.1"}}})
	sb0, _ := env.client.GetSandbox(ctx, id)
	addr := strings.Split(sb0.Network.Address, "/")[0]
	for i := 0; i < 3; i++ {
		mustSh(t, id, "sleep 1000 &")
		time.Sleep(300 * time.Millisecond) // the standby boots (from the second reset)
		if _, err := env.client.ResetSandbox(ctx, id, ""); err != nil {
			t.Fatalf("reset %d: %v", i, err)
		}
		sb, _ := env.client.GetSandbox(ctx, id)
		if sb.Network.Address != sb0.Network.Address || sb.Network.PreviewToken != sb0.Network.PreviewToken {
			t.Fatalf("reset %d: network %+v, was %+v", i, sb.Network, sb0.Network)
		}
		if got := mustSh(t, id, "ip -4 addr show eth0 | grep -c 'inet "+addr+"/'; ps -o comm | grep -c '^sleep' || true"); got != "1\n0" {
			t.Fatalf("reset %d: eth0 and sleepers: %q", i, got)
		}
	}
}

// TestStateIdlePreview: preview traffic is use; when it stops, the idle
// timeout pauses the sandbox.
func TestStateIdlePreview(t *testing.T) {
	const port = 8000
	// Traffic for twice the idle timeout, every 300 ms; the timeout is
	// long enough that a loaded host's slow request is not a gap.
	const idle = 5
	sb := startPreviewServer(t, api.CreateSandboxRequest{Template: "base", IdleTimeoutSeconds: idle, OnTimeout: api.OnTimeoutPause}, port)
	hc := unixHTTP()
	for end := time.Now().Add(2 * idle * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		resp, err := hc.Do(previewReq(t, sb, port, "/headers", true))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("preview: %s (the sandbox went idle under traffic?)", resp.Status)
		}
	}
	if got, _ := env.client.GetSandbox(context.Background(), sb.ID); got.State != api.StateRunning {
		t.Fatalf("after %d s of preview traffic with a %d s idle timeout: %s", 2*idle, idle, got.State)
	}
	waitState(t, sb.ID, api.StatePaused, time.Minute)
}

// TestStateResetRestart: a standby init an earlier daemon prepared is
// killed when the sandbox is re-adopted, and its layer swept; the sandbox
// keeps working and resetting.
func TestStateResetRestart(t *testing.T) {
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	if _, err := env.client.ResetSandbox(ctx, id, ""); err != nil {
		t.Fatal(err)
	}
	procs := func() []string {
		b, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", env.cfg.CgroupParent, id, "cgroup.procs"))
		return strings.Fields(string(b))
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(procs()) < 2 { // the init and its standby
		if time.Now().After(deadline) {
			t.Fatalf("no standby after a reset: %v", procs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	restartDaemon(t, func() {})
	sb, err := env.client.GetSandbox(ctx, id)
	if err != nil || sb.State != api.StateRunning {
		t.Fatalf("after restart: %+v %v", sb, err)
	}
	// The re-adopt kills the standby; polled, a busy host reaps slowly.
	for deadline := time.Now().Add(time.Minute); len(procs()) > 1 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if p := procs(); len(p) != 1 || p[0] != strconv.Itoa(sb.Pid) {
		t.Fatalf("after restart the sandbox's agent cgroup holds %v; want only its init %d", p, sb.Pid)
	}
	if m, _ := filepath.Glob(filepath.Join(env.cfg.DataDir, "storage", "sandboxes", id+".*")); len(m) > 0 {
		t.Fatalf("standby layers left after restart: %v", m)
	}
	mustSh(t, id, "echo x > /root/x")
	if _, err := env.client.ResetSandbox(ctx, id, ""); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, id, "ls /root"); got != "" {
		t.Fatalf("after reset: %q", got)
	}
}
