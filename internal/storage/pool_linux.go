package storage

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

// Defaults for Options.
const (
	DefaultSizeGB   = 64
	DefaultUIDBase  = 1000000
	DefaultUIDCount = 65536
)

// Options configure a Pool.
type Options struct {
	// DataDir holds storage.img and its mount point storage/
	// (e.g. /var/lib/agentbox).
	DataDir string
	// SizeGB is the size of the sparse pool file when it is first made
	// (default 64). An existing pool is never shrunk; a larger SizeGB grows it.
	SizeGB int
	// UIDBase and UIDCount describe the host uid range that sandbox uids
	// 0..UIDCount-1 map to (defaults 1000000 and 65536).
	UIDBase, UIDCount int
	Logger            *slog.Logger
	// QgroupCheck is how often the pool checks that btrfs's quota
	// accounting is consistent, which the disk limits need (0: every
	// 30 s; negative: only at Open).
	QgroupCheck time.Duration
}

// DefaultQgroupCheck is Options.QgroupCheck's default.
const DefaultQgroupCheck = 30 * time.Second

// Pool is the daemon's btrfs storage pool. Its methods are safe for
// concurrent use.
type Pool struct {
	dataDir  string
	img      string
	root     string // the mount point
	uidBase  int
	uidCount int
	log      *slog.Logger

	// mu serializes template imports (version numbering).
	mu sync.Mutex
	// build pins the layers running builds use (build_linux.go).
	build buildState
	// floorMu serializes making inode floors; floors caches each made
	// floor's inode by its layer's subvolume id (inofloor_linux.go).
	floorMu sync.Mutex
	floors  map[uint64]uint64
	// spares are layers made from floors ahead of use.
	spares spareState
	// stopWatch ends the qgroup watch (btrfs_linux.go), nil without
	// one; watching waits for it to end.
	stopWatch context.CancelFunc
	watching  sync.WaitGroup
}

// Open makes the pool ready: it creates and formats storage.img on first
// use, mounts it at <DataDir>/storage unless it is mounted there already,
// enables quotas, and removes what an interrupted run left behind. It is
// safe to call again after a daemon restart while sandboxes still use the
// mount.
func Open(ctx context.Context, opts Options) (*Pool, error) {
	if opts.DataDir == "" || !filepath.IsAbs(opts.DataDir) {
		return nil, errdefs.Invalid("storage data dir must be an absolute path, got %q", opts.DataDir)
	}
	if opts.SizeGB == 0 {
		opts.SizeGB = DefaultSizeGB
	}
	if opts.SizeGB < 1 {
		return nil, errdefs.Invalid("storage size must be at least 1 GB, got %d", opts.SizeGB)
	}
	if opts.UIDBase == 0 {
		opts.UIDBase = DefaultUIDBase
	}
	if opts.UIDCount == 0 {
		opts.UIDCount = DefaultUIDCount
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p := &Pool{
		dataDir:  filepath.Clean(opts.DataDir),
		uidBase:  opts.UIDBase,
		uidCount: opts.UIDCount,
		log:      opts.Logger.With("component", "storage"),
		floors:   map[uint64]uint64{},
		spares:   spareState{byFloor: map[string][]string{}, filling: map[string]bool{}, used: map[string]time.Time{}},
	}
	p.img = filepath.Join(p.dataDir, "storage.img")
	p.root = filepath.Join(p.dataDir, "storage")

	// The guest mounts the overlay as root of the sandbox's user namespace,
	// which is an unprivileged host uid: every directory on the way to the
	// layers must be searchable by others.
	if err := os.MkdirAll(p.dataDir, 0o711); err != nil {
		return nil, fmt.Errorf("creating storage data dir: %w", err)
	}
	if err := ensureSearchable(p.dataDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(p.root, 0o711); err != nil {
		return nil, fmt.Errorf("creating storage mount point: %w", err)
	}
	if err := p.ensureImage(ctx, opts.SizeGB); err != nil {
		return nil, err
	}
	if err := p.ensureMounted(ctx); err != nil {
		return nil, err
	}
	if err := p.growIfNeeded(ctx, opts.SizeGB); err != nil {
		p.log.Warn("could not grow the storage pool", "err", err)
	}
	if out, err := runCmd(ctx, "btrfs", "quota", "enable", p.root); err != nil {
		return nil, fmt.Errorf("enabling btrfs quotas on %s: %w: %s", p.root, err, out)
	}
	qgroups, err := p.qgroupsDir()
	var watch *qgroupWatch
	if err != nil {
		p.log.Warn("btrfs qgroups: finding the pool's sysfs directory: disk limits go unwatched", "err", err)
	} else {
		watch = &qgroupWatch{dir: qgroups, root: p.root, log: p.log}
		watch.check(ctx)
	}
	for _, d := range []string{p.root, p.templatesDir(), p.sandboxesDir()} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, fmt.Errorf("chmod %s: %w", d, err)
		}
	}
	p.removeStaging()
	p.removeTempFiles()
	p.sweepFloors()
	p.sweepStaleQgroups(ctx)
	// Started last: nothing above can fail and leave it running.
	if opts.QgroupCheck == 0 {
		opts.QgroupCheck = DefaultQgroupCheck
	}
	if watch != nil && opts.QgroupCheck > 0 {
		var wctx context.Context
		wctx, p.stopWatch = context.WithCancel(context.Background())
		p.watching.Go(func() { watch.run(wctx, opts.QgroupCheck) })
	}
	p.log.Debug("storage pool open", "root", p.root)
	return p, nil
}

