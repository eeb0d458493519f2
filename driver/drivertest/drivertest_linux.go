// Package drivertest is the conformance suite of the driver interface:
// every isolation tier runs Suite against real sandboxes (root, real
// namespaces, cgroups and runtimes, no fakes), so that the tiers cannot
// drift apart in what the sandbox service relies on:
//
//   - Create returns a sandbox whose guest agent answers through DialGuest
//     and runs a command;
//   - Exited is closed when the sandbox's init dies, whoever killed it;
//   - Destroy is idempotent and leaves no process, cgroup, mount or socket;
//   - a second driver instance (a restarted daemon) Adopts a running
//     sandbox from its Handle, and answers ErrNotFound for a dead one;
//   - Cleanup removes the host resources of ids it is not told to keep,
//     and leaves the kept ones running;
//   - the sandbox's processes are in its cgroup, where the daemon reads
//     its usage;
//   - the driver has the optional abilities its test lists, and each of
//     them works (abilities_linux.go: pause, checkpoint, resize, standby,
//     netns-at-create, start-notifier).
//
// A driver's test calls it like this:
//
//	func TestConformance(t *testing.T) {
//		guest := drivertest.BuildGuest(t)
//		parent := drivertest.CgroupParent(t)
//		drivertest.Suite(t, drivertest.Config{
//			New: func(t testing.TB) driver.Driver { ... New(driver.Options{GuestBinary: guest, CgroupParent: parent, ...}) },
//			Abilities:    []driver.Ability{driver.AbilityPause},
//			Layers:       []string{drivertest.BusyboxRootfs(t, 1000000)},
//			UIDBase:      1000000,
//			CgroupParent: parent,
//		})
//	}
package drivertest

import (
	"bytes"
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
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guestclient"
	"github.com/agentbox/agentbox/internal/idrange"
)

// Config is what Suite needs to know about the driver under test.
type Config struct {
	// New constructs a driver. Every call must return a fresh instance
	// with the same options: a second instance stands for a restarted
	// daemon.
	New func(t testing.TB) driver.Driver
	// Abilities are the optional abilities the driver has (driver/
	// abilities.go); the suite fails if its type implements others, or
	// lacks one of these.
	Abilities []driver.Ability
	// Layers are the read-only template layers of every sandbox (lowest
	// last); a busybox root (BusyboxRootfs) is enough.
	Layers []string
	// UIDBase is the driver's uid_base: the sandbox's writable layer
	// belongs to it, as storage makes it.
	UIDBase int
	// CgroupParent is the driver's cgroup parent, where Suite looks for
	// leftover cgroups.
	CgroupParent string
	// WritableDisk: the sandbox's writes land in a disk image the driver
	// keeps in its writable layer (the microvm tier's ext4 disk), not as
	// files in Spec.UpperDir, so the suite reads them back through the
	// guest only.
	WritableDisk bool
}

// Suite runs the conformance tests against c's driver.
func Suite(t *testing.T, c Config) {
	if os.Geteuid() != 0 {
		t.Fatal("the driver conformance suite runs real sandboxes and needs root (make test runs as root)")
	}
	s := &suite{Config: c}
	t.Run("CreateDialExec", s.createDialExec)
	t.Run("ExitedOnInitDeath", s.exitedOnInitDeath)
	t.Run("DestroyIdempotentLeavesNothing", s.destroyLeavesNothing)
	t.Run("AdoptAfterRestart", s.adoptAfterRestart)
	t.Run("CleanupUnknownIDs", s.cleanupUnknown)
	t.Run("CgroupUsage", s.cgroupUsage)
	t.Run("Abilities", s.abilities) // abilities_linux.go
}

type suite struct {
	Config
}

var seq atomic.Int64

// newSpec prepares a sandbox's directories as the service and storage do:
// a private run dir owned by root, a writable layer owned by the
// sandbox's root.
func (s *suite) newSpec(t testing.TB) *driver.Spec {
	t.Helper()
	tmp, err := os.MkdirTemp("/var/tmp", "drivertest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o711); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("dt%d%03d", time.Now().UnixNano()%1000000, seq.Add(1))
	spec := &driver.Spec{
		ID: id, Hostname: "sbx-" + id, Layers: s.Layers,
		UpperDir: filepath.Join(tmp, "upper"), WorkDir: filepath.Join(tmp, "work"),
		// As the service names it: drivers find their leftovers by it.
		RunDir: filepath.Join(tmp, "sandboxes", id),
		Env:    []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		User:   "root", Workdir: "/",
		CPU: 1, MemoryMB: 256, Pids: 128,
	}
	for _, dir := range []string{spec.UpperDir, spec.WorkDir} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, s.UIDBase, s.UIDBase); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(spec.RunDir, 0o711); err != nil {
		t.Fatal(err)
	}
	return spec
}

