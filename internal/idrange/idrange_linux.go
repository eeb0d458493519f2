// Package idrange gives each sandbox a host uid and gid range of its own.
//
// On disk every sandbox file keeps one canonical range (uid_base ..
// uid_base+uid_count-1: templates are stored shifted to it, and snapshots,
// forks and persisted sandboxes copy it as it is). A sandbox's processes
// run in range k instead (uid_base + (k+1)*uid_count ..), and see the
// storage through an id-mapped mount of it for range k, which shows every
// canonical id shifted onto range k and stores what range k writes back
// in the canonical range. So no file is copied or chowned per sandbox,
// and a process that escaped one sandbox's namespaces owns no other
// sandbox's processes, files or per-user kernel counts.
//
// A range's views are made the first time it is used and kept: a
// released range goes back on a free list and is handed out again first,
// so in steady state an acquire is a few instructions. The views are
// detached mounts (open_tree), held open by the pool and in no mount
// namespace: the host's mount table does not grow with the ranges in
// use, so neither does the copy of it every new mount namespace (each
// sandbox init's) makes. A process of the range gets fresh copies of its
// range's views (Views) and attaches them at their paths under Dir in
// its own mount namespace (internal/guest/boot.AttachViews): a sandbox's init sees its range's
// views there, and no other range's, until it pivots into its root.
package idrange

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// Options configure a Pool.
type Options struct {
	// Base and Count are the canonical range: the ids sandbox files
	// have on disk.
	Base, Count int
	// Ranges is how many sandbox ranges follow it: range k starts at
	// Base + (k+1)*Count.
	Ranges int
	// Roots are the directories sandboxes' layers live under, each on a
	// filesystem that supports id-mapped mounts (btrfs, ext4, xfs, tmpfs);
	// a view of one is a bind mount of it (its submounts not included).
	Roots []string
	// Dir holds the directories a range's processes attach its views
	// on, in their own mount namespaces (Dir/<k>/<i> for Roots[i]);
	// nothing is mounted there in the host's.
	Dir    string
	Logger *slog.Logger
}

// Pool hands out ranges.
type Pool struct {
	o     Options
	sleep string // a program to hold a user namespace while it is set up

	mu   sync.Mutex
	used map[int]bool
	// owner names the sandbox a used range is for ("" while an init
	// waits with it); reserved marks those Reserve holds for a sandbox
	// not yet claimed.
	owner    map[int]string
	reserved map[int]bool
	// gen counts the hand-outs of each range: a Range of an earlier one
	// (a claim for the same sandbox replaced it) releases nothing.
	gen  map[int]uint64
	free []int // released ranges, their views made; reused last in, first out
	next int   // the lowest range never handed out
	// views holds each range's views made so far: a detached mount of
	// each root, id-mapped for the range (an fd each).
	views map[int][]int
}

// Range is one sandbox's range.
type Range struct {
	p        *Pool
	k        int
	gen      uint64
	released bool // under p.mu
}

// New checks that id-mapped views of every root can be made (making
// range 0's) and returns the pool. An earlier daemon's views mounted
// under Dir (its layout before views were detached mounts) are detached
// first (a running sandbox's root does not need them: its overlay holds
// its own copies of its layers' mounts).
func New(o Options) (*Pool, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Ranges < 1 || o.Count < 1 || o.Base < 1 || o.Dir == "" {
		return nil, errdefs.Invalid("idrange: need a base, a count, at least one range and a directory")
	}
	if last := int64(o.Base) + int64(o.Ranges+1)*int64(o.Count) - 1; last > 1<<32-2 {
		return nil, errdefs.Invalid("idrange: uid_base + (uid_ranges+1) x uid_count - 1 is %d, past the largest id %d; lower uid_ranges", last, int64(1<<32-2))
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return nil, fmt.Errorf("idrange: %w", err)
	}
	p := &Pool{o: o, sleep: sleep, used: map[int]bool{}, views: map[int][]int{}, owner: map[int]string{}, reserved: map[int]bool{}, gen: map[int]uint64{}}
	for unix.Unmount(o.Dir, unix.MNT_DETACH) == nil {
	}
	if err := os.MkdirAll(o.Dir, 0o711); err != nil {
		return nil, fmt.Errorf("idrange: %w", err)
	}
	_ = os.Chmod(o.Dir, 0o711)
	if err := p.ensureViewsLocked(0); err != nil {
		return nil, err
	}
	p.free, p.next = []int{0}, 1
	return p, nil
}

