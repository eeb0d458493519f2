package storage

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// TestSnapshotStreamRoundTrip exports two overlay upper directories (one
// with a whiteout, an opaque directory, a hard link, a symlink, a setuid
// file and xattrs) as a snapshot stream and imports it into a new
// snapshot of another pool: every layer comes back as it was, with the
// config and the layers' sha256. A stream with a flipped byte, cut
// short, with data after its end, or with fewer layers than its config
// says fails with nothing left.
func TestSnapshotStreamRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: owners and whiteouts")
	}
	p, _ := newTestPool(t)
	base, err := p.TempDir() // on btrfs, as a snapshot's layers (a directory's nlink is 1 there)
	if err != nil {
		t.Fatal(err)
	}
	bottom, top := filepath.Join(base, "bottom"), filepath.Join(base, "top")
	for _, d := range []string{bottom, top} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	makeUpper(t, top)
	if err := os.WriteFile(filepath.Join(bottom, "big"), bytes.Repeat([]byte("0123456789abcdef"), 700_000), 0o644); err != nil { // > 2 chunks
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(bottom, "big"), testUIDBase, testUIDBase); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(bottom, testUIDBase, testUIDBase); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	config := []byte(`{"id":"x","layers":2}`)
	diffIDs, err := p.ExportSnapshot(testCtx(), []string{bottom, top}, config, "", nil, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffIDs) != 2 || !strings.HasPrefix(diffIDs[0], "sha256:") {
		t.Fatalf("diff ids %v", diffIDs)
	}
	// The same diff id as the OCI push's layer tar.
	var tarBuf bytes.Buffer
	if _, err := writeLayerTar(testCtx(), &tarBuf, top, testUIDBase, 65536, tarOverlay); err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(tarBuf.Bytes()); diffIDs[1] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("the stream's diff id %s is not the layer tar's", diffIDs[1])
	}
	s, err := NewSnapshotStreamReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Config) != string(config) {
		t.Fatalf("config %q, want %q", s.Config, config)
	}
	if _, err := p.ImportSnapshotStream(testCtx(), "snapstream1", s, 2); err != nil {
		t.Fatal(err)
	}
	if got := s.LayerDigest(); got != diffIDs[1] {
		t.Errorf("the top layer's sha256 %s, want %s", got, diffIDs[1])
	}
	dirs := p.SnapshotLayerDirs("snapstream1", 2) // top first
	if err := os.Remove(filepath.Join(top, "fifo")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Removexattr(filepath.Join(top, "opaque"), "user.overlay.origin"); err != nil {
		t.Fatal(err)
	}
	for i, src := range []string{top, bottom} {
		want, got := describe(t, src), describe(t, dirs[i])
		if want != got {
			t.Errorf("layer %s: round trip differs:\nwant\n%s\ngot\n%s", filepath.Base(src), want, got)
		}
	}
	if got := describe(t, dirs[0]); !strings.Contains(got, "etc/gone type2,") || !strings.Contains(got, "user.overlay.opaque=y") || !strings.Contains(got, "suid type8,2541,") {
		t.Errorf("missing whiteout, opaque dir or setuid file:\n%s", got)
	}

	good := buf.Bytes()
	flipped := bytes.Clone(good)
	flipped[len(good)/2] ^= 1
	for name, c := range map[string]struct {
		data   []byte
		layers int
	}{
		"flipped byte": {flipped, 2},
		"cut short":    {good[:len(good)-100], 2},
		"no end frame": {good[:len(good)-5], 2},
		"data after":   {append(bytes.Clone(good), 0), 2},
		"more layers":  {good, 3},
		"fewer layers": {good, 1},
	} {
		s, err := NewSnapshotStreamReader(bytes.NewReader(c.data))
		if err == nil {
			_, err = p.ImportSnapshotStream(testCtx(), "snapstream2", s, c.layers)
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
		if _, serr := os.Stat(filepath.Join(p.snapshotsDir(), "snapstream2")); !os.IsNotExist(serr) {
			t.Errorf("%s: the snapshot is on disk: %v", name, serr)
		}
	}
	if _, err := NewSnapshotStreamReader(strings.NewReader("not a stream")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("not a stream: %v", err)
	}
}
