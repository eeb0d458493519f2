package storage

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// ImportImage makes a new version of template req.Name from the OCI image
// in req.Image, a file or directory on this host: a `docker save` archive
// (optionally gzipped), an OCI image layout directory, or a tar of one.
// Layers (plain, gzip or zstd) are applied in order by a layerApplier into
// a staging subvolume, each checked against its diff id in the image
// config; nothing is left if anything fails. The image config's Env,
// WorkingDir, User and Entrypoint+Cmd become the template's defaults;
// req.User, req.Workdir and req.Env override them.
func (p *Pool) ImportImage(ctx context.Context, req api.ImportTemplateRequest) (*Template, error) {
	return p.importImage(ctx, req, req.Image)
}

// importImage is ImportImage; shown names the image in the template's
// source (an upload's temporary file is not worth recording).
func (p *Pool) importImage(ctx context.Context, req api.ImportTemplateRequest, shown string) (*Template, error) {
	if _, err := principal(ctx); err != nil {
		return nil, err
	}
	if err := ValidTemplateName(req.Name); err != nil {
		return nil, err
	}
	if req.Image == "" || !filepath.IsAbs(req.Image) {
		return nil, errdefs.Invalid("image must be an absolute path on the daemon's host, got %q", req.Image)
	}
	if req.Workdir != "" && !filepath.IsAbs(req.Workdir) {
		return nil, errdefs.Invalid("workdir must be an absolute path inside the template, got %q", req.Workdir)
	}
	start := time.Now()
	tmp, err := os.MkdirTemp(p.root, stagingPrefix+"image-")
	if err != nil {
		return nil, fmt.Errorf("importing image %s: %w", req.Image, err)
	}
	defer os.RemoveAll(tmp)
	img, err := openImage(req.Image, tmp)
	if err != nil {
		return nil, err
	}
	return p.importOpened(ctx, req, img, req.Image, "image "+shown, "", start)
}

// importOpened imports img (opened from what, as errors name it) as a
// new version of req.Name; source prefixes the template's source, and
// digest is the manifest digest it was pulled as ("" for a file).
func (p *Pool) importOpened(ctx context.Context, req api.ImportTemplateRequest, img v1.Image, what, source, digest string, start time.Time) (*Template, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, errdefs.Invalid("image %s: reading its config: %v", what, err)
	}
	if err := checkPlatform(cfg.OS, cfg.Architecture); err != nil {
		return nil, fmt.Errorf("image %s: %w", what, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, errdefs.Invalid("image %s: listing its layers: %v", what, err)
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return nil, errdefs.Invalid("image %s: the manifest has %d layers but the config names %d", what, len(layers), len(cfg.RootFS.DiffIDs))
	}
	configDigest, _ := img.ConfigName()

	if req.MemoryMB < 0 {
		return nil, errdefs.Invalid("memory_mb must be positive (or 0 for the daemon's default), got %d", req.MemoryMB)
	}
	if err := checkUserLimits(req.UserLimits); err != nil {
		return nil, err
	}
	t := &Template{Source: source + "@" + configDigest.String(), Digest: digest, MemoryMB: req.MemoryMB, UserLimits: req.UserLimits}
	if err := applyTemplateLabel(cfg, t); err != nil {
		return nil, fmt.Errorf("image %s: %w", what, err)
	}
	t.Env = map[string]string{}
	for _, kv := range cfg.Config.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			t.Env[k] = v
		}
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, errdefs.Invalid("env name %q is not valid", k)
		}
		t.Env[k] = v
	}
	t.Workdir = cfg.Config.WorkingDir
	if req.Workdir != "" {
		t.Workdir = req.Workdir
	}
	if t.Workdir != "" && !filepath.IsAbs(t.Workdir) {
		t.Workdir = "/" + t.Workdir
	}
	// "user", "uid", "user:group" or "uid:gid": the guest takes a user
	// name or uid and the user's own groups.
	t.User, _, _ = strings.Cut(cfg.Config.User, ":")
	if req.User != "" {
		t.User = req.User
	}
	t.Cmd = append(append([]string{}, cfg.Config.Entrypoint...), cfg.Config.Cmd...)

	var skipped int
	t, err = p.buildTemplate(ctx, req.Name, t, func(rootfs string) (int64, error) {
		if err := unix.Mkdir(rootfs, 0o755); err != nil {
			return 0, err
		}
		if err := unix.Chown(rootfs, p.uidBase, p.uidBase); err != nil {
			return 0, err
		}
		if err := unix.Chmod(rootfs, 0o755); err != nil {
			return 0, err
		}
		a, err := newLayerApplier(ctx, rootfs, p.uidBase, p.uidCount)
		if err != nil {
			return 0, err
		}
		defer a.Close()
		for i, l := range layers {
			what := fmt.Sprintf("image %s: layer %d of %d", what, i+1, len(layers))
			if d, err := l.Digest(); err == nil {
				what += " (" + d.String() + ")"
			}
			if err := applyLayer(a, l, cfg.RootFS.DiffIDs[i], what); err != nil {
				return 0, err
			}
		}
		skipped = a.skipped
		return a.size, nil
	})
	if err != nil {
		return nil, err
	}
	p.log.Info("imported image", "template", t.Name, "version", t.Version, "image", what,
		"layers", len(layers), "size_bytes", t.SizeBytes, "skipped_special_files", skipped, "took", time.Since(start).Round(time.Millisecond))
	return t, nil
}