// Close closes every view. Sandboxes keep running: their roots hold
// their own copies of the mounts they use.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, fds := range p.views {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	p.views = map[int][]int{}
	return nil
}

// Acquire hands out a free range.
func (p *Pool) Acquire() (*Range, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := -1
	if n := len(p.free); n > 0 {
		k, p.free = p.free[n-1], p.free[:n-1]
	} else {
		for p.next < p.o.Ranges && p.used[p.next] {
			p.next++
		}
		if p.next == p.o.Ranges {
			return nil, errdefs.New(errdefs.ErrResourceExhausted, "all %d sandbox uid ranges are in use; raise uid_ranges in the daemon's config", p.o.Ranges)
		}
		k = p.next
		p.next++
	}
	if err := p.ensureViewsLocked(k); err != nil {
		p.free = append(p.free, k)
		return nil, err
	}
	p.used[k] = true
	return p.handOutLocked(k), nil
}

func (p *Pool) handOutLocked(k int) *Range {
	p.gen[k]++
	return &Range{p: p, k: k, gen: p.gen[k]}
}

// index is the range number of base, or an error saying why it is none.
func (p *Pool) index(base int) (int, error) {
	k := (base-p.o.Base)/p.o.Count - 1
	if base < p.o.Base+p.o.Count || (base-p.o.Base)%p.o.Count != 0 || k >= p.o.Ranges {
		return 0, errdefs.Invalid("uid %d does not start one of the %d sandbox ranges after %d (uid_base, uid_count or uid_ranges changed?)", base, p.o.Ranges, p.o.Base)
	}
	return k, nil
}

// Reserve holds the range starting at base for sandbox owner, which an
// earlier daemon gave it: a restarted daemon reserves its sandboxes'
// ranges before anything else acquires one, its drivers Claim them as
// they adopt the sandboxes, and DropReserved frees the rest.
func (p *Pool) Reserve(base int, owner string) error {
	k, err := p.index(base)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used[k] && p.owner[k] != owner {
		return errdefs.New(errdefs.ErrAlreadyExists, "uid range %d is reserved for sandbox %s, not %s", base, p.owner[k], owner)
	}
	p.free = slices.DeleteFunc(p.free, func(f int) bool { return f == k })
	p.used[k], p.owner[k], p.reserved[k] = true, owner, true
	return nil
}

// DropReserved frees the reserved ranges no driver claimed.
func (p *Pool) DropReserved() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.reserved {
		delete(p.used, k)
		delete(p.owner, k)
		p.free = append(p.free, k)
	}
	clear(p.reserved)
}

// Claim takes the range starting at base for sandbox owner again, when
// a driver adopts it: free, or reserved (or held) for the same owner.
func (p *Pool) Claim(base int, owner string) (*Range, error) {
	k, err := p.index(base)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used[k] && (owner == "" || p.owner[k] != owner) {
		return nil, errdefs.New(errdefs.ErrAlreadyExists, "uid range %d is already in use", base)
	}
	if err := p.ensureViewsLocked(k); err != nil {
		return nil, err
	}
	p.free = slices.DeleteFunc(p.free, func(f int) bool { return f == k })
	p.used[k], p.owner[k] = true, owner
	delete(p.reserved, k)
	return p.handOutLocked(k), nil
}

// SetOwner records which sandbox the range is for.
func (r *Range) SetOwner(id string) {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	if !r.released && r.gen == r.p.gen[r.k] {
		r.p.owner[r.k] = id
	}
}

// Free is how many ranges are left to hand out.
func (p *Pool) Free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.o.Ranges - len(p.used)
}

// InUse is the number of ranges handed out.
func (p *Pool) InUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.used)
}

// Base is the range's first host id.
func (r *Range) Base() int { return r.p.o.Base + (r.k+1)*r.p.o.Count }

// Count is the range's size.
func (r *Range) Count() int { return r.p.o.Count }

// Path is host path seen through the range's view attached where a
// process of the range attaches it (Views; internal/guest/boot.AttachViews): what the range's
// processes must be given instead of it. A path under no root is an
// error.
func (r *Range) Path(host string) (string, error) {
	for i, root := range r.p.o.Roots {
		rel, err := filepath.Rel(root, host)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return filepath.Join(r.p.o.Dir, strconv.Itoa(r.k), strconv.Itoa(i), rel), nil
		}
	}
	return "", fmt.Errorf("%s is under none of the id-mapped roots %v", host, r.p.o.Roots)
}

