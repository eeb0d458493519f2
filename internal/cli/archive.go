package cli

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// writeTar writes the contents of dir (not dir itself) as a tar stream:
// directories, regular files and symlinks, with their permission bits and
// modification times. Owners are left out (the sandbox's user owns what it
// receives); special files are skipped with a warning.
func writeTar(w io.Writer, dir string, warn io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.Mode().IsRegular(), info.IsDir():
		default:
			fmt.Fprintf(warn, "agentbox: skipping %s: not a regular file, directory or symlink\n", p)
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Mode &= 0o1777 // no set-id bits
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// Exactly the size announced, even if the file changes meanwhile.
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("archiving %s: %w", dir, err)
	}
	return tw.Close()
}

// extractTar extracts a tar stream that came from a sandbox under dest,
// which exists. The stream is untrusted: entries with absolute names or
// ".." components are refused, nothing is written through a symlink (a
// link in the archive cannot redirect a later entry outside dest), hard
// links must point inside dest, set-id bits are dropped and special files
// are skipped with a warning. Entry names are relative to dest, as the
// guest's GET /files/archive writes them for a directory.
func extractTar(r io.Reader, dest string, warn io.Writer) error {
	tr := tar.NewReader(r)
	type dirMeta struct {
		path  string
		mode  os.FileMode
		mtime time.Time
	}
	var dirs []dirMeta
	skipped := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return err
		}
		target := filepath.Join(dest, filepath.FromSlash(name))
		mode := os.FileMode(hdr.Mode & 0o777) // set-id bits dropped
		if hdr.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}

		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := ensureDir(dest, name); err != nil {
				return err
			}
			dirs = append(dirs, dirMeta{target, mode, hdr.ModTime})
		case tar.TypeReg, tar.TypeRegA:
			if name == "." {
				return fmt.Errorf("refusing archive entry %q: a file where the directory itself should be", hdr.Name)
			}
			if err := prepareLeaf(dest, name); err != nil {
				return err
			}
			if err := writeEntry(tr, target, mode); err != nil {
				return err
			}
			_ = os.Chtimes(target, hdr.ModTime, hdr.ModTime)
		case tar.TypeSymlink:
			if name == "." {
				return fmt.Errorf("refusing archive entry %q: a symlink where the directory itself should be", hdr.Name)
			}
			if err := prepareLeaf(dest, name); err != nil {
				return err
			}
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return fmt.Errorf("creating symlink %s: %w", target, err)
			}
		case tar.TypeLink:
			src, err := entryName(hdr.Linkname)
			if err != nil {
				return fmt.Errorf("refusing hard link %q: %w", hdr.Name, err)
			}
			if err := linkEntry(dest, src, name); err != nil {
				return err
			}
		case tar.TypeXGlobalHeader:
		default:
			skipped++
		}
	}
	if skipped > 0 {
		fmt.Fprintf(warn, "agentbox: skipped %d special file(s) (devices, fifos) in the archive\n", skipped)
	}
	// Directory modes last, deepest first, so a read-only directory does
	// not stop its own extraction.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := os.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("setting the mode of %s: %w", d.path, err)
		}
		_ = os.Chtimes(d.path, d.mtime, d.mtime)
	}
	return nil
}

// entryName cleans an archive entry's name, refusing absolute names and
// ".." components. The root itself comes back as ".".
func entryName(raw string) (string, error) {
	if raw == "" || strings.ContainsRune(raw, 0) {
		return "", fmt.Errorf("refusing archive entry %q: empty name or NUL byte", raw)
	}
	if strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, `\`) || filepath.IsAbs(raw) {
		return "", fmt.Errorf("refusing archive entry %q: absolute path", raw)
	}
	for _, part := range strings.FieldsFunc(raw, func(r rune) bool { return r == '/' || r == '\\' }) {
		if part == ".." {
			return "", fmt.Errorf("refusing archive entry %q: it climbs out with ..", raw)
		}
	}
	return path.Clean(strings.ReplaceAll(raw, `\`, "/")), nil
}

// ensureDir makes sure every component of rel under dest is a real
// directory (not a symlink), creating the missing ones.
func ensureDir(dest, rel string) error {
	if rel == "." {
		return nil
	}
	cur := dest
	for _, part := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(cur, 0o755); err != nil {
				return fmt.Errorf("creating %s: %w", cur, err)
			}
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("refusing archive entry %q: %s is a symlink, and nothing is written through links", rel, cur)
		case !fi.IsDir():
			return fmt.Errorf("refusing archive entry %q: %s is not a directory", rel, cur)
		}
	}
	return nil
}

// prepareLeaf makes the parents of rel real directories and removes a file
// or symlink already at rel, so the new entry replaces it rather than
// writing through it.
func prepareLeaf(dest, rel string) error {
	if err := ensureDir(dest, path.Dir(rel)); err != nil {
		return err
	}
	target := filepath.Join(dest, filepath.FromSlash(rel))
	fi, err := os.Lstat(target)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("cannot replace the directory %s with a file from the archive", target)
	}
	return os.Remove(target)
}

func writeEntry(r io.Reader, target string, mode os.FileMode) error {
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", target, err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", target, err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("setting the mode of %s: %w", target, err)
	}
	return f.Close()
}

// linkEntry makes a hard link at rel to the regular file src, both inside
// dest and neither reached through a symlink.
func linkEntry(dest, src, rel string) error {
	if err := ensureDir(dest, path.Dir(src)); err != nil {
		return err
	}
	from := filepath.Join(dest, filepath.FromSlash(src))
	fi, err := os.Lstat(from)
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("refusing hard link %q: its target %q is not a regular file extracted before it", rel, src)
	}
	if err := prepareLeaf(dest, rel); err != nil {
		return err
	}
	to := filepath.Join(dest, filepath.FromSlash(rel))
	if err := os.Link(from, to); err != nil {
		return fmt.Errorf("creating hard link %s: %w", to, err)
	}
	return nil
}
