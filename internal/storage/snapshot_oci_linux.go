package storage

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// Snapshots as OCI artifacts: a config of SnapshotConfigType (the
// sandbox service's metadata: the template name and digest, isolation,
// env, ...) and one layer per overlay upper directory of the snapshot's
// own (its upper, and those of the snapshots it stacks on), bottom
// first, each a zstd tar in overlay's own format (layertar_linux.go):
// whiteouts stay 0/0 character devices and opaque directories keep
// user.overlay.opaque, since both ends are agentbox.
const (
	SnapshotConfigType types.MediaType = "application/vnd.agentbox.snapshot.config.v1+json"
	SnapshotLayerType  types.MediaType = "application/vnd.agentbox.snapshot.upper.v1.tar+zstd"
	// SnapshotFileType is a snapshot file's layer (snapshot_files.go):
	// the file's bytes, zstd; its diff id is their sha256. They follow
	// the upper directories' layers, in the config's file list's order.
	SnapshotFileType types.MediaType = "application/vnd.agentbox.snapshot.file.v1+zstd"
)

// SnapshotImage packs the overlay upper directories dirs (bottom first)
// as a snapshot artifact with config, and after them files (from
// fileDir), one layer each; the packed layers are files under tmpDir,
// which the caller removes once the artifact is pushed. It returns the
// upper directories' diff ids.
func (p *Pool) SnapshotImage(ctx context.Context, dirs []string, config []byte, tmpDir, fileDir string, files []SnapshotFile) (v1.Image, []v1.Hash, error) {
	var layers []*fileLayer
	var diffIDs []v1.Hash
	for _, d := range dirs {
		l, err := p.packLayer(ctx, d, tmpDir, tarOverlay, compressZstd, SnapshotLayerType)
		if err != nil {
			return nil, nil, err
		}
		layers = append(layers, l)
		diffIDs = append(diffIDs, l.diffID)
	}
	for _, f := range files {
		l, err := packFile(filepath.Join(fileDir, f.Name), tmpDir)
		if err != nil {
			return nil, nil, err
		}
		if l.diffID.String() != f.Digest {
			return nil, nil, fmt.Errorf("snapshot file %s changed while it was packed", f.Name)
		}
		layers = append(layers, l)
	}
	img, err := newOCIImage(config, SnapshotConfigType, layers, nil)
	return img, diffIDs, err
}

