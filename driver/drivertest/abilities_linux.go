package drivertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/cgroups"
)

// The optional abilities (driver/abilities.go): one subtest each, run on a
// driver that has the ability; a driver without it logs so.

// abilityTests maps every ability to its subtest. An ability with no
// subtest fails the suite.
var abilityTests = map[driver.Ability]func(*suite, *testing.T){
	driver.AbilityPause:         (*suite).pauseResume,
	driver.AbilityCheckpoint:    (*suite).checkpointRestore,
	driver.AbilityResize:        (*suite).resize,
	driver.AbilityStandby:       (*suite).standby,
	driver.AbilityNetNSAtCreate: (*suite).netnsAtCreate,
	driver.AbilityStartNotifier: (*suite).startNotifier,
}

// abilities runs the declared-abilities check and one subtest per ability.
func (s *suite) abilities(t *testing.T) {
	d := s.New(t)
	got := driver.Abilities(d)
	t.Run("Declared", func(t *testing.T) {
		// A driver's abilities are the interfaces its type implements: a
		// method whose signature drifted drops one without a word, and
		// this catches it.
		want := slices.Clone(s.Abilities)
		slices.Sort(want)
		have := slices.Clone(got)
		slices.Sort(have)
		if !slices.Equal(have, want) {
			t.Errorf("%s has the abilities %v, its test says %v (driver/abilities.go: each is an interface the driver's type implements)", d.Name(), have, want)
		}
	})
	for _, a := range driver.AllAbilities() {
		test, ok := abilityTests[a]
		if !ok {
			t.Errorf("ability %q has no conformance subtest (driver/drivertest/abilities_linux.go)", a)
			continue
		}
		t.Run(string(a), func(t *testing.T) {
			if !slices.Contains(got, a) {
				t.Logf("%s does not have %s", d.Name(), a)
				return
			}
			test(s, t)
		})
	}
}

