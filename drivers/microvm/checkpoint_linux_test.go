package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
	"github.com/agentbox/agentbox/errdefs"
)

// prepareNetNS makes a namespace as the service prepares one for a
// sandbox with egress: eth0 with address .2 of the /30 prefix, the host
// end .1, a default route through it. It returns the namespace's path and
// a listener on the host end.
func prepareNetNS(t *testing.T, name, prefix string) (string, net.Listener) {
	t.Helper()
	ns, hostIf := "abx-mvm-"+name, "mvm"+name
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	_ = exec.Command("ip", "link", "del", hostIf).Run()
	_ = exec.Command("ip", "netns", "del", ns).Run()
	ip("netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	ip("link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
	ip("addr", "add", prefix+".1/30", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", ns, "addr", "add", prefix+".2/30", "dev", "eth0")
	ip("-n", ns, "link", "set", "eth0", "up")
	ip("-n", ns, "link", "set", "lo", "up")
	ip("-n", ns, "route", "add", "default", "via", prefix+".1")
	ln, err := net.Listen("tcp4", prefix+".1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return filepath.Join("/var/run/netns", ns), ln
}

// reach connects from the VM to ln and returns the address the host saw.
func reach(t *testing.T, d *Driver, h *driver.Handle, ln net.Listener) string {
	t.Helper()
	from := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		from <- c.RemoteAddr().String()
		_, _ = c.Write([]byte("hi\n"))
		c.Close()
	}()
	a := ln.Addr().(*net.TCPAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := drivertest.Exec(ctx, d, h, fmt.Sprintf("nc %s %d </dev/null", a.IP, a.Port))
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	select {
	case addr := <-from:
		host, _, _ := net.SplitHostPort(addr)
		return host
	case <-time.After(10 * time.Second):
		ln.(*net.TCPListener).SetDeadline(time.Now())
		t.Fatalf("no connection from the VM reached %s; exec: %+v", a, res)
		return ""
	}
}

// TestRestoreTakesNetwork: a VM with a network, adopted by a new driver
// (a daemon restart), saved and left running,
// restored as another sandbox in another prepared namespace, connects
// out from that sandbox's address (the agent moved the restored VM to
// the new MAC, address and gateway on its hello) with the host's time,
// and the original still connects from its own. A checkpoint made under
// another accelerator is refused.
func TestRestoreTakesNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test boots VMs and needs root (make test runs as root)")
	}
	guest := drivertest.BuildGuest(t)
	parent := drivertest.CgroupParent(t)
	const uidBase = 1000000
	layer := drivertest.BusyboxRootfs(t, uidBase)
	opts := driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: uidBase, Seccomp: true, CacheDir: t.TempDir()}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	pid := strconv.Itoa(os.Getpid() % 100000)
	newSpec := func(name, netns string) *driver.Spec {
		dir := filepath.Join(tmp, name)
		spec := &driver.Spec{
			ID: "mvmnet" + name + pid, Hostname: "mvm-" + name, Layers: []string{layer}, NetNS: netns,
			UpperDir: filepath.Join(dir, "upper"), WorkDir: filepath.Join(dir, "work"), RunDir: filepath.Join(dir, "run"),
			Env:  []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
			User: "root", Workdir: "/", CPU: 1, MemoryMB: 128, Pids: 64, DiskMB: 64,
		}
		for _, dir := range []string{spec.UpperDir, spec.WorkDir, spec.RunDir} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return spec
	}
	nsA, lnA := prepareNetNS(t, "a"+pid, "10.203.81")
	nsB, lnB := prepareNetNS(t, "b"+pid, "10.203.82")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h, err := d.Create(ctx, newSpec("a", nsA))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), h) })
	if got := reach(t, d, h, lnA); got != "10.203.81.2" {
		t.Fatalf("the VM connected from %s, want 10.203.81.2", got)
	}
	// A daemon restart: the next driver adopts the VM, and saves it.
	d2, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if err := d2.Adopt(ctx, h); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	d = d2
	dir := filepath.Join(tmp, "ckpt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := d.Checkpoint(ctx, h, dir, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	took := time.Since(t0)
	fi, err := os.Stat(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint, left running: %v (%s), a state file of %.1f KiB and a RAM image of %.1f MiB used for %d MiB of RAM",
		took.Round(time.Millisecond), d.Accel, float64(fi.Size())/(1<<10), float64(allocated(t, filepath.Join(dir, "ram")))/(1<<20), 128)
	// The saved clock stands still; the restored agent sets it.
	time.Sleep(5 * time.Second)
	t0 = time.Now()
	hb, err := d.Restore(ctx, newSpec("b", nsB), dir)
	if err != nil {
		t.Fatalf("restore into another namespace: %v", err)
	}
	t.Logf("restore to an answering agent: %v", time.Since(t0).Round(time.Millisecond))
	t.Cleanup(func() { _ = d.Destroy(context.Background(), hb) })
	if got := reach(t, d, hb, lnB); got != "10.203.82.2" {
		t.Errorf("the restored VM connected from %s, want 10.203.82.2", got)
	}
	if got := mustExecTest(t, d, hb, "hostname"); got != "mvm-b" {
		t.Errorf("the restored VM's hostname is %q, want mvm-b", got)
	}
	guestNow, _ := strconv.ParseInt(mustExecTest(t, d, hb, "date +%s"), 10, 64)
	if skew := time.Now().Unix() - guestNow; skew > 2 || skew < -2 {
		t.Errorf("the restored VM's clock is %d s off the host's", skew)
	}
	// Only the agent may set it: a root exec has no CAP_SYS_TIME, so the
	// kernel refuses what the filter lets through for the agent.
	out := mustExecTest(t, d, hb, "date -s @1000000000 2>&1 >/dev/null; date +%s")
	if !strings.Contains(out, "not permitted") || strings.HasSuffix(out, "1000000000") {
		t.Errorf("a root exec setting the guest's clock: %q, want EPERM", out)
	}
	if got := reach(t, d, h, lnA); got != "10.203.81.2" {
		t.Errorf("the original VM connected from %s after the checkpoint, want 10.203.81.2", got)
	}
	// A restore without the network the saved VM had is refused.
	if _, err := d.Restore(ctx, newSpec("c", ""), dir); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("restore without a network: %v, want failed_precondition", err)
	}
	// A state saved under the other accelerator is refused, saying so.
	b, err := os.ReadFile(filepath.Join(dir, "microvm.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sv map[string]any
	_ = json.Unmarshal(b, &sv)
	other := map[string]string{"tcg": "kvm", "kvm": "tcg"}[d.Accel]
	sv["accel"] = other
	b, _ = json.Marshal(sv)
	if err := os.WriteFile(filepath.Join(dir, "microvm.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Restore(ctx, newSpec("d", nsB), dir); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "saved under "+other) {
		t.Errorf("restore of a state saved under %s: %v, want failed_precondition naming it", other, err)
	}
}

func mustExecTest(t *testing.T, d *Driver, h *driver.Handle, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := drivertest.Exec(ctx, d, h, script)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: %+v %v", script, res, err)
	}
	return strings.TrimSpace(res.Stdout)
}
