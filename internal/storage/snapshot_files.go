package storage

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"github.com/agentbox/agentbox/errdefs"
)

// Snapshot files: flat files that travel beside a snapshot's layers (a
// memory snapshot's checkpoint: runsc's checkpoint.img, QEMU's state and
// ram image, their descriptions). Their list (name, size and, in an OCI
// artifact, sha256) is in the snapshot's config, checked by
// CheckSnapshotFiles before a byte lands; each is then written by
// ReceiveSnapshotFile into a directory the caller made empty for them,
// through an os.Root (no path outside it, no link followed, no name
// twice), at most its listed size, and checked against its sha256. The
// caller bounds the sum of the sizes by what the tenant's quota leaves.
//
// In a snapshot stream they follow the last layer:
//
//	'F'  a file starts: its name (the next one of the config's list)
//	'D'  its data, as a layer's
//	'E'  its end: the 32-byte sha256 of its data
//
// then 'Z' as without files.

// SnapshotFile is one file of a snapshot's list.
type SnapshotFile struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	// Digest is the sha256 of its content ("sha256:HEX"): set in an OCI
	// artifact's config; a stream's end frame carries it instead.
	Digest string `json:"digest,omitempty"`
}

// MaxSnapshotFiles is the most files a snapshot carries.
const MaxSnapshotFiles = 32

const frameFile = 'F'

// snapshotFileRE is a file name: one path element, no dot first.
var snapshotFileRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckSnapshotFiles checks a snapshot's file list: valid unique names
// (not reserved, the names the receiver keeps for itself), sizes >= 0,
// at most MaxSnapshotFiles files whose sizes sum to at most limit (<= 0:
// MaxSnapshotStream).
func CheckSnapshotFiles(files []SnapshotFile, reserved []string, limit int64) error {
	if len(files) > MaxSnapshotFiles {
		return errdefs.Invalid("the snapshot lists %d files; at most %d", len(files), MaxSnapshotFiles)
	}
	if limit <= 0 {
		limit = MaxSnapshotStream
	}
	seen := map[string]bool{}
	var total int64
	for _, f := range files {
		if !snapshotFileRE.MatchString(f.Name) {
			return errdefs.Invalid("the snapshot lists a file %q: a name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", f.Name)
		}
		for _, r := range reserved {
			if f.Name == r {
				return errdefs.Invalid("the snapshot lists a file %q, a name the receiver keeps for itself", f.Name)
			}
		}
		if seen[f.Name] {
			return errdefs.Invalid("the snapshot lists file %q twice", f.Name)
		}
		seen[f.Name] = true
		if f.Size < 0 || f.Size > limit-total {
			return errdefs.New(errdefs.ErrResourceExhausted, "the snapshot's files are more than the %d bytes this node takes for them (the tenant's disk quota, or the import limit)", limit)
		}
		total += f.Size
		if f.Digest != "" {
			if _, err := digestHex(f.Digest); err != nil {
				return errdefs.Invalid("the snapshot lists file %q with digest %q: %v", f.Name, f.Digest, err)
			}
		}
	}
	return nil
}

