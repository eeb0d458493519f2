package build

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

// Limits of a build context.
const (
	MaxContextEntries = 200000
	MaxContextBytes   = 16 << 30
)

// Context is a build context: a tar file (plain or gzip) on the daemon's
// host, checked once when opened. Copy steps read files from it, never
// from the host's filesystem, so a symlink in the context is only ever
// copied as a symlink (which then resolves inside the sandbox) and cannot
// lead a copy outside the context.
type Context struct {
	path    string
	entries map[string]byte // cleaned name -> tar type flag
}

// OpenContext checks the tar file at p: entry names must be relative with
// no ".." component, hard links are refused (copy the file instead), and
// devices, fifos and sockets are refused.
func OpenContext(p string) (*Context, error) {
	c := &Context{path: p, entries: map[string]byte{}}
	err := c.walk(func(name string, h *tar.Header, _ io.Reader) error {
		if len(c.entries) >= MaxContextEntries {
			return errdefs.Invalid("the build context has more than %d entries", MaxContextEntries)
		}
		c.entries[name] = h.Typeflag
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Len is the number of entries.
func (c *Context) Len() int { return len(c.entries) }

// walk calls fn for every entry with its cleaned name ("." is skipped).
func (c *Context) walk(fn func(name string, h *tar.Header, r io.Reader) error) error {
	f, err := os.Open(c.path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return errdefs.Invalid("the build context is not a valid gzip stream: %v", err)
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errdefs.Invalid("the build context is not a valid tar stream: %v", err)
		}
		name, err := contextName(h.Name)
		if err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		case tar.TypeLink:
			return errdefs.Invalid("the build context holds a hard link (%s -> %s): hard links are not supported; copy the file instead", h.Name, h.Linkname)
		case tar.TypeXGlobalHeader:
			continue
		default:
			return errdefs.Invalid("the build context holds %s, which is not a file, directory or symlink", h.Name)
		}
		if total += h.Size; total > MaxContextBytes {
			return errdefs.Invalid("the build context holds more than %d bytes", int64(MaxContextBytes))
		}
		if name == "." {
			continue
		}
		if err := fn(name, h, tr); err != nil {
			return err
		}
	}
}

func contextName(n string) (string, error) {
	if strings.IndexByte(n, 0) >= 0 {
		return "", errdefs.Invalid("the build context has an entry name with a NUL byte")
	}
	clean := path.Clean(strings.TrimPrefix(n, "./"))
	if path.IsAbs(n) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", errdefs.Invalid("the build context has an entry %q outside it (absolute or with ..): refused", n)
	}
	return clean, nil
}

// CopyPlan says how a copy step maps context entries into the sandbox:
// entries under prefix go, renamed, into the sandbox directory dir.
type CopyPlan struct {
	src     string
	dir     string // the sandbox directory the tar is extracted into
	single  string // for a file or symlink source: its name in dir
	srcType byte
}

// Dir is the sandbox directory the plan's tar is extracted into.
func (p *CopyPlan) Dir() string { return p.dir }

// Plan maps copy step cp onto the context's entries (destDir: the
// destination is a directory).
func (c *Context) Plan(cp *Copy, destDir bool) (*CopyPlan, error) {
	if c == nil {
		return nil, errdefs.Invalid("copy %s: the build has no context: pass --context DIR", cp.Src)
	}
	if cp.Src == "." {
		return &CopyPlan{src: ".", dir: cp.Dest, srcType: tar.TypeDir}, nil
	}
	t, ok := c.entries[cp.Src]
	if !ok {
		// A directory may be only implied by its entries.
		for n := range c.entries {
			if strings.HasPrefix(n, cp.Src+"/") {
				t, ok = tar.TypeDir, true
				break
			}
		}
	}
	if !ok {
		return nil, errdefs.Invalid("copy %s: no such file or directory in the build context (symlinks in the context are not followed)", cp.Src)
	}
	p := &CopyPlan{src: cp.Src, srcType: t}
	if t == tar.TypeDir {
		p.dir = cp.Dest
		return p, nil
	}
	if destDir {
		p.dir, p.single = cp.Dest, path.Base(cp.Src)
	} else {
		p.dir, p.single = path.Dir(cp.Dest), path.Base(cp.Dest)
	}
	return p, nil
}

// WriteTar writes the tar stream of p to w. With forHash, modification
// times are left out, so that touching a file without changing it does
// not invalidate the cache.
func (c *Context) WriteTar(p *CopyPlan, w io.Writer, forHash bool) error {
	tw := tar.NewWriter(w)
	err := c.walk(func(name string, h *tar.Header, r io.Reader) error {
		var out string
		switch {
		case p.single != "":
			if name != p.src {
				return nil
			}
			out = p.single
		case p.src == ".":
			out = name
		case strings.HasPrefix(name, p.src+"/"):
			out = strings.TrimPrefix(name, p.src+"/")
		default:
			return nil
		}
		nh := &tar.Header{
			Name:     out,
			Typeflag: h.Typeflag,
			Mode:     h.Mode & 0o7777,
			Size:     h.Size,
			Linkname: h.Linkname,
			ModTime:  h.ModTime,
			Format:   tar.FormatPAX,
		}
		if nh.Typeflag == tar.TypeDir {
			nh.Name += "/"
		}
		if nh.Typeflag != tar.TypeReg {
			nh.Size = 0
		}
		if forHash {
			nh.ModTime = time.Unix(0, 0)
		}
		if err := tw.WriteHeader(nh); err != nil {
			return err
		}
		if nh.Typeflag == tar.TypeReg {
			if _, err := io.CopyN(tw, r, h.Size); err != nil {
				return fmt.Errorf("reading %s from the build context: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// WriteFile writes the content of regular file name of the context to w.
func (c *Context) WriteFile(name string, w io.Writer) error {
	if c == nil {
		return errdefs.Invalid("%s: the build has no context: pass --context DIR holding it", name)
	}
	clean, err := cleanRel(name)
	if err != nil {
		return errdefs.Invalid("%s: %v", name, err)
	}
	if t, ok := c.entries[clean]; !ok || t != tar.TypeReg {
		return errdefs.Invalid("%s: no such regular file in the build context (symlinks are not followed)", name)
	}
	found := false
	err = c.walk(func(n string, h *tar.Header, r io.Reader) error {
		if n != clean || found {
			return nil
		}
		found = true
		_, err := io.CopyN(w, r, h.Size)
		return err
	})
	return err
}