// create starts a sandbox and destroys it when the test ends.
func (s *suite) create(t testing.TB, d driver.Driver) (*driver.Handle, *driver.Spec) {
	t.Helper()
	spec := s.newSpec(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), h) })
	if h.ID != spec.ID || h.Pid <= 0 {
		t.Errorf("create returned handle %+v for sandbox %s: want its id and a host pid", h, spec.ID)
	}
	return h, spec
}

// Exec runs a shell script through the driver's channel and returns the
// guest's result.
func Exec(ctx context.Context, d driver.Driver, h *driver.Handle, script string) (*api.ExecResult, error) {
	c := guestclient.Dial(func(ctx context.Context) (net.Conn, error) { return d.DialGuest(ctx, h) })
	return c.Exec(ctx, &api.ExecRequest{Shell: script})
}

func mustExec(t testing.TB, d driver.Driver, h *driver.Handle, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Exec(ctx, d, h, script)
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d, stderr %q", script, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(res.Stdout)
}

func (s *suite) createDialExec(t *testing.T) {
	d := s.New(t)
	h, spec := s.create(t, d)
	got := mustExec(t, d, h, "echo hello; hostname; id -u; echo data > /root/f; cat /root/f")
	if want := "hello\n" + spec.Hostname + "\n0\ndata"; got != want {
		t.Errorf("exec answered %q, want %q", got, want)
	}
	// The write went to the sandbox's writable layer, nowhere else.
	if !s.WritableDisk {
		if b, err := os.ReadFile(filepath.Join(spec.UpperDir, "root", "f")); err != nil || string(b) != "data\n" {
			t.Errorf("the sandbox's write is not in its writable layer: %q, %v", b, err)
		}
	}
	// Several connections at once, as the service's pool opens them.
	errc := make(chan error, 4)
	for i := range 4 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := Exec(ctx, d, h, "echo "+strconv.Itoa(i))
			if err == nil && strings.TrimSpace(res.Stdout) != strconv.Itoa(i) {
				err = fmt.Errorf("answered %q", res.Stdout)
			}
			errc <- err
		}()
	}
	for range 4 {
		if err := <-errc; err != nil {
			t.Errorf("concurrent exec: %v", err)
		}
	}
	select {
	case <-d.Exited(h):
		t.Error("Exited is closed while the sandbox runs")
	default:
	}
}