func digestHex(d string) ([]byte, error) {
	h, ok := cutPrefix(d, "sha256:")
	if !ok || len(h) != 2*sha256.Size {
		return nil, errors.New("not sha256:<64 hex digits>")
	}
	return hex.DecodeString(h)
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

// SnapshotFilesOf lists the regular files of dir (a checkpoint) but those
// named in skip, with their sizes and, withDigests, their sha256 (read
// whole): what a snapshot's config lists. Anything else in dir (a
// directory, a link) is an error.
func SnapshotFilesOf(dir string, withDigests bool, skip ...string) ([]SnapshotFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []SnapshotFile
next:
	for _, e := range ents {
		for _, s := range skip {
			if e.Name() == s {
				continue next
			}
		}
		if !e.Type().IsRegular() || !snapshotFileRE.MatchString(e.Name()) {
			return nil, fmt.Errorf("%s: %s is not a file a snapshot carries", dir, e.Name())
		}
		if !withDigests {
			fi, err := e.Info()
			if err != nil {
				return nil, err
			}
			out = append(out, SnapshotFile{Name: e.Name(), Size: fi.Size()})
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, SnapshotFile{Name: e.Name(), Size: n, Digest: "sha256:" + hex.EncodeToString(h.Sum(nil))})
	}
	if len(out) > MaxSnapshotFiles {
		return nil, fmt.Errorf("%s holds %d files; a snapshot carries at most %d", dir, len(out), MaxSnapshotFiles)
	}
	return out, nil
}

// writeFiles writes the files (from dir) as 'F' 'D'* 'E' frames.
func (s *streamWriter) writeFiles(dir string, files []SnapshotFile) error {
	for _, f := range files {
		if err := s.frame(frameFile, []byte(f.Name)); err != nil {
			return err
		}
		s.h.Reset()
		src, err := os.Open(filepath.Join(dir, f.Name))
		if err != nil {
			return err
		}
		n, err := io.Copy(s, io.LimitReader(src, f.Size+1))
		src.Close()
		if err != nil {
			return err
		}
		if n != f.Size {
			return fmt.Errorf("snapshot file %s is %d bytes, not %d as listed: it changed", f.Name, n, f.Size)
		}
		if err := s.frame(frameEnd, s.h.Sum(nil)); err != nil {
			return err
		}
	}
	return nil
}

// WriteSnapshotStream writes a snapshot stream: config, the layers'
// tars that layer writes (one call per layer, bottom first: n calls),
// then the files (from dir) and the end. It returns the layers' diff
// ids.
func writeSnapshotStream(w io.Writer, config []byte, n int, layer func(i int, w io.Writer) error, fileDir string, files []SnapshotFile) ([]string, error) {
	if len(config) > MaxStreamConfig {
		return nil, errdefs.Invalid("the snapshot config is %d bytes, more than a stream carries (%d)", len(config), MaxStreamConfig)
	}
	sw := &streamWriter{w: w, h: newSHA()}
	if _, err := io.WriteString(w, streamMagic); err != nil {
		return nil, err
	}
	if err := sw.frame(frameConfig, config); err != nil {
		return nil, err
	}
	var diffIDs []string
	for i := range n {
		sw.h.Reset()
		if err := layer(i, sw); err != nil {
			return nil, err
		}
		sum := sw.h.Sum(nil)
		if err := sw.frame(frameEnd, sum); err != nil {
			return nil, err
		}
		diffIDs = append(diffIDs, "sha256:"+hex.EncodeToString(sum))
	}
	if err := sw.writeFiles(fileDir, files); err != nil {
		return nil, err
	}
	return diffIDs, sw.frame(frameLast, nil)
}

// NextFile starts the next file of the stream's files section (after
// its last layer): its data is then read with Read, which answers io.EOF
// at the file's end once its sha256 matched. It reports false at the
// stream's end ('Z'). NextLayer reports false (no more layers) once the
// next frame is a file's.
func (s *SnapshotStreamReader) NextFile() (string, bool, error) {
	if s.inLyr {
		if _, err := io.Copy(io.Discard, s); err != nil {
			return "", false, err
		}
	}
	if s.done {
		return "", false, nil
	}
	b, err := s.r.Peek(1)
	if err != nil {
		return "", false, cutShort(err)
	}
	if b[0] != frameFile {
		more, err := s.NextLayer()
		if err != nil {
			return "", false, err
		}
		if more {
			return "", false, errdefs.Invalid("snapshot stream: a layer after its files")
		}
		return "", false, nil
	}
	_, n, err := s.header()
	if err != nil {
		return "", false, err
	}
	if n < 1 || n > 64 {
		return "", false, errdefs.Invalid("snapshot stream: a file frame of %d bytes (a name of 1 to 64)", n)
	}
	name := make([]byte, n)
	if _, err := io.ReadFull(s.r, name); err != nil {
		return "", false, cutShort(err)
	}
	if !snapshotFileRE.Match(name) {
		return "", false, errdefs.Invalid("snapshot stream: a file named %q", name)
	}
	s.inLyr, s.inFiles = true, true
	s.h.Reset()
	return string(name), true, nil
}

// ReceiveSnapshotStreamFiles reads the stream's files section into dir
// (made empty by the caller): the files of list, in its order, each
// checked by ReceiveSnapshotFile, then the stream's end.
func ReceiveSnapshotStreamFiles(s *SnapshotStreamReader, dir string, list []SnapshotFile) error {
	for i, f := range list {
		name, ok, err := s.NextFile()
		if err != nil {
			return err
		}
		if !ok {
			return errdefs.Invalid("the snapshot stream ends after %d files; its config lists %d", i, len(list))
		}
		if name != f.Name {
			return errdefs.Invalid("the snapshot stream's file %d is %q; its config lists %q", i+1, name, f.Name)
		}
		if err := ReceiveSnapshotFile(dir, f, s); err != nil {
			return err
		}
	}
	if _, ok, err := s.NextFile(); err != nil || ok {
		if err == nil {
			err = errdefs.Invalid("the snapshot stream holds more files than the %d its config lists", len(list))
		}
		return err
	}
	return nil
}

// ReceiveSnapshotFile writes file f, read from r, into dir: a new file
// (never one that exists, never through a link), exactly f.Size bytes
// (holes kept: blocks of zeros are skipped), matching f.Digest when set.
// On error the file is removed.
func ReceiveSnapshotFile(dir string, f SnapshotFile, r io.Reader) (err error) {
	if err := CheckSnapshotFiles([]SnapshotFile{f}, nil, 0); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	out, err := root.OpenFile(f.Name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return errdefs.Invalid("snapshot file %q twice", f.Name)
		}
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = root.Remove(f.Name)
		}
	}()
	h := sha256.New()
	buf := make([]byte, 256<<10)
	var off int64
	lr := io.LimitReader(r, f.Size+1)
	for {
		n, rerr := io.ReadFull(lr, buf)
		if n > 0 {
			if off+int64(n) > f.Size {
				return errdefs.Invalid("snapshot file %q holds more than the %d bytes its config lists", f.Name, f.Size)
			}
			h.Write(buf[:n])
			if !isZeroes(buf[:n]) {
				if _, err := out.WriteAt(buf[:n], off); err != nil {
					return err
				}
			}
			off += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if off != f.Size {
		return errdefs.Invalid("snapshot file %q holds %d bytes; its config lists %d (cut short)", f.Name, off, f.Size)
	}
	if err := out.Truncate(f.Size); err != nil {
		return err
	}
	if f.Digest != "" {
		want, _ := digestHex(f.Digest)
		if !bytes.Equal(want, h.Sum(nil)) {
			return errdefs.Invalid("snapshot file %q does not match its sha256 %s (corrupt)", f.Name, f.Digest)
		}
	}
	return out.Sync()
}

func isZeroes(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