// pauseResume: Pause stops the guest, a paused sandbox is adopted paused,
// Resume brings it back, and a paused sandbox is destroyed whole.
func (s *suite) pauseResume(t *testing.T) {
	d := s.New(t)
	p, _ := driver.As[driver.Pauser](d)
	h, _ := s.create(t, d)
	ctx := context.Background()
	if err := p.Pause(ctx, h); err != nil {
		t.Fatalf("pause: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	res, err := Exec(short, d, h, "echo awake")
	cancel()
	if err == nil {
		t.Errorf("a paused sandbox ran a command: %+v", res)
	}
	if !alive(h.Pid) {
		t.Fatal("pause killed the sandbox")
	}
	// A paused sandbox survives a daemon restart paused.
	if err := s.New(t).Adopt(ctx, h); err != nil {
		t.Errorf("adopting a paused sandbox: %v", err)
	}
	if err := p.Resume(ctx, h); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := mustExec(t, d, h, "echo awake"); got != "awake" {
		t.Errorf("after resume: %q", got)
	}
	// Destroying a paused sandbox leaves nothing either.
	if err := p.Pause(ctx, h); err != nil {
		t.Fatalf("pause: %v", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 60*time.Second)
	defer dcancel()
	if err := d.Destroy(dctx, h); err != nil {
		t.Errorf("destroying a paused sandbox: %v", err)
	}
	s.checkGone(t, h)
}

// marker is a process whose survival shows that a sandbox's processes
// were saved and restored.
const marker = "sleep 4242"

// markers counts the marker processes running in the sandbox.
func markers(t testing.TB, d driver.Driver, h *driver.Handle) string {
	t.Helper()
	return mustExec(t, d, h, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null; echo; done | grep -c '^`+marker+` $' || true`)
}

// checkpointRestore: a checkpoint left running goes on running, and a
// second sandbox restored from it (its layer copied while frozen) has the
// first's files and processes under its own identity; a checkpoint that
// stops the sandbox, then Destroy, then Restore on the same layer brings
// the sandbox back with its processes.
func (s *suite) checkpointRestore(t *testing.T) {
	d := s.New(t)
	cp, _ := driver.As[driver.Checkpointer](d)
	h, spec := s.create(t, d)
	// Started once the shell's child has become the marker.
	mustExec(t, d, h, "echo saved > /root/f; "+marker+` >/dev/null 2>&1 </dev/null & p=$!
		until [ "$(tr '\0' ' ' < /proc/$p/cmdline)" = "`+marker+` " ]; do :; done; echo started`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ckpt := func(name string) string {
		dir := filepath.Join(filepath.Dir(filepath.Dir(spec.RunDir)), name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		return dir
	}

	// Left running, with the layer captured while frozen.
	child := s.newSpec(t)
	frozen := 0
	live := ckpt("live")
	err := cp.Checkpoint(ctx, h, live, driver.CheckpointOptions{LeaveRunning: true, Frozen: func() error {
		frozen++
		out, err := exec.Command("cp", "-a", spec.UpperDir+"/.", child.UpperDir).CombinedOutput()
		if err != nil {
			return fmt.Errorf("copying the layer: %v: %s", err, out)
		}
		return nil
	}})
	if err != nil {
		t.Fatalf("checkpoint, leave running: %v", err)
	}
	if frozen != 1 {
		t.Errorf("CheckpointOptions.Frozen ran %d times, want once", frozen)
	}
	if got := markers(t, d, h); got != "1" {
		t.Errorf("after a checkpoint that leaves it running, the sandbox runs %s marker processes, want 1", got)
	}
	ch, err := cp.Restore(ctx, child, live)
	if err != nil {
		t.Fatalf("restore as another sandbox: %v", err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), ch) })
	if ch.ID != child.ID || ch.Pid <= 0 {
		t.Errorf("restore returned handle %+v for sandbox %s", ch, child.ID)
	}
	if got := mustExec(t, d, ch, "cat /root/f; hostname"); got != "saved\n"+child.Hostname {
		t.Errorf("the restored sandbox answers %q, want its parent's file and its own hostname %s", got, child.Hostname)
	}
	if got := markers(t, d, ch); got != "1" {
		t.Errorf("the restored sandbox runs %s marker processes, want its parent's 1", got)
	}
	if err := d.Destroy(ctx, ch); err != nil {
		t.Errorf("destroying the restored sandbox: %v", err)
	}
	s.checkGone(t, ch)

	// Stopped, destroyed, restored on its own layer.
	stop := ckpt("stop")
	if err := cp.Checkpoint(ctx, h, stop, driver.CheckpointOptions{}); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatalf("destroy after the checkpoint: %v", err)
	}
	s.checkGone(t, h)
	again := *spec
	again.RunDir = filepath.Join(filepath.Dir(spec.RunDir), spec.ID+"-again")
	if err := os.MkdirAll(again.RunDir, 0o711); err != nil {
		t.Fatal(err)
	}
	rh, err := cp.Restore(ctx, &again, stop)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), rh) })
	if got := mustExec(t, d, rh, "cat /root/f"); got != "saved" {
		t.Errorf("the restored sandbox's file reads %q", got)
	}
	if got := markers(t, d, rh); got != "1" {
		t.Errorf("the restored sandbox runs %s marker processes, want 1", got)
	}
	select {
	case <-d.Exited(rh):
		t.Error("Exited is closed for a restored running sandbox")
	default:
	}
	if err := d.Destroy(ctx, rh); err != nil {
		t.Errorf("destroying the restored sandbox: %v", err)
	}
	s.checkGone(t, rh)
}

// limits are the tightest limits in a sandbox's cgroups (unlimited: -1).
type limits struct {
	memory, pids int64
	cpu          float64 // cores
}

// cgroupLimits reads the tightest memory, pids and CPU limits in the
// cgroups of sandbox id and below (v1 and v2 files alike).
func (s *suite) cgroupLimits(t testing.TB, id string) limits {
	t.Helper()
	l := limits{memory: -1, pids: -1, cpu: -1}
	tighter := func(cur *int64, v int64) {
		if v >= 0 && v < 1<<60 && (*cur < 0 || v < *cur) {
			*cur = v
		}
	}
	read := func(p string) string {
		b, _ := os.ReadFile(p)
		return strings.TrimSpace(string(b))
	}
	num := func(p string) int64 {
		v := read(p)
		if v == "" || v == "max" {
			return -1
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	cpu := func(quota, period int64) {
		if quota > 0 && period > 0 {
			if c := float64(quota) / float64(period); l.cpu < 0 || c < l.cpu {
				l.cpu = c
			}
		}
	}
	for _, dir := range s.cgroupDirs(id) {
		_ = filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
			if err != nil || !de.IsDir() {
				return nil
			}
			tighter(&l.memory, num(filepath.Join(p, "memory.limit_in_bytes")))
			tighter(&l.memory, num(filepath.Join(p, "memory.max")))
			tighter(&l.pids, num(filepath.Join(p, "pids.max")))
			cpu(num(filepath.Join(p, "cpu.cfs_quota_us")), num(filepath.Join(p, "cpu.cfs_period_us")))
			if f := strings.Fields(read(filepath.Join(p, "cpu.max"))); len(f) == 2 {
				q, _ := strconv.ParseInt(f[0], 10, 64)
				per, _ := strconv.ParseInt(f[1], 10, 64)
				cpu(q, per)
			}
			return nil
		})
	}
	return l
}

// resize: SetLimits moves a running sandbox's CPU, memory and pids limits
// down and up again, and the sandbox goes on answering.
func (s *suite) resize(t *testing.T) {
	d := s.New(t)
	rz, _ := driver.As[driver.Resizer](d)
	h, spec := s.create(t, d)
	ctx := context.Background()
	before := s.cgroupLimits(t, h.ID)
	if before.memory < spec.MemoryMB<<20 || before.pids < spec.Pids {
		t.Fatalf("the sandbox's cgroups hold %+v, below its spec's memory %d MiB and pids %d", before, spec.MemoryMB, spec.Pids)
	}
	steps := []struct {
		cpu            float64
		memoryMB, pids int64
	}{
		{0.5, spec.MemoryMB / 2, spec.Pids / 2},
		{2, spec.MemoryMB * 2, spec.Pids * 2},
	}
	for _, st := range steps {
		if err := rz.SetLimits(ctx, h, st.cpu, st.memoryMB, st.pids); err != nil {
			t.Fatalf("SetLimits(%v, %d MiB, %d pids): %v", st.cpu, st.memoryMB, st.pids, err)
		}
		got := s.cgroupLimits(t, h.ID)
		// The tightest limit is the workload's own: the driver may add a
		// reserve for itself above it, never take from it, and a
		// reserve is less than the step.
		if got.memory < st.memoryMB<<20 || got.memory >= st.memoryMB<<20+spec.MemoryMB<<19 {
			t.Errorf("after SetLimits to %d MiB the tightest memory limit is %d bytes", st.memoryMB, got.memory)
		}
		if got.pids < st.pids || got.pids >= st.pids+spec.Pids/2 {
			t.Errorf("after SetLimits to %d pids the tightest pids limit is %d", st.pids, got.pids)
		}
		if got.cpu < st.cpu*0.99 || got.cpu > st.cpu*1.01 {
			t.Errorf("after SetLimits to %v cores the CPU limit is %v cores", st.cpu, got.cpu)
		}
		if out := mustExec(t, d, h, "echo resized"); out != "resized" {
			t.Errorf("after SetLimits the sandbox answers %q", out)
		}
	}
}

// standby: Prepare boots a second init in the running sandbox's cgroups
// that nothing reaches before Promote; Promote kills the running init and
// makes the standby the sandbox's; Discard kills a standby; Destroy of the
// promoted sandbox leaves nothing.
func (s *suite) standby(t *testing.T) {
	d := s.New(t)
	sb, _ := driver.As[driver.Standby](d)
	h, spec := s.create(t, d)
	mustExec(t, d, h, "echo old > /root/f")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	standbySpec := func() *driver.Spec {
		sp := s.newSpec(t)
		sp.ID, sp.Hostname = spec.ID, spec.Hostname
		return sp
	}
	next, err := sb.Prepare(ctx, standbySpec())
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	// Once promoted, next is the sandbox: destroyed first at the end
	// (the create's cleanup then finds the old init gone).
	t.Cleanup(func() { _ = d.Destroy(context.Background(), next) })
	if next.ID != spec.ID || next.Pid <= 0 || next.Pid == h.Pid {
		t.Errorf("prepare returned handle %+v for sandbox %s running as %d", next, spec.ID, h.Pid)
	}
	// Nothing reaches a standby before Promote (its exec cgroups would
	// be taken for the old init's); the running init still answers.
	if got := mustExec(t, d, h, "cat /root/f"); got != "old" {
		t.Errorf("the running init answers %q after a standby was prepared", got)
	}
	gone, err := sb.Promote(ctx, h, next)
	if err != nil {
		t.Fatalf("promote: %v", err)
	}
	// The old init's socket is gone when Promote returns: a removal left
	// for later would take the path from an init booted on it meanwhile
	// (a full reset boots on the sandbox's first socket path again).
	if h.Socket != "" && h.Socket != next.Socket {
		if _, err := os.Lstat(h.Socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the old init's socket %s is still there after Promote returned (%v)", h.Socket, err)
		}
	}
	// The promoted init serves before the old one is gone.
	if got := mustExec(t, d, next, "echo early"); got != "early" {
		t.Errorf("the promoted init answers %q before the old one is gone", got)
	}
	select {
	case <-gone:
	case <-time.After(30 * time.Second):
		t.Fatal("the old init is not gone 30 s after Promote")
	}
	if alive(h.Pid) {
		t.Errorf("the old init %d still runs after Promote", h.Pid)
	}
	if got := mustExec(t, d, next, "cat /root/f 2>/dev/null || echo fresh"); got != "fresh" {
		t.Errorf("the promoted init sees %q in /root/f: its layer is not its own", got)
	}
	select {
	case <-d.Exited(next):
		t.Error("Exited is closed after Promote, while the promoted init runs")
	default:
	}

	// A standby that is not promoted is discarded.
	other, err := sb.Prepare(ctx, standbySpec())
	if err != nil {
		t.Fatalf("a second prepare: %v", err)
	}
	t.Cleanup(func() { _ = sb.Discard(context.Background(), other) }) // a no-op once discarded
	if err := sb.Discard(ctx, other); err != nil {
		t.Errorf("discard: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(other.Pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(other.Pid) {
		t.Errorf("the discarded standby %d still runs", other.Pid)
	}
	if got := mustExec(t, d, next, "echo still"); got != "still" {
		t.Errorf("after a discard the sandbox answers %q", got)
	}

	if err := d.Destroy(ctx, next); err != nil {
		t.Errorf("destroying the promoted sandbox: %v", err)
	}
	s.checkGone(t, next)
}

// netnsAtCreate: a sandbox created with Spec.NetNS runs in that
// namespace and uses its interface: a connection from inside reaches a
// listener on the veth's host end, from the sandbox's address.
func (s *suite) netnsAtCreate(t *testing.T) {
	suffix := fmt.Sprintf("%d%02d", time.Now().UnixNano()%100000, seq.Add(1)%100)
	ns, hostIf := "abx-dt-"+suffix, "dt"+suffix
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	ip("link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
	ip("addr", "add", "10.203.78.1/30", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", ns, "addr", "add", "10.203.78.2/30", "dev", "eth0")
	ip("-n", ns, "link", "set", "eth0", "up")
	ip("-n", ns, "link", "set", "lo", "up") // as network.NewNetNS leaves it
	ip("-n", ns, "route", "add", "default", "via", "10.203.78.1")
	ln, err := net.Listen("tcp4", "10.203.78.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	from := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		from <- c.RemoteAddr().String()
		_, _ = c.Write([]byte("hello-from-host\n"))
		c.Close()
	}()

	d := s.New(t)
	spec := s.newSpec(t)
	spec.NetNS = filepath.Join("/var/run/netns", ns)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create in a prepared namespace: %v", err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), h) })
	port := ln.Addr().(*net.TCPAddr).Port
	res, err := Exec(ctx, d, h, fmt.Sprintf("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; nc 10.203.78.1 %d </dev/null", port))
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	select {
	case addr := <-from:
		if !strings.HasPrefix(addr, "10.203.78.2:") {
			t.Errorf("the host saw the connection from %s, want 10.203.78.2", addr)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no connection from the sandbox reached the host end of its veth; exec: %+v", res)
	}
	if !strings.Contains(res.Stdout, "eth0 lo") || !strings.Contains(res.Stdout, "hello-from-host") {
		t.Errorf("in the sandbox: %q; want eth0 and lo, and the host's answer", res.Stdout)
	}
}

// startNotifier: Create calls Spec.Started with the init's pid once its
// namespaces exist (before the guest answers), and the guest has
// Spec.ResolvConf as /etc/resolv.conf when Create returns.
func (s *suite) startNotifier(t *testing.T) {
	d := s.New(t)
	spec := s.newSpec(t)
	hostNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var pids []int
	var nets []string
	spec.Started = func(pid int) {
		n, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		mu.Lock()
		defer mu.Unlock()
		pids, nets = append(pids, pid), append(nets, n)
	}
	const resolv = "nameserver 192.0.2.53\n"
	spec.ResolvConf = resolv
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), h) })
	mu.Lock()
	gotPids, gotNets := slices.Clone(pids), slices.Clone(nets)
	mu.Unlock()
	if len(gotPids) == 0 {
		t.Fatal("Create returned without calling Spec.Started")
	}
	if last := gotPids[len(gotPids)-1]; last != h.Pid {
		t.Errorf("Started was last called with pid %d, the sandbox's init is %d", last, h.Pid)
	}
	if n := gotNets[len(gotNets)-1]; n == "" || n == hostNet {
		t.Errorf("when Started was called the init's network namespace was %q (the host's is %s): want its own", n, hostNet)
	}
	if got := mustExec(t, d, h, "cat /etc/resolv.conf"); got+"\n" != resolv {
		t.Errorf("/etc/resolv.conf reads %q, want Spec.ResolvConf %q", got, resolv)
	}
}

// cgroupUsage: the sandbox's processes are in the cgroup
// <CgroupParent>/<id>, where the daemon's usage sampler reads them
// (internal/usage): the contract has no stats call of its own.
func (s *suite) cgroupUsage(t *testing.T) {
	d := s.New(t)
	h, _ := s.create(t, d)
	mustExec(t, d, h, "sleep 1000 >/dev/null 2>&1 </dev/null & echo started")
	m, err := cgroups.New(s.CgroupParent)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := m.Open(h.ID)
	if err != nil {
		t.Fatalf("the sandbox's cgroup %s/%s: %v", s.CgroupParent, h.ID, err)
	}
	st, err := cg.Stats()
	if err != nil {
		t.Fatalf("reading the sandbox's usage: %v", err)
	}
	if st.MemoryBytes <= 0 || st.Pids < 2 || st.CPUNanos == 0 {
		t.Errorf("the sandbox's cgroup counts %+v: want memory, CPU time and at least its init and the sleep", st)
	}
	procs, err := cg.Procs()
	if err != nil || !slices.Contains(procs, h.Pid) {
		t.Errorf("the sandbox's init %d is not in its cgroup (%v, %v)", h.Pid, procs, err)
	}
}
