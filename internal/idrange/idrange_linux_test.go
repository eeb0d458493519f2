package idrange

import (
	"errors"
	"github.com/agentbox/agentbox/internal/guest/boot"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// pool makes a pool over a tmpfs root holding a file of canonical uid
// base+5.
func pool(t testing.TB, ranges int) (*Pool, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts") // make test runs as root
	}
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	f := filepath.Join(root, "layer", "file")
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, 1000005, 1000006); err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Base: 1000000, Count: 65536, Ranges: ranges, Roots: []string{root}, Dir: filepath.Join(t.TempDir(), "views")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, f
}

func owner(t testing.TB, path string) (uint32, uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

// TestRanges: each range sees the canonical files shifted onto it, writes
// land canonical on disk, released ranges come back first, claims and
// exhaustion answer clearly.
func TestRanges(t *testing.T) {
	p, f := pool(t, 3)
	a, err := p.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if a.Base() != 1065536 || b.Base() != 1131072 {
		t.Fatalf("bases %d %d", a.Base(), b.Base())
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(f), "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(filepath.Dir(f), "new"), 1000000, 1000000); err != nil {
		t.Fatal(err)
	}
	inViews(t, []*Range{a, b}, func() {
		for _, r := range []*Range{a, b} {
			v, err := r.Path(f)
			if err != nil {
				t.Error(err)
				return
			}
			if u, g := owner(t, v); int(u) != r.Base()+5 || int(g) != r.Base()+6 {
				t.Errorf("range %d sees %d:%d, want %d:%d", r.Base(), u, g, r.Base()+5, r.Base()+6)
			}
		}
		// A file a range's root hands its uid 7 is canonical on disk.
		v, _ := a.Path(filepath.Join(filepath.Dir(f), "new"))
		if err := os.Chown(v, a.Base()+7, a.Base()+7); err != nil {
			t.Error(err)
		}
		// Ids outside the range cannot be written through the view.
		if err := os.Chown(v, 1000007, 1000007); err == nil {
			t.Error("chown to an unmapped id through a view worked")
		}
	})
	if u, _ := owner(t, filepath.Join(filepath.Dir(f), "new")); u != 1000007 {
		t.Errorf("on disk: uid %d, want 1000007", u)
	}
	// The host's mount table holds no view.
	if n := mountsUnder(t, p.o.Dir); n != 0 {
		t.Errorf("%d mounts under %s in the host's table, want none", n, p.o.Dir)
	}
	if _, err := a.Path("/etc/passwd"); err == nil {
		t.Error("a path under no root was translated")
	}
	c, err := p.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Acquire(); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("fourth acquire of three: %v", err)
	}
	b.Release()
	b.Release()
	if again, err := p.Acquire(); err != nil || again.Base() != b.Base() {
		t.Fatalf("after a release: %v %v", again, err)
	}
	c.Release()
	if _, err := p.Claim(c.Base()+1, "x"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("claim of a non-range base: %v", err)
	}
	a.SetOwner("sandbox-a")
	if _, err := p.Claim(a.Base(), "sandbox-z"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("claim of a used range: %v", err)
	}
	if r, err := p.Claim(c.Base(), "sandbox-c"); err != nil || r.Base() != c.Base() {
		t.Errorf("claim of a free range: %v %v", r, err)
	}
	if p.InUse() != 3 {
		t.Errorf("in use %d, want 3", p.InUse())
	}
	// The same sandbox claims its range again (a second driver instance):
	// the first Range then releases nothing.
	a2, err := p.Claim(a.Base(), "sandbox-a")
	if err != nil {
		t.Fatal(err)
	}
	a.Release()
	if p.InUse() != 3 {
		t.Errorf("a replaced Range released its range: in use %d", p.InUse())
	}
	a2.Release()
	if p.InUse() != 2 {
		t.Errorf("in use %d after the release, want 2", p.InUse())
	}
}

// TestReserve: a restarted daemon reserves its sandboxes' ranges before
// inits acquire theirs; adoption claims them; the rest are dropped.
func TestReserve(t *testing.T) {
	p, _ := pool(t, 3)
	base := func(k int) int { return 1000000 + (k+1)*65536 }
	if err := p.Reserve(base(0), "kept"); err != nil {
		t.Fatal(err)
	}
	if err := p.Reserve(base(2), "gone"); err != nil {
		t.Fatal(err)
	}
	if err := p.Reserve(base(2), "other"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second owner's reservation: %v", err)
	}
	r, err := p.Acquire()
	if err != nil || r.Base() != base(1) {
		t.Fatalf("acquire beside reservations: %v %v", r, err)
	}
	if _, err := p.Claim(base(0), "not-kept"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("another sandbox claimed a reserved range: %v", err)
	}
	if _, err := p.Claim(base(0), "kept"); err != nil {
		t.Fatal(err)
	}
	p.DropReserved()
	if p.InUse() != 2 {
		t.Errorf("in use %d after dropping, want 2 (the claimed and the acquired)", p.InUse())
	}
	if r, err := p.Acquire(); err != nil || r.Base() != base(2) {
		t.Errorf("the dropped range is not handed out: %v %v", r, err)
	}
}

