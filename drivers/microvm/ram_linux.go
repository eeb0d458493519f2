package microvm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Guest RAM in files (QEMU's VM templating, docs/microvm.md): a VM's RAM
// is a memfd the driver creates and hands to QEMU, which maps it through
// a memory-backend-file on /proc/self/fd/N (QEMU 7.2's backend opens a
// path, read-write; a memfd's mode lets QEMU's uid reopen it, a file of
// the driver's would not).
//
//   - A booted VM maps its own memfd shared (share=on). A checkpoint then
//     saves only the device state (migration capability x-ignore-shared:
//     tens of milliseconds) and the driver copies the memfd, its holes
//     kept, to the checkpoint's RAM image (the VM is stopped meanwhile).
//   - A VM restored from a snapshot or fork maps a sealed memfd holding
//     the image privately (share=off: MAP_PRIVATE, copy-on-write): pages
//     the guest has not written are the memfd's, one copy in host memory
//     for every VM restored from that image while any of them runs; the
//     seals forbid writes to it, so no QEMU can change what its siblings
//     read. Such a VM's own RAM is not a file: its checkpoints carry the
//     RAM in the migration stream, and their restores boot it into a
//     memfd of its own again.
//   - A VM resumed from a pause to disk (restored once) gets a memfd of
//     its own filled from the image, so its next checkpoint is quick.
//
// Host memory of a shared image is charged to the daemon's memory
// cgroup (it wrote the pages), not to the VMs': every VM's guest RAM is
// bounded by its -m all the same.

// ramID is the memory backend's id, which is also the RAM block's name in
// the migration stream: the name of the RAM QEMU makes for a microvm
// machine without a backend, so checkpoints from before RAM files load.
const ramID = "microvm.ram"

// newRAM returns an empty memfd of size bytes for a VM's RAM.
func newRAM(size int64) (*os.File, error) {
	// Not executable (kernels from 6.3 refuse an executable memfd where
	// vm.memfd_noexec is 2); older kernels know no such flag.
	fd, err := unix.MemfdCreate("agentbox-vm-ram", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_NOEXEC_SEAL)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate("agentbox-vm-ram", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("guest RAM: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "agentbox-vm-ram")
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("guest RAM: %w", err)
	}
	return f, nil
}

// fillRAM copies the RAM image at path into a new memfd of size bytes,
// sealed against writes and resizing when sealed is set.
func fillRAM(path string, size int64, sealed bool) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("guest RAM image: %w", err)
	}
	defer src.Close()
	if fi, err := src.Stat(); err != nil {
		return nil, err
	} else if fi.Size() != size {
		return nil, fmt.Errorf("guest RAM image %s: %d bytes, want %d", path, fi.Size(), size)
	}
	m, err := newRAM(size)
	if err != nil {
		return nil, err
	}
	if err := copySparse(m, src, size); err != nil {
		m.Close()
		return nil, fmt.Errorf("guest RAM image %s: %w", path, err)
	}
	if sealed {
		if _, err := unix.FcntlInt(m.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
			m.Close()
			return nil, fmt.Errorf("guest RAM: sealing: %w", err)
		}
	}
	return m, nil
}

// saveRAM copies a running VM's RAM (the memfd QEMU pid holds as fd) to
// a new image file at path, its holes kept.
func saveRAM(pid, fd int, path string) error {
	src, err := os.Open("/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd))
	if err != nil {
		return fmt.Errorf("guest RAM: %w", err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	err = dst.Truncate(fi.Size())
	if err == nil {
		err = copySparse(dst, src, fi.Size())
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("saving the guest RAM: %w", err)
	}
	return nil
}

// copySparse copies the data of src (size bytes) to the same offsets of
// dst, which is already size bytes long and empty: holes, and pages of
// zeros (a guest's free memory it has read or cleared), stay holes.
func copySparse(dst, src *os.File, size int64) error {
	sfd := int(src.Fd())
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		start, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // no data after off
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		end, err := unix.Seek(sfd, start, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		end = min(end, size)
		for start < end {
			b := buf[:min(int64(len(buf)), end-start)]
			if _, err := src.ReadAt(b, start); err != nil {
				return err
			}
			if err := writeNonZero(dst, b, start); err != nil {
				return err
			}
			start += int64(len(b))
		}
		off = end
	}
	return nil
}

// pageSize is the unit copySparse skips when it holds only zeros.
const pageSize = 4096

// writeNonZero writes b at off in f but for its pages of zeros.
func writeNonZero(f *os.File, b []byte, off int64) error {
	from := -1 // the first page of the run of non-zero pages being made
	for i := 0; i < len(b); i += pageSize {
		zero := isZero(b[i:min(i+pageSize, len(b))])
		switch {
		case !zero && from < 0:
			from = i
		case zero && from >= 0:
			if _, err := f.WriteAt(b[from:i], off+int64(from)); err != nil {
				return err
			}
			from = -1
		}
	}
	if from >= 0 {
		_, err := f.WriteAt(b[from:], off+int64(from))
		return err
	}
	return nil
}

func isZero(p []byte) bool {
	for len(p) >= 8 {
		if binary.NativeEndian.Uint64(p) != 0 {
			return false
		}
		p = p[8:]
	}
	for _, c := range p {
		if c != 0 {
			return false
		}
	}
	return true
}

// ramImages are the sealed memfds of RAM images that running VMs map,
// by image file: every VM restored from an image while another restored
// from it runs shares its unwritten pages.
type ramImages struct {
	mu sync.Mutex
	m  map[ramKey]*ramImage
}

// ramKey names one version of an image file (a checkpoint directory's
// name is used again by the next pause to disk of the same sandbox).
type ramKey struct {
	path      string
	dev, ino  uint64
	size      int64
	mtimeNsec int64
}

type ramImage struct {
	key  ramKey
	f    *os.File
	refs int // VMs restored from it (and restores under way)
}

// take returns the sealed memfd of the image at path (size bytes),
// filling one if no running VM maps it; the caller calls put when the VM
// restored from it has exited (or did not start).
func (r *ramImages) take(path string, size int64) (*ramImage, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("guest RAM image: %w", &os.PathError{Op: "stat", Path: path, Err: err})
	}
	key := ramKey{path: path, dev: st.Dev, ino: st.Ino, size: st.Size, mtimeNsec: st.Mtim.Nano()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if img := r.m[key]; img != nil {
		img.refs++
		return img, nil
	}
	f, err := fillRAM(path, size, true)
	if err != nil {
		return nil, err
	}
	if r.m == nil {
		r.m = map[ramKey]*ramImage{}
	}
	img := &ramImage{key: key, f: f, refs: 1}
	r.m[key] = img
	return img, nil
}

// put drops a reference to img; the driver's descriptor closes with the
// last (the memory goes when no QEMU maps it either).
func (r *ramImages) put(img *ramImage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if img.refs--; img.refs > 0 {
		return
	}
	if r.m[img.key] == img {
		delete(r.m, img.key)
	}
	img.f.Close()
}