// applyLayer applies one layer and checks its uncompressed bytes against
// the config's diff id.
func applyLayer(a *layerApplier, l v1.Layer, diffID v1.Hash, what string) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return errdefs.Invalid("%s: opening it: %v (is the archive complete?)", what, err)
	}
	defer rc.Close()
	sum, err := applySum(a, rc, what, "archive")
	if err != nil {
		return err
	}
	if diffID.Algorithm == "sha256" && sum != diffID.Hex {
		return errdefs.Invalid("%s: its content does not match diff id %s from the image config (the archive is corrupt)", what, diffID)
	}
	return nil
}

// applySum applies the uncompressed layer tar read from r with a and
// returns the hex sha256 of every byte of r, for the caller to check
// against the layer's diff id: the tar end marker may be followed by
// padding, which is read and hashed too. kind ("archive", "blob") names
// the source in the error when r cannot be read to its end.
func applySum(a *layerApplier, r io.Reader, what, kind string) (string, error) {
	h := sha256.New()
	tr := io.TeeReader(r, h)
	if err := a.apply(tr, what); err != nil {
		return "", err
	}
	if _, err := io.Copy(io.Discard, tr); err != nil {
		return "", errdefs.Invalid("%s: reading it: %v (the %s is corrupt or truncated)", what, err, kind)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// checkPlatform refuses images this host cannot run.
func checkPlatform(osName, arch string) error {
	if osName != "" && osName != "linux" {
		return errdefs.Invalid("the image is for %s/%s; this host runs linux/%s", osName, arch, runtime.GOARCH)
	}
	if arch != "" && arch != runtime.GOARCH {
		return errdefs.Invalid("the image is for linux/%s; this host runs linux/%s: export the image for linux/%s (docker save of an image pulled with --platform linux/%s)", arch, runtime.GOARCH, runtime.GOARCH, runtime.GOARCH)
	}
	return nil
}

// openImage opens the image at path; tmp is an empty scratch directory
// that lives as long as the image is read.
func openImage(path, tmp string) (v1.Image, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, errdefs.Invalid("image %s: %v", path, err)
	}
	if fi.IsDir() {
		if _, err := os.Stat(filepath.Join(path, "index.json")); err != nil {
			return nil, errdefs.Invalid("image %s is a directory without index.json: not an OCI image layout", path)
		}
		return layoutImage(path, path)
	}
	opener := func() (io.ReadCloser, error) { return openMaybeGzip(path) }
	names, err := tarNames(opener)
	if err != nil {
		return nil, errdefs.Invalid("image %s: not a tar archive (docker save or OCI layout): %v", path, err)
	}
	switch {
	case names["manifest.json"]:
		img, err := tarball.Image(opener, nil)
		if err != nil {
			return nil, errdefs.Invalid("image %s: reading the docker archive: %v", path, err)
		}
		return img, nil
	case names["index.json"]:
		if err := extractLayoutTar(opener, tmp); err != nil {
			return nil, fmt.Errorf("image %s: %w", path, err)
		}
		return layoutImage(tmp, path)
	default:
		return nil, errdefs.Invalid("image %s has neither manifest.json (docker save) nor index.json (OCI layout)", path)
	}
}

// openMaybeGzip opens path, decompressing it if it is gzipped.
func openMaybeGzip(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReader(f)
	magic, _ := br.Peek(2)
	if !bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		return struct {
			io.Reader
			io.Closer
		}{br, f}, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}

// tarNames lists the top-level metadata files of an archive.
func tarNames(opener func() (io.ReadCloser, error)) (map[string]bool, error) {
	rc, err := opener()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	names := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		n := strings.TrimPrefix(hdr.Name, "./")
		if n == "manifest.json" || n == "index.json" || n == "oci-layout" {
			names[n] = true
		}
	}
	if len(names) == 0 {
		return nil, errors.New("no manifest.json or index.json in it")
	}
	return names, nil
}

