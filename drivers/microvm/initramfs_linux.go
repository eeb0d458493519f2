package microvm

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// guestModules are the modules the guest agent loads at boot (with their
// dependencies, found in each module's .modinfo): Debian's kernel has
// every virtio driver as a module. crc32c_generic is what ext4 and jbd2
// ask the crypto API for (not a declared dependency).
var guestModules = []string{"virtio_mmio", "virtio_blk", "virtio_console", "virtio_net", "crc32c_generic", "erofs", "ext4", "overlay"}

// moduleOrder resolves names (and their dependencies) against the
// modules under dir and returns their paths, dependencies first.
func moduleOrder(dir string, names []string) ([]string, error) {
	paths := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() && strings.HasSuffix(p, ".ko") {
			paths[modName(strings.TrimSuffix(de.Name(), ".ko"))] = p
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string) error
	visit = func(n string) error {
		n = modName(n)
		switch state[n] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", n)
		case 2:
			return nil
		}
		p, ok := paths[n]
		if !ok {
			return fmt.Errorf("kernel module %s not found under %s", n, dir)
		}
		state[n] = 1
		deps, err := moduleDepends(p)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[n] = 2
		out = append(out, p)
		return nil
	}
	for _, n := range names {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func modName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// moduleDepends reads the depends= entry of a module's .modinfo section.
func moduleDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, nil
	}
	b, err := sec.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}

// cpio writes a newc ("070701") archive, the initramfs format.
type cpio struct {
	w   io.Writer
	ino int
	n   int64
	err error
}

func (c *cpio) write(b []byte) {
	if c.err != nil {
		return
	}
	var n int
	n, c.err = c.w.Write(b)
	c.n += int64(n)
}

func (c *cpio) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// entry writes one member: mode holds the file type bits; rdev is a
// device's major and minor.
func (c *cpio) entry(name string, mode uint32, data []byte, rmajor, rminor int) {
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

func (c *cpio) close() error {
	c.entry("TRAILER!!!", 0, nil, 0, 0)
	return c.err
}

// buildInitramfs writes the guest's initramfs to path: the agent as
// /init, the modules (numbered, dependencies first) under /modules, and
// /dev/console, which the kernel opens for init's stdio.
// A file of its own, renamed into place: daemons sharing the cache may
// build the same one at once.
func buildInitramfs(path, guestBin string, modules []string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".initramfs-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	c := &cpio{w: f}
	c.entry("dev", 0o040755, nil, 0, 0)
	c.entry("dev/console", 0o020600, nil, 5, 1)
	c.entry("modules", 0o040755, nil, 0, 0)
	for i, m := range modules {
		b, err := os.ReadFile(m)
		if err != nil {
			f.Close()
			return err
		}
		c.entry(fmt.Sprintf("modules/%02d-%s", i, filepath.Base(m)), 0o100644, b, 0, 0)
	}
	agent, err := os.ReadFile(guestBin)
	if err != nil {
		f.Close()
		return err
	}
	c.entry("init", 0o100755, agent, 0, 0)
	if err := c.close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// fileDigest is the hex sha256 of a file.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