// TestNewDetachesOldViews: a second pool on the same directory (a daemon
// restart) works, and detaches what an earlier daemon of the old layout
// mounted there (its views, in the host's table).
func TestNewDetachesOldViews(t *testing.T) {
	p, f := pool(t, 2)
	if _, err := p.Acquire(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(p.o.Dir, p.o.Dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	q, err := New(p.o)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if n := mountsUnder(t, p.o.Dir); n != 0 {
		t.Errorf("%d mounts left under %s", n, p.o.Dir)
	}
	r, err := q.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	inViews(t, []*Range{r}, func() {
		v, _ := r.Path(f)
		if u, _ := owner(t, v); int(u) != r.Base()+5 {
			t.Errorf("uid %d", u)
		}
	})
}

// TestMountOverlay: an overlay mounted from the host's side (the gvisor
// tier's root) works in the range's ids through views attached nowhere,
// and stores what it writes canonical.
func TestMountOverlay(t *testing.T) {
	p, f := pool(t, 2)
	r, err := p.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	root := p.o.Roots[0]
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(root, d), 1000000, 1000000); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "upper"), 0o777); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	if err := r.MountOverlay([]string{filepath.Dir(f)}, filepath.Join(root, "upper"), filepath.Join(root, "work"), target, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(target, unix.MNT_DETACH)
	if u, _ := owner(t, filepath.Join(target, "file")); int(u) != r.Base()+5 {
		t.Errorf("through the overlay: uid %d, want %d", u, r.Base()+5)
	}
	// Written by the range's uid 3 (a thread of that filesystem uid).
	dir, err := unix.Open(target, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0) // the temp dir's parents are root's
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dir)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: its ids changed
		id := uintptr(r.Base() + 3)
		unix.RawSyscall(unix.SYS_SETFSGID, id, 0, 0)
		unix.RawSyscall(unix.SYS_SETFSUID, id, 0, 0)
		fd, err := unix.Openat(dir, "written", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if u, _ := owner(t, filepath.Join(root, "upper", "written")); u != 1000003 {
		t.Errorf("on disk: uid %d, want 1000003", u)
	}
	if n := mountsUnder(t, p.o.Dir); n != 0 {
		t.Errorf("%d mounts under %s in the host's table, want none", n, p.o.Dir)
	}
}

// inViews runs fn on a thread of its own in a mount namespace of its own,
// in which rs' views are attached (as a sandbox's init attaches its
// range's): the host's table never sees them.
func inViews(t *testing.T, rs []*Range, fn func()) {
	t.Helper()
	// Copied here, in the host's namespace, where the pool made them: a
	// detached mount is copied only from the namespace it came from.
	var fds []int
	var paths []string
	for _, r := range rs {
		files, p, err := r.Views()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			defer f.Close()
			fds = append(fds, int(f.Fd()))
		}
		paths = append(paths, p...)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread, in a mount namespace of its own,
		// ends with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
			t.Error(err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			t.Error(err)
			return
		}
		if err := boot.AttachViews(fds, paths); err != nil {
			t.Error(err)
			return
		}
		fn()
	}()
	<-done
}

// mountsUnder counts the host's mounts at or below dir: those of this
// thread's mount namespace (not /proc/self's, the main thread's, which a
// locked goroutine that ended may have left in another: inViews).
func mountsUnder(t testing.TB, dir string) int {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			n++
		}
	}
	return n
}

// BenchmarkAcquire: a range never used before (its views made: a user
// namespace and one id-mapped detached mount per root) and a released one
// handed out again (the steady state).
func BenchmarkAcquire(b *testing.B) {
	b.Run("fresh", func(b *testing.B) {
		p, _ := pool(b, b.N+1)
		b.ResetTimer()
		for range b.N {
			if _, err := p.Acquire(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reused", func(b *testing.B) {
		p, _ := pool(b, 4)
		r, _ := p.Acquire()
		r.Release()
		b.ResetTimer()
		for range b.N {
			r, err := p.Acquire()
			if err != nil {
				b.Fatal(err)
			}
			r.Release()
		}
	})
}

// TestOwners: a driver's bookkeeping. Take without a pool is nothing;
// Destroyed keeps a range out of use while the sandbox's processes may
// live, and releases it once they are gone; Adopt claims a stored
// handle's range once, and nothing for a handle without one.
func TestOwners(t *testing.T) {
	var o Owners
	if r, err := o.Take(nil, "x"); r != nil || err != nil {
		t.Fatalf("take without a pool: %v %v", r, err)
	}
	p, _ := pool(t, 2)
	r, err := o.Take(p, "a")
	if err != nil {
		t.Fatal(err)
	}
	o.Set("a", r)
	o.Destroyed("a", false, slog.Default())
	if p.InUse() != 1 || o.Get("a") == nil {
		t.Errorf("a range released while its processes may live: in use %d", p.InUse())
	}
	o.Destroyed("a", true, slog.Default())
	if p.InUse() != 0 || o.Get("a") != nil {
		t.Errorf("destroyed: in use %d", p.InUse())
	}
	var restarted Owners
	if err := restarted.Adopt(p, "b", 0); err != nil || p.InUse() != 0 {
		t.Errorf("adopting a handle without a range: %v, in use %d", err, p.InUse())
	}
	if err := restarted.Adopt(p, "b", r.Base()); err != nil || p.InUse() != 1 {
		t.Errorf("adopt: %v, in use %d", err, p.InUse())
	}
	if err := restarted.Adopt(p, "b", r.Base()); err != nil || p.InUse() != 1 {
		t.Errorf("adopting twice: %v, in use %d", err, p.InUse())
	}
}