// Close releases the pool: it waits for the spare layers being made and
// removes the spares (inofloor_linux.go). It does not unmount it: running
// sandboxes keep using their layers across daemon restarts.
func (p *Pool) Close() error {
	p.closeSpares()
	if p.stopWatch != nil {
		p.stopWatch()
	}
	p.watching.Wait()
	return nil
}

// Root returns the pool's mount point.
func (p *Pool) Root() string { return p.root }

// UIDBase returns the host uid that sandbox uid 0 maps to.
func (p *Pool) UIDBase() int { return p.uidBase }

func (p *Pool) templatesDir() string { return filepath.Join(p.root, "templates") }
func (p *Pool) sandboxesDir() string { return filepath.Join(p.root, "sandboxes") }

func ensureSearchable(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("storage data dir: %w", err)
	}
	if fi.Mode().Perm()&0o001 == 0 {
		if err := os.Chmod(dir, fi.Mode().Perm()|0o011); err != nil {
			return fmt.Errorf("making %s searchable for sandbox uids: %w", dir, err)
		}
	}
	return nil
}

func (p *Pool) ensureImage(ctx context.Context, sizeGB int) error {
	if _, err := os.Stat(p.img); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("storage image: %w", err)
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		return errdefs.Precondition("mkfs.btrfs not found: install btrfs-progs (apt-get install btrfs-progs)")
	}
	tmp := p.img + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating storage image: %w", err)
	}
	err = f.Truncate(int64(sizeGB) << 30)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sizing storage image: %w", err)
	}
	if out, err := runCmd(ctx, "mkfs.btrfs", "-q", "-L", "agentbox", tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("formatting storage image: %w: %s", err, out)
	}
	if err := os.Rename(tmp, p.img); err != nil {
		return fmt.Errorf("creating storage image: %w", err)
	}
	p.log.Info("created storage pool", "image", p.img, "size_gb", sizeGB)
	return nil
}

func (p *Pool) ensureMounted(ctx context.Context) error {
	fstype, mounted, err := mountedAt(p.root)
	if err != nil {
		return err
	}
	if mounted {
		if fstype != "btrfs" {
			return errdefs.Precondition("%s is mounted with %s, not btrfs: unmount it or choose another data dir", p.root, fstype)
		}
		return nil
	}
	// mount(8) attaches a loop device with autoclear, so unmounting
	// also detaches it.
	if out, err := runCmd(ctx, "mount", "-t", "btrfs", "-o", "loop,noatime", p.img, p.root); err != nil {
		return fmt.Errorf("mounting storage pool %s at %s (is the btrfs module available?): %w: %s", p.img, p.root, err, out)
	}
	p.log.Info("mounted storage pool", "image", p.img, "at", p.root)
	return nil
}

func (p *Pool) growIfNeeded(ctx context.Context, sizeGB int) error {
	fi, err := os.Stat(p.img)
	if err != nil {
		return err
	}
	want := int64(sizeGB) << 30
	if fi.Size() >= want {
		return nil
	}
	if err := os.Truncate(p.img, want); err != nil {
		return err
	}
	// The loop device must see the new size before btrfs can use it.
	dev, err := backingLoop(p.root)
	if err == nil && dev != "" {
		if out, err := runCmd(ctx, "losetup", "-c", dev); err != nil {
			return fmt.Errorf("losetup -c: %w: %s", err, out)
		}
	}
	if out, err := runCmd(ctx, "btrfs", "filesystem", "resize", "max", p.root); err != nil {
		return fmt.Errorf("btrfs resize: %w: %s", err, out)
	}
	p.log.Info("grew storage pool", "size_gb", sizeGB)
	return nil
}

// mountedAt reports whether a filesystem is mounted at dir, from
// /proc/self/mountinfo, and its type.
func mountedAt(dir string) (fstype string, ok bool, err error) {
	e, err := findMount(dir)
	if err != nil || e == nil {
		return "", false, err
	}
	return e.fstype, true, nil
}

type mountEntry struct {
	point, fstype, source string
}

func findMount(dir string) (*mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	var found *mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		if unescapeMount(fields[4]) != dir {
			continue
		}
		i := 6
		for i < len(fields) && fields[i] != "-" {
			i++
		}
		if i+2 >= len(fields) {
			continue
		}
		// The last mount at a point is the one visible.
		found = &mountEntry{point: dir, fstype: fields[i+1], source: unescapeMount(fields[i+2])}
	}
	return found, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func backingLoop(dir string) (string, error) {
	e, err := findMount(dir)
	if err != nil || e == nil {
		return "", err
	}
	if strings.HasPrefix(e.source, "/dev/loop") {
		return e.source, nil
	}
	return "", nil
}

func runCmd(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// sweepStaleQgroups destroys level-0 qgroups whose subvolume is gone. Recent
// kernels drop them on their own once the cleaner has freed the subvolume;
// older ones keep them, and RemoveLayer cannot always destroy them at once
// (EBUSY while the cleaner runs), so each Open finishes the job.
func (p *Pool) sweepStaleQgroups(ctx context.Context) {
	out, err := runCmd(ctx, "btrfs", "qgroup", "show", "--raw", p.root)
	if err != nil {
		p.log.Debug("listing qgroups", "err", err, "out", out)
		return
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[len(f)-1] != "<stale>" || !strings.HasPrefix(f[0], "0/") {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimPrefix(f[0], "0/"), 10, 64)
		if err != nil {
			continue
		}
		if err := qgroupDestroy(p.root, id); err != nil {
			p.log.Debug("stale qgroup not removed yet", "qgroup", f[0], "err", err)
		}
	}
}