// packFile writes the file at path, zstd, into a new file under tmpDir
// and returns it as a layer of SnapshotFileType.
func packFile(path, tmpDir string) (*fileLayer, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	f, err := os.CreateTemp(tmpDir, "file-")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	digest, diffID := sha256.New(), sha256.New()
	cw := &countWriter{}
	zw, err := zstd.NewWriter(io.MultiWriter(f, digest, cw), zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(io.MultiWriter(zw, diffID), src); err != nil {
		zw.Close()
		return nil, fmt.Errorf("packing %s: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return &fileLayer{path: f.Name(), digest: sha256Hash(digest), diffID: sha256Hash(diffID), size: cw.n, mediaType: SnapshotFileType, comp: compressZstd}, nil
}

// ReceiveSnapshotFileLayer writes file f of a pulled snapshot artifact,
// layer l, into dir as ReceiveSnapshotFile does (f.Digest is required:
// the file's sha256 from the config).
func ReceiveSnapshotFileLayer(dir string, f SnapshotFile, l v1.Layer) error {
	what := "snapshot file " + f.Name
	if d, err := l.Digest(); err == nil {
		what += " (" + d.String() + ")"
	}
	if f.Digest == "" {
		return errdefs.Invalid("%s: the snapshot config gives it no digest", what)
	}
	mt, err := l.MediaType()
	if err != nil {
		return errdefs.Invalid("%s: %v", what, err)
	}
	if mt != SnapshotFileType {
		return errdefs.Invalid("%s has media type %s, not %s: not an agentbox snapshot file", what, mt, SnapshotFileType)
	}
	rc, err := l.Compressed()
	if err != nil {
		return errdefs.Unavailable("%s: fetching it: %v", what, err)
	}
	defer rc.Close()
	zr, err := decompress(rc, compressZstd)
	if err != nil {
		return errdefs.Invalid("%s: %v", what, err)
	}
	defer zr.Close()
	if err := ReceiveSnapshotFile(dir, f, zr); err != nil {
		var e *errdefs.Error
		if errors.As(err, &e) {
			return err
		}
		return errdefs.Invalid("%s: %v", what, err)
	}
	return nil
}

// SnapshotLayerDirs are the directories of snapshot snapID that hold n
// layers, top first: upper, then lower.1 (just under upper) ... lower.N-1.
func (p *Pool) SnapshotLayerDirs(snapID string, n int) []string {
	out := []string{p.SnapshotUpper(snapID)}
	for i := 1; i < n; i++ {
		out = append(out, filepath.Join(p.snapshotDir(snapID), "lower."+strconv.Itoa(i)))
	}
	return out
}

// ImportSnapshot makes the read-only snapshot snapID from the layers of a
// pulled snapshot artifact (bottom first), each checked against its diff
// id (sha256 of the tar) and applied by a layerApplier in overlay mode,
// with every safety and limit of an image import (and the quota the
// context carries). It returns the bytes written. Nothing is left if it
// fails.
func (p *Pool) ImportSnapshot(ctx context.Context, snapID string, layers []v1.Layer, diffIDs []v1.Hash) (int64, error) {
	if len(layers) == 0 || len(layers) != len(diffIDs) {
		return 0, errdefs.Invalid("the snapshot artifact has %d layers and %d diff ids", len(layers), len(diffIDs))
	}
	return p.importSnapshot(ctx, snapID, len(layers), func(i int, a *layerApplier) error {
		what := fmt.Sprintf("snapshot layer %d of %d", i+1, len(layers))
		if d, err := layers[i].Digest(); err == nil {
			what += " (" + d.String() + ")"
		}
		return applyOverlayLayer(a, layers[i], diffIDs[i], what)
	})
}

// ImportSnapshotStream makes the read-only snapshot snapID from the n
// layers of a snapshot stream (snapshot_stream.go) whose config s has
// read, as ImportSnapshot does (every safety and limit of an image
// import, the quota the context carries), and checks that the stream
// ends right after them. It returns the bytes written. Nothing is left
// if it fails.
func (p *Pool) ImportSnapshotStream(ctx context.Context, snapID string, s *SnapshotStreamReader, n int) (int64, error) {
	if n < 1 {
		return 0, errdefs.Invalid("the snapshot stream's config names %d layers", n)
	}
	return p.importSnapshot(ctx, snapID, n, func(i int, a *layerApplier) error {
		what := fmt.Sprintf("snapshot layer %d of %d", i+1, n)
		more, err := s.NextLayer()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !more {
			return errdefs.Invalid("the snapshot stream ends after %d layers; its config names %d", i, n)
		}
		if err := a.apply(s, what); err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, s); err != nil { // the tar's padding, and its sha256
			return fmt.Errorf("%s: %w", what, err)
		}
		if i == n-1 { // the stream must end here
			if more, err := s.NextLayer(); err != nil || more {
				if err == nil {
					err = errdefs.Invalid("the snapshot stream holds more layers than the %d its config names", n)
				}
				return err
			}
		}
		return nil
	})
}

// importSnapshot makes the read-only snapshot snapID of n layers, each
// applied (bottom first) by apply with a layerApplier in overlay mode,
// one size and entry budget for all.
func (p *Pool) importSnapshot(ctx context.Context, snapID string, n int, apply func(i int, a *layerApplier) error) (int64, error) {
	if err := validLayerID(snapID); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(p.snapshotsDir(), 0o711); err != nil {
		return 0, err
	}
	staging := filepath.Join(p.snapshotsDir(), stagingPrefix+randHex())
	if err := subvolCreate(staging); err != nil {
		return 0, fmt.Errorf("making snapshot %s: %w", snapID, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = subvolDestroy(staging)
		}
	}()
	if err := os.Chmod(staging, 0o711); err != nil {
		return 0, err
	}
	dirs := p.SnapshotLayerDirs(snapID, n) // top first
	var a *layerApplier
	var total int64
	for i := range n {
		dir := filepath.Join(staging, filepath.Base(dirs[len(dirs)-1-i]))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return 0, err
		}
		if err := os.Chown(dir, p.uidBase, p.uidBase); err != nil {
			return 0, err
		}
		na, err := newLayerApplier(ctx, dir, p.uidBase, p.uidCount)
		if err != nil {
			return 0, err
		}
		na.overlay = true
		if a != nil { // one budget for every layer
			na.size, na.entries = a.size, a.entries
		}
		a = na
		err = apply(i, a)
		a.Close()
		if err != nil {
			return 0, err
		}
		total = a.size
	}
	if fd, err := openDir(staging); err == nil {
		_ = unix.Syncfs(fd)
		unix.Close(fd)
	}
	if err := subvolSetReadOnly(staging, true); err != nil {
		return 0, fmt.Errorf("making snapshot %s: %w", snapID, err)
	}
	if err := os.Rename(staging, p.snapshotDir(snapID)); err != nil {
		if errors.Is(err, os.ErrExist) || errors.Is(err, unix.ENOTEMPTY) {
			return 0, errdefs.New(errdefs.ErrAlreadyExists, "snapshot %s already exists on disk", snapID)
		}
		return 0, fmt.Errorf("making snapshot %s: %w", snapID, err)
	}
	ok = true
	return total, nil
}

// ExportSnapshot writes the overlay upper directories dirs (bottom
// first) as a snapshot stream with config (snapshot_stream.go) to w,
// read straight from the (read-only) directories: nothing is packed
// ahead; then files, read from fileDir (snapshot_files.go). It returns
// the layers' diff ids.
func (p *Pool) ExportSnapshot(ctx context.Context, dirs []string, config []byte, fileDir string, files []SnapshotFile, w io.Writer) ([]string, error) {
	return writeSnapshotStream(w, config, len(dirs), func(i int, sw io.Writer) error {
		// Tar headers are small writes: gathered into frames of up to
		// 1 MiB; a file's data goes through in the tar writer's own
		// chunks.
		bw := bufio.NewWriterSize(sw, 1<<20)
		if _, err := writeLayerTar(ctx, bw, dirs[i], p.uidBase, p.uidCount, tarOverlay); err != nil {
			return fmt.Errorf("reading snapshot layer %s: %w", filepath.Base(dirs[i]), err)
		}
		return bw.Flush()
	}, fileDir, files)
}

// applyOverlayLayer applies one snapshot layer (zstd, or gzip) and checks
// its tar against diffID.
func applyOverlayLayer(a *layerApplier, l v1.Layer, diffID v1.Hash, what string) error {
	mt, err := l.MediaType()
	if err != nil {
		return errdefs.Invalid("%s: %v", what, err)
	}
	comp := compressZstd
	switch mt {
	case SnapshotLayerType:
	case "application/vnd.agentbox.snapshot.upper.v1.tar+gzip":
		comp = compressGzip
	default:
		return errdefs.Invalid("%s has media type %s, not %s: not an agentbox snapshot", what, mt, SnapshotLayerType)
	}
	rc, err := l.Compressed()
	if err != nil {
		return errdefs.Unavailable("%s: fetching it: %v", what, err)
	}
	defer rc.Close()
	zr, err := decompress(rc, comp)
	if err != nil {
		return errdefs.Invalid("%s: %v", what, err)
	}
	defer zr.Close()
	sum, err := applySum(a, zr, what, "blob")
	if err != nil {
		return err
	}
	if diffID.Algorithm != "sha256" || sum != diffID.Hex {
		return errdefs.Invalid("%s: its content does not match diff id %s from the snapshot config (the blob is corrupt)", what, diffID)
	}
	return nil
}

// Rewrap returns img (made by SnapshotImage) with config as its config.
func Rewrap(img v1.Image, config []byte) (v1.Image, error) {
	oi, ok := img.(*ociImage)
	if !ok {
		return nil, fmt.Errorf("not an image this pool packed")
	}
	return newOCIImage(config, oi.configType, oi.layers, nil)
}
