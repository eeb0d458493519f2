package microvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A template layer is a read-only host directory whose files are stored
// shifted to the host's uid_base. The guest kernel reads it as an erofs
// image, made once per layer and kept in the cache: mkfs.erofs runs in a
// user namespace that maps uid_base.. back to 0.., so the image holds the
// sandbox's own uids (erofs-utils 1.5 has no uid offset option). In that
// namespace the trusted.* xattrs of the layer (overlayfs's opaque
// directories of a multi-layer template) are not visible: a known limit
// of this first milestone (docs/microvm.md).

var layerMu sync.Mutex // one image build at a time per daemon

// layerImage returns the erofs image of layer dir, building it if needed.
func (d *Driver) layerImage(ctx context.Context, dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", fmt.Errorf("template layer %s: %w", dir, err)
	}
	// A layer is immutable; its path, inode and change time name it.
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d.%d\x00%d", dir, st.Ino, st.Ctim.Sec, st.Ctim.Nsec, d.opts.UIDBase))
	img := filepath.Join(d.layers, hex.EncodeToString(sum[:16])+".erofs")
	if _, err := os.Stat(img); err == nil {
		return img, nil
	}
	layerMu.Lock()
	defer layerMu.Unlock()
	if _, err := os.Stat(img); err == nil {
		return img, nil
	}
	if err := os.MkdirAll(filepath.Dir(img), 0o755); err != nil {
		return "", err
	}
	// mkfs.erofs runs as the namespace's root, that is host uid_base,
	// which may not search the directories above the layer or the cache:
	// it gets both as descriptors opened here and reaches them through
	// /proc/self/fd, which checks only the file itself.
	// A file of its own, renamed into place: another daemon sharing the
	// cache may build the same image at once.
	out, err := os.CreateTemp(filepath.Dir(img), ".layer-*")
	if err != nil {
		return "", err
	}
	tmp := out.Name()
	defer out.Close()
	defer os.Remove(tmp)
	if err := out.Chmod(0o644); err != nil {
		return "", err
	}
	if err := out.Chown(d.opts.UIDBase, d.opts.UIDBase); err != nil {
		return "", err
	}
	src, err := os.Open(dir)
	if err != nil {
		return "", err
	}
	defer src.Close()
	cmd := exec.CommandContext(ctx, d.mkfsErofs, "--quiet", "-T0", "/proc/self/fd/3", "/proc/self/fd/4")
	cmd.ExtraFiles = []*os.File{out, src}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		Credential:  &syscall.Credential{Uid: 0, Gid: 0}, // the namespace's root
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: d.opts.UIDBase, Size: d.opts.UIDCount}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: d.opts.UIDBase, Size: d.opts.UIDCount}},
	}
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("mkfs.erofs of layer %s: %v: %s", dir, err, lastLines(msg, 4))
	}
	if err := os.Chown(tmp, 0, 0); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, img); err != nil {
		return "", err
	}
	return img, nil
}

// writableSize is the size of a sandbox's writable disk: its disk limit
// less a margin, so that the guest's ext4 fills (ENOSPC inside) before
// storage's limit on the writable layer the sparse file sits in would
// fail its writes (I/O errors inside); 8 GiB when no limit is given.
func writableSize(diskMB int64) int64 {
	if diskMB <= 0 {
		return 8 << 30
	}
	margin := max(8, diskMB/32)
	return max(diskMB-margin, 32) << 20
}

// writableImage makes the sandbox's writable disk, an empty ext4 file
// system in a sparse file (QEMU gets it as descriptors, never by path).
func (d *Driver) writableImage(ctx context.Context, path string, diskMB int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("writable disk: %w", err)
	}
	noCOW(f)
	err = f.Truncate(writableSize(diskMB))
	f.Close()
	if err != nil {
		return fmt.Errorf("writable disk: %w", err)
	}
	cmd := exec.CommandContext(ctx, d.mkfsExt4, "-q", "-F", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(path)
		return fmt.Errorf("mkfs.ext4: %v: %s", err, lastLines(out, 4))
	}
	return nil
}

// lastLines is the last n lines of b, joined with " | ".
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// noCOW turns copy-on-write off for the empty file f where the file
// system has it (btrfs; elsewhere the call fails and changes nothing).
// The guest rewrites its disk's blocks in place (ext4's journal, a file
// deleted and written again): copied on write, each rewrite would take
// new space on the host while the old extent stays referenced, and the
// image would outgrow storage's disk limit before the guest's ext4 is
// full, turning ENOSPC inside into I/O errors and a read-only file
// system. Written in place, the image never holds more than its size.
func noCOW(f *os.File) {
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return
	}
	_ = unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags|fsNoCOW))
}

// fsNoCOW is FS_NOCOW_FL of linux/fs.h (not in x/sys/unix).
const fsNoCOW = 0x00800000