var layoutFileRe = regexp.MustCompile(`^(oci-layout|index\.json|blobs/[a-z0-9]+/[a-f0-9]{32,128})$`)

// extractLayoutTar unpacks the files of an OCI layout tar into dir. Only
// oci-layout, index.json and blobs/ALG/HEX are taken (regular files), so
// no name can leave dir.
func extractLayoutTar(opener func() (io.ReadCloser, error), dir string) error {
	rc, err := opener()
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errdefs.Invalid("reading the OCI layout tar: %v (the archive is corrupt or truncated)", err)
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		if hdr.Typeflag != tar.TypeReg || !layoutFileRe.MatchString(name) {
			continue
		}
		total += hdr.Size
		if total > maxImageBytes {
			return errdefs.Invalid("the OCI layout tar is larger than the import limit of %d bytes", maxImageBytes)
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("unpacking %s of the OCI layout tar: %w", name, err)
		}
	}
}

// layoutImage picks the image for this platform from the OCI layout in
// dir (shown as shown in errors), descending into nested indexes.
func layoutImage(dir, shown string) (v1.Image, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, errdefs.Invalid("image %s: not an OCI image layout: %v", shown, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, errdefs.Invalid("image %s: reading index.json: %v", shown, err)
	}
	var seen []string
	img, err := pickImage(idx, &seen, 0)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", shown, err)
	}
	if img == nil {
		if len(seen) == 0 {
			return nil, errdefs.Invalid("image %s: the layout holds no image manifest", shown)
		}
		return nil, errdefs.Invalid("image %s: no image for linux/%s in the layout (it has %s)", shown, runtime.GOARCH, strings.Join(seen, ", "))
	}
	return img, nil
}

func pickImage(idx v1.ImageIndex, seen *[]string, depth int) (v1.Image, error) {
	if depth > 4 {
		return nil, errdefs.Invalid("image indexes nest too deeply")
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, errdefs.Invalid("reading an image index: %v", err)
	}
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, errdefs.Invalid("index %s: %v (is the blob missing?)", d.Digest, err)
			}
			img, err := pickImage(child, seen, depth+1)
			if img != nil || err != nil {
				return img, err
			}
		case d.MediaType.IsImage():
			if d.Platform != nil {
				if d.Platform.OS == "unknown" { // attestations
					continue
				}
				if checkPlatform(d.Platform.OS, d.Platform.Architecture) != nil {
					*seen = append(*seen, d.Platform.OS+"/"+d.Platform.Architecture)
					continue
				}
			}
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, errdefs.Invalid("manifest %s: %v (is the blob missing?)", d.Digest, err)
			}
			cfg, err := img.ConfigFile()
			if err != nil {
				return nil, errdefs.Invalid("manifest %s: reading its config: %v (is the blob missing?)", d.Digest, err)
			}
			if checkPlatform(cfg.OS, cfg.Architecture) != nil {
				*seen = append(*seen, cfg.OS+"/"+cfg.Architecture)
				continue
			}
			return img, nil
		}
	}
	return nil, nil
}