// Overlay is an overlay's layer paths as the range sees them.
func (r *Range) Overlay(lower []string, upper, work string) (l []string, u, w string, err error) {
	for _, d := range lower {
		v, err := r.Path(d)
		if err != nil {
			return nil, "", "", fmt.Errorf("template layer: %w", err)
		}
		l = append(l, v)
	}
	if u, err = r.Path(upper); err != nil {
		return nil, "", "", fmt.Errorf("writable layer: %w", err)
	}
	if w, err = r.Path(work); err != nil {
		return nil, "", "", fmt.Errorf("writable layer: %w", err)
	}
	return l, u, w, nil
}

// Release gives the range back. Releasing a nil Range, or one twice, is
// harmless: a second release never frees the range for whoever has it
// next.
func (r *Range) Release() {
	if r == nil {
		return
	}
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if !r.released && r.gen == p.gen[r.k] && p.used[r.k] {
		r.released = true
		delete(p.used, r.k)
		delete(p.owner, r.k)
		delete(p.reserved, r.k)
		p.free = append(p.free, r.k)
	}
}

func (p *Pool) ensureViewsLocked(k int) error {
	if p.views[k] != nil {
		return nil
	}
	fds, err := p.makeViews(k)
	if err != nil {
		return err
	}
	p.views[k] = fds
	return nil
}

// makeViews makes range k's view of every root, a detached clone of the
// root's mount id-mapped through a user namespace in which the canonical
// range is range k's, and the directories they are attached on.
func (p *Pool) makeViews(k int) (fds []int, err error) {
	base := p.o.Base + (k+1)*p.o.Count
	ns, err := p.userns(base)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ns) // each view holds it
	defer func() {
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			fds = nil
		}
	}()
	for i, root := range p.o.Roots {
		if err := os.MkdirAll(filepath.Join(p.o.Dir, strconv.Itoa(k), strconv.Itoa(i)), 0o711); err != nil {
			return fds, fmt.Errorf("idrange: %w", err)
		}
		fd, err := idmapClone(root, ns)
		if err != nil {
			return fds, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// idmapClone returns a detached clone of the mount at src (without its
// submounts), id-mapped through user namespace ns.
func idmapClone(src string, ns int) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("idrange: cloning the mount of %s: %w", src, err)
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns)}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("idrange: id-mapping the mount of %s (its filesystem must support id-mapped mounts: btrfs, ext4, xfs, tmpfs or overlay, Linux 6.3 or later): %w", src, err)
	}
	return fd, nil
}

// Views returns fresh copies of the range's views, detached mounts (one
// per root, cloned from those the pool keeps), and the paths under Dir a
// process of the range attaches them at (internal/guest/boot.AttachViews) in its own mount
// namespace; Path and Overlay name paths below them. The caller closes
// the files: a copy attached nowhere goes with its last descriptor.
func (r *Range) Views() (files []*os.File, paths []string, err error) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.ensureViewsLocked(r.k); err != nil {
		return nil, nil, err
	}
	for i, v := range p.views[r.k] {
		fd, err := unix.OpenTree(v, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, nil, fmt.Errorf("idrange: copying range %d's view of %s: %w", r.Base(), p.o.Roots[i], err)
		}
		dir := filepath.Join(p.o.Dir, strconv.Itoa(r.k), strconv.Itoa(i))
		files = append(files, os.NewFile(uintptr(fd), "idmap-view"))
		paths = append(paths, dir)
	}
	return files, paths, nil
}