func (s *suite) exitedOnInitDeath(t *testing.T) {
	d := s.New(t)
	h, _ := s.create(t, d)
	if err := unix.Kill(h.Pid, unix.SIGKILL); err != nil {
		t.Fatalf("killing init %d: %v", h.Pid, err)
	}
	select {
	case <-d.Exited(h):
	case <-time.After(30 * time.Second):
		t.Fatalf("Exited not closed 30 s after init %d was killed", h.Pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Exec(ctx, d, h, "true"); err == nil {
		t.Error("a sandbox whose init died still runs commands")
	}
	if err := d.Destroy(context.Background(), h); err != nil {
		t.Errorf("destroy after init death: %v", err)
	}
	s.checkGone(t, h)
}

func (s *suite) destroyLeavesNothing(t *testing.T) {
	d := s.New(t)
	h, spec := s.create(t, d)
	// Something running besides the agent, that must not survive.
	mustExec(t, d, h, "sleep 1000 >/dev/null 2>&1 </dev/null & echo started")
	before := s.cgroupDirs(h.ID)
	if len(before) == 0 {
		t.Errorf("the sandbox has no cgroup under %s", s.CgroupParent)
	}
	procs := s.cgroupProcs(h.ID)
	if len(procs) == 0 {
		t.Errorf("no host process sits in the sandbox's cgroups")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Errorf("a second destroy: %v (Destroy must be idempotent)", err)
	}
	select {
	case <-d.Exited(h):
	default:
		t.Error("Exited is not closed after destroy")
	}
	s.checkGone(t, h)
	for _, p := range procs {
		if alive(p) {
			t.Errorf("host process %d of the sandbox (%s) outlived destroy", p, comm(p))
		}
	}
	if m := mountsUnder(spec.RunDir); len(m) > 0 {
		t.Errorf("destroy left mounts under the run dir: %v", m)
	}
	t.Logf("cgroups before destroy: %v; processes: %v", before, procs)
}

// checkGone fails unless init, the cgroups and the socket of h are gone.
func (s *suite) checkGone(t testing.TB, h *driver.Handle) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(h.Pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(h.Pid) {
		t.Errorf("init %d still runs", h.Pid)
	}
	if dirs := s.cgroupDirs(h.ID); len(dirs) > 0 {
		t.Errorf("cgroups left: %v", dirs)
	}
	if h.Socket != "" {
		if _, err := os.Lstat(h.Socket); err == nil {
			t.Errorf("the guest socket %s is left", h.Socket)
		}
	}
}

func (s *suite) adoptAfterRestart(t *testing.T) {
	d1 := s.New(t)
	h, _ := s.create(t, d1)
	mustExec(t, d1, h, "echo before > /root/state")
	// The daemon restarts: a new driver instance with only the persisted
	// handle, as JSON, to go on.
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var h2 driver.Handle
	if err := json.Unmarshal(b, &h2); err != nil {
		t.Fatal(err)
	}
	d2 := s.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d2.Adopt(ctx, &h2); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if got := mustExec(t, d2, &h2, "cat /root/state"); got != "before" {
		t.Errorf("the adopted sandbox answers %q", got)
	}
	select {
	case <-d2.Exited(&h2):
		t.Fatal("Exited is closed for an adopted running sandbox")
	default:
	}
	// The adopted sandbox's death is seen by the new instance.
	if err := unix.Kill(h2.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d2.Exited(&h2):
	case <-time.After(30 * time.Second):
		t.Fatal("Exited not closed for an adopted sandbox whose init was killed")
	}
	if err := d2.Destroy(ctx, &h2); err != nil {
		t.Errorf("destroy through the new instance: %v", err)
	}
	s.checkGone(t, &h2)
	// A dead sandbox is not adopted.
	err = s.New(t).Adopt(ctx, &h2)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("adopting a destroyed sandbox: %v, want ErrNotFound", err)
	}
}

func (s *suite) cleanupUnknown(t *testing.T) {
	d1 := s.New(t)
	keep, _ := s.create(t, d1)
	lost, lostSpec := s.create(t, d1)
	lostProcs := s.cgroupProcs(lost.ID)
	// A restarted daemon knows only keep.
	d2 := s.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	removed, err := d2.Cleanup(ctx, map[string]bool{keep.ID: true})
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
	t.Logf("cleanup removed %v", removed)
	if !mentions(removed, lost.ID) {
		t.Errorf("cleanup did not report removing %s: %v", lost.ID, removed)
	}
	if mentions(removed, keep.ID) {
		t.Errorf("cleanup removed the kept sandbox %s: %v", keep.ID, removed)
	}
	s.checkGoneExceptSocket(t, lost)
	for _, p := range lostProcs {
		if alive(p) {
			t.Errorf("host process %d (%s) of the unknown sandbox survived cleanup", p, comm(p))
		}
	}
	if m := mountsUnder(lostSpec.RunDir); len(m) > 0 {
		t.Errorf("cleanup left mounts of the unknown sandbox: %v", m)
	}
	if err := d2.Adopt(ctx, keep); err != nil {
		t.Fatalf("the kept sandbox cannot be adopted after cleanup: %v", err)
	}
	if got := mustExec(t, d2, keep, "echo kept"); got != "kept" {
		t.Errorf("the kept sandbox answers %q", got)
	}
	// Cleanup with nothing unknown removes nothing.
	removed, err = s.New(t).Cleanup(ctx, map[string]bool{keep.ID: true})
	if err != nil || mentions(removed, keep.ID) {
		t.Errorf("a second cleanup: %v, %v", removed, err)
	}
}

// checkGoneExceptSocket is checkGone for a sandbox removed by Cleanup,
// which does not know its socket (the service removes its run dir).
func (s *suite) checkGoneExceptSocket(t testing.TB, h *driver.Handle) {
	t.Helper()
	hc := *h
	hc.Socket = ""
	s.checkGone(t, &hc)
}

// Host-side readings.

// cgroupDirs lists the directories of sandbox id under the cgroup parent
// in every hierarchy (v1 controllers and the unified one).
func (s *suite) cgroupDirs(id string) []string {
	var out []string
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		for _, p := range []string{filepath.Join("/sys/fs/cgroup", e.Name(), s.CgroupParent, id), filepath.Join("/sys/fs/cgroup", s.CgroupParent, id)} {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() && !contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// cgroupProcs lists the host pids in sandbox id's cgroups.
func (s *suite) cgroupProcs(id string) []int {
	seen := map[int]bool{}
	var out []int
	for _, dir := range s.cgroupDirs(id) {
		_ = filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
			if err != nil || de.IsDir() || de.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil && !seen[n] {
					seen[n] = true
					out = append(out, n)
				}
			}
			return nil
		})
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func mentions(list []string, id string) bool {
	for _, x := range list {
		if strings.Contains(x, id) {
			return true
		}
	}
	return false
}

// alive says whether a host pid runs (a zombie counts as gone).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || len(b) < i+3 || b[i+2] != 'Z'
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// mountsUnder lists mount points at or below dir in the host's mount
// table.
func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// Setup helpers for drivers' tests.

// BuildGuest builds the static guest agent into a temporary directory and
// returns its path.
func BuildGuest(t testing.TB) string {
	t.Helper()
	// Not under t.TempDir (0700): sandboxes, as an unprivileged host uid,
	// must be able to reach and run it.
	dir, err := os.MkdirTemp("/var/tmp", "drivertest-guest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "agentbox-guest")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/agentbox/agentbox/cmd/agentbox-guest")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the guest agent: %v\n%s", err, b)
	}
	return out
}

// BusyboxRootfs returns a copy of the busybox root that
// scripts/build-template.sh leaves in the build cache, with its files
// shifted to uidBase as storage stores templates (the sandbox's root owns
// them), or fails saying how to make it.
func BusyboxRootfs(t testing.TB, uidBase int) string {
	t.Helper()
	src := ""
	for _, dir := range []string{"/var/lib/agentbox/build/busybox/rootfs", "/var/lib/agentbox/build/busybox"} {
		if _, err := os.Stat(filepath.Join(dir, "bin", "sh")); err == nil {
			src = dir
			break
		}
	}
	if src == "" {
		t.Fatal("no busybox rootfs: run scripts/build-template.sh busybox --no-import (make test does)")
	}
	tmp, err := os.MkdirTemp("/var/tmp", "drivertest-rootfs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(tmp, "rootfs")
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("copying the busybox root: %v: %s", err, out)
	}
	err = filepath.WalkDir(dst, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		return unix.Lchown(p, uidBase+int(st.Uid), uidBase+int(st.Gid))
	})
	if err != nil {
		t.Fatalf("shifting the busybox root: %v", err)
	}
	return dst
}