// MountOverlay mounts at target, from the host's side, an overlay of the
// range's views (copies attached nowhere) of lower, upper and work (host paths under the roots)
// with extra mount flags, for a root a process of the range's reaches
// from the host's side (the gvisor tier's, which its gofer serves). An
// overlay works in the layers with its mounter's credentials, which the
// views must map: it is mounted on a thread of its own, whose
// filesystem uid and gid are the range's root's (its capabilities kept:
// SECBIT_NO_SETUID_FIXUP), and which then ends.
func (r *Range) MountOverlay(lower []string, upper, work, target string, flags uintptr) error {
	// The layers are named through copies of the range's views, open
	// here and attached nowhere (/proc/self/fd/N/...).
	views, _, err := r.Views()
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range views {
			f.Close()
		}
	}()
	via := func(host string) (string, error) {
		for i, root := range r.p.o.Roots {
			rel, err := filepath.Rel(root, host)
			if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return filepath.Join("/proc/self/fd", strconv.Itoa(int(views[i].Fd())), rel), nil
			}
		}
		return "", fmt.Errorf("%s is under none of the id-mapped roots %v", host, r.p.o.Roots)
	}
	var l []string
	for _, d := range lower {
		v, err := via(d)
		if err != nil {
			return fmt.Errorf("template layer: %w", err)
		}
		l = append(l, v)
	}
	u, err := via(upper)
	if err != nil {
		return fmt.Errorf("writable layer: %w", err)
	}
	w, err := via(work)
	if err != nil {
		return fmt.Errorf("writable layer: %w", err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(l, ":"), u, w)
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, its credentials changed, ends with
		// the goroutine.
		runtime.LockOSThread()
		done <- func() error {
			bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
			if err != nil {
				return err
			}
			if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits)|secbitNoSetuidFixup, 0, 0, 0); err != nil {
				return fmt.Errorf("keeping capabilities: %w", err)
			}
			base := uintptr(r.Base())
			if _, _, e := unix.RawSyscall(unix.SYS_SETFSGID, base, 0, 0); e != 0 {
				return e
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SETFSUID, base, 0, 0); e != 0 {
				return e
			}
			return unix.Mount("overlay", target, "overlay", flags, opts)
		}()
	}()
	if err := <-done; err != nil {
		return fmt.Errorf("idrange: mounting an overlay of range %d (%s) at %s: %w", r.Base(), opts, target, err)
	}
	return nil
}

// secbitNoSetuidFixup keeps a thread's capabilities across a change of
// its uids (include/uapi/linux/securebits.h).
const secbitNoSetuidFixup = 1 << 2

// userns returns an fd of a new user namespace mapping the canonical
// range onto base.., held by a short-lived process while it is opened.
func (p *Pool) userns(base int) (int, error) {
	m := []syscall.SysProcIDMap{{ContainerID: p.o.Base, HostID: base, Size: p.o.Count}}
	cmd := exec.Command(p.sleep, "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: m, GidMappings: m, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("idrange: a user namespace for range %d: %w", base, err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("idrange: a user namespace for range %d: %w", base, err)
	}
	return fd, nil
}

// Owners maps sandbox ids to their ranges, for a driver.
type Owners struct{ m sync.Map }

// Set records id's range; the one id had before is released. A nil r
// forgets id (and releases its range).
func (o *Owners) Set(id string, r *Range) {
	var old any
	if r == nil {
		old, _ = o.m.LoadAndDelete(id)
	} else {
		old, _ = o.m.Swap(id, r)
	}
	if prev, ok := old.(*Range); ok && prev != r {
		prev.Release()
	}
}

// Get is id's range, nil if it has none of its own.
func (o *Owners) Get(id string) *Range {
	v, _ := o.m.Load(id)
	r, _ := v.(*Range)
	return r
}

// Swap records id's range without releasing the one it had, and returns
// that one.
func (o *Owners) Swap(id string, r *Range) *Range {
	var old any
	if r == nil {
		old, _ = o.m.LoadAndDelete(id)
	} else {
		old, _ = o.m.Swap(id, r)
	}
	prev, _ := old.(*Range)
	return prev
}

// Take acquires a range for sandbox id from p; nil (no error) without a
// pool. The caller releases it if the sandbox is not made.
func (o *Owners) Take(p *Pool, id string) (*Range, error) {
	if p == nil {
		return nil, nil
	}
	r, err := p.Acquire()
	if err != nil {
		return nil, err
	}
	r.SetOwner(id)
	return r, nil
}

// Adopt claims from p the range starting at base (a stored handle's) for
// sandbox id, which a restarted daemon adopts; nothing to do without a
// pool, without a range of its own (base 0) or when id already has one.
func (o *Owners) Adopt(p *Pool, id string, base int) error {
	if p == nil || base == 0 || o.Get(id) != nil {
		return nil
	}
	r, err := p.Claim(base, id)
	if err != nil {
		return fmt.Errorf("sandbox %s: its uid range: %w", id, err)
	}
	o.Set(id, r)
	return nil
}

// Destroyed releases sandbox id's range once its processes are gone
// (gone); otherwise the range stays out of use, and log says so: another
// sandbox in it could reach a straggler.
func (o *Owners) Destroyed(id string, gone bool, log *slog.Logger) {
	if gone {
		o.Set(id, nil)
	} else if r := o.Get(id); r != nil {
		log.Warn("keeping a destroyed sandbox's uid range out of use: its processes may not all be gone", "sandbox", id, "uid", r.Base())
	}
}