// CgroupParent returns a cgroup parent name unique to this test run and
// removes its directories when the test ends.
func CgroupParent(t testing.TB) string {
	t.Helper()
	parent := fmt.Sprintf("agentbox-drivertest-%d", time.Now().UnixNano()%100000000)
	t.Cleanup(func() {
		ents, _ := os.ReadDir("/sys/fs/cgroup")
		for _, e := range ents {
			_ = os.Remove(filepath.Join("/sys/fs/cgroup", e.Name(), parent))
		}
		_ = os.Remove(filepath.Join("/sys/fs/cgroup", parent))
	})
	return parent
}

// IDRanges is a uid range pool for a driver under test, as the daemon's
// (uid_ranges): every sandbox in a range of its own, seeing the suite's
// layers and writable layers (all under /var/tmp) through its views. One
// pool serves every driver instance of a test: a restarted driver claims
// its sandboxes' ranges from it, as a restarted daemon does from the
// ranges it reserved.
func IDRanges(t testing.TB, uidBase int) *idrange.Pool {
	t.Helper()
	// The views' directory, as the daemon's, is searchable by the inits
	// on their way to their layers.
	dir, err := os.MkdirTemp("/run", "agentbox-idmap-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeEmptyTree(dir) })
	p, err := idrange.New(idrange.Options{Base: uidBase, Count: 65536, Ranges: 64, Roots: []string{"/var/tmp"}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// removeEmptyTree removes dir and the directories under it, and nothing
// else: were a view still mounted there, its files would stay.
func removeEmptyTree(dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
}
