package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// OCI artifacts of the pool: templates as OCI images (any OCI client can
// pull them) and snapshots as artifacts with agentbox's media types
// (snapshot_oci_linux.go). A layer is packed once into a temporary file
// of the pool (compressed, both digests taken on the way), then read as
// often as the push needs; internal/registry moves the bytes.

// TemplateLabel is the image config label holding what an OCI config has
// no field for: the template's memory default, user limits, start command
// and readiness check (templateLabel).
const TemplateLabel = "dev.agentbox.template.v1"

type templateLabel struct {
	Name       string          `json:"name,omitempty"`
	Version    string          `json:"version,omitempty"`
	MemoryMB   int64           `json:"memory_mb,omitempty"`
	UserLimits *api.UserLimits `json:"user_limits,omitempty"`
	Start      string          `json:"start,omitempty"`
	Ready      *api.ReadyCheck `json:"ready,omitempty"`
}

// compression of a packed layer.
type compression int

const (
	compressGzip compression = iota
	compressZstd
)

// fileLayer is a v1.Layer packed into a file.
type fileLayer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
	mediaType      types.MediaType
	comp           compression
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return l.mediaType, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	rc, err := decompress(f, l.comp)
	if err != nil {
		f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{rc, multiCloser{rc, f}}, nil
}

type multiCloser []io.Closer

func (m multiCloser) Close() error {
	var first error
	for _, c := range m {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// decompress reads r as comp.
func decompress(r io.Reader, comp compression) (io.ReadCloser, error) {
	switch comp {
	case compressZstd:
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(64<<20))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	default:
		return kgzip.NewReader(r)
	}
}

func sha256Hash(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(b []byte) (int, error) { c.n += int64(len(b)); return len(b), nil }

// packLayer writes directory dir as a layer of format into a new file
// under tmpDir, compressed as comp, and returns it.
func (p *Pool) packLayer(ctx context.Context, dir, tmpDir string, format tarFormat, comp compression, mt types.MediaType) (*fileLayer, error) {
	f, err := os.CreateTemp(tmpDir, "layer-")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	digest, diffID := sha256.New(), sha256.New()
	cw := &countWriter{}
	out := io.MultiWriter(f, digest, cw)
	var zw io.WriteCloser
	switch comp {
	case compressZstd:
		zw, err = zstd.NewWriter(out, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	default:
		zw, err = kgzip.NewWriterLevel(out, kgzip.BestSpeed)
	}
	if err != nil {
		return nil, err
	}
	if _, err := writeLayerTar(ctx, io.MultiWriter(zw, diffID), dir, p.uidBase, p.uidCount, format); err != nil {
		zw.Close()
		return nil, fmt.Errorf("packing %s: %w", dir, err)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return &fileLayer{path: f.Name(), digest: sha256Hash(digest), diffID: sha256Hash(diffID), size: cw.n, mediaType: mt, comp: comp}, nil
}

// ociImage is an image or artifact whose manifest and config are made
// here and whose layers are packed files.
type ociImage struct {
	manifest, config []byte
	configType       types.MediaType
	layers           []*fileLayer
}

func newOCIImage(config []byte, configType types.MediaType, layers []*fileLayer, annotations map[string]string) (*ociImage, error) {
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: configType, Size: int64(len(config)), Digest: v1.Hash{Algorithm: "sha256", Hex: sha256Hex(config)}},
		Annotations:   annotations,
	}
	for _, l := range layers {
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: l.mediaType, Size: l.size, Digest: l.digest})
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &ociImage{manifest: raw, config: config, configType: configType, layers: layers}, nil
}

func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func (i *ociImage) Layers() ([]v1.Layer, error) {
	out := make([]v1.Layer, len(i.layers))
	for n, l := range i.layers {
		out[n] = l
	}
	return out, nil
}
func (i *ociImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (i *ociImage) Size() (int64, error)                { return int64(len(i.manifest)), nil }
func (i *ociImage) ConfigName() (v1.Hash, error) {
	return v1.Hash{Algorithm: "sha256", Hex: sha256Hex(i.config)}, nil
}
func (i *ociImage) ConfigFile() (*v1.ConfigFile, error) {
	var c v1.ConfigFile
	if i.configType != types.OCIConfigJSON {
		return &c, nil // an artifact's config is not an image config
	}
	return &c, json.Unmarshal(i.config, &c)
}
func (i *ociImage) RawConfigFile() ([]byte, error) { return i.config, nil }
func (i *ociImage) Digest() (v1.Hash, error) {
	return v1.Hash{Algorithm: "sha256", Hex: sha256Hex(i.manifest)}, nil
}
func (i *ociImage) Manifest() (*v1.Manifest, error) {
	var m v1.Manifest
	return &m, json.Unmarshal(i.manifest, &m)
}
func (i *ociImage) RawManifest() ([]byte, error) { return i.manifest, nil }
func (i *ociImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	for _, l := range i.layers {
		if l.digest == h {
			return l, nil
		}
	}
	if h.String() == "sha256:"+sha256Hex(i.config) {
		return &configLayer{b: i.config, mt: i.configType}, nil
	}
	return nil, fmt.Errorf("no layer %s in the image", h)
}
func (i *ociImage) LayerByDiffID(h v1.Hash) (v1.Layer, error) {
	for _, l := range i.layers {
		if l.diffID == h {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no layer with diff id %s in the image", h)
}

// configLayer serves an image's config blob as a layer (remote.Write
// uploads it so).
type configLayer struct {
	b  []byte
	mt types.MediaType
}

func (c *configLayer) Digest() (v1.Hash, error) {
	return v1.Hash{Algorithm: "sha256", Hex: sha256Hex(c.b)}, nil
}
func (c *configLayer) DiffID() (v1.Hash, error)            { return c.Digest() }
func (c *configLayer) Size() (int64, error)                { return int64(len(c.b)), nil }
func (c *configLayer) MediaType() (types.MediaType, error) { return c.mt, nil }
func (c *configLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(c.b)), nil
}
func (c *configLayer) Uncompressed() (io.ReadCloser, error) { return c.Compressed() }

// TemplateImage packs template version t as an OCI image: one gzip layer
// per overlay lower of t, bottom first (a flat template's rootfs; a built
// one's base, then each build layer with overlay's whiteouts as OCI's),
// and an image config with t's env, workdir, user and cmd, and the rest
// of its defaults in the TemplateLabel label. The packed layers are
// files under tmpDir, which the caller removes once the image is pushed.
func (p *Pool) TemplateImage(ctx context.Context, t *Template, tmpDir string) (v1.Image, error) {
	lowers := t.LowerDirs()
	var layers []*fileLayer
	cfg := v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      v1.Time{Time: t.CreatedAt},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			WorkingDir: t.Workdir,
			User:       t.User,
			Cmd:        t.Cmd,
		},
	}
	keys := make([]string, 0, len(t.Env))
	for k := range t.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cfg.Config.Env = append(cfg.Config.Env, k+"="+t.Env[k])
	}
	label, err := json.Marshal(templateLabel{Name: t.Name, Version: t.Version, MemoryMB: t.MemoryMB, UserLimits: t.UserLimits, Start: t.Start, Ready: t.Ready})
	if err != nil {
		return nil, err
	}
	cfg.Config.Labels = map[string]string{TemplateLabel: string(label)}
	for i := len(lowers) - 1; i >= 0; i-- {
		start := time.Now()
		l, err := p.packLayer(ctx, lowers[i], tmpDir, tarOCI, compressGzip, types.OCILayer)
		if err != nil {
			return nil, fmt.Errorf("template %s version %s: %w", t.Name, t.Version, err)
		}
		p.log.Debug("packed template layer", "template", t.Name, "dir", lowers[i], "bytes", l.size, "took", time.Since(start).Round(time.Millisecond))
		layers = append(layers, l)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.diffID)
		cfg.History = append(cfg.History, v1.History{Created: cfg.Created, CreatedBy: "agentbox template push"})
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return newOCIImage(raw, types.OCIConfigJSON, layers, nil)
}

// applyTemplateLabel takes the defaults an agentbox-pushed image keeps in
// its TemplateLabel label into t, where t has none of its own (a
// request's memory_mb and user_limits win).
func applyTemplateLabel(cfg *v1.ConfigFile, t *Template) error {
	s, ok := cfg.Config.Labels[TemplateLabel]
	if !ok {
		return nil
	}
	var l templateLabel
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return errdefs.Invalid("label %s is not valid JSON: %v", TemplateLabel, err)
	}
	if t.MemoryMB == 0 && l.MemoryMB > 0 {
		t.MemoryMB = l.MemoryMB
	}
	if t.UserLimits == nil && l.UserLimits != nil {
		if err := checkUserLimits(l.UserLimits); err != nil {
			return err
		}
		t.UserLimits = l.UserLimits
	}
	if r := l.Ready; r != nil && ((r.Cmd == "") == (r.Port == 0) || r.Port < 0 || r.Port > 65535 || r.TimeoutMs < 0 || r.TimeoutMs > 600_000) {
		return errdefs.Invalid("label %s: ready needs exactly one of cmd and port (1-65535) and a timeout of at most 10 minutes", TemplateLabel)
	}
	t.Start, t.Ready = l.Start, l.Ready
	return nil
}

// ImportRemoteImage imports img, pulled from ref (as the source records
// it, with the manifest digest), as a new version of req.Name, with
// every check and limit of ImportImage.
func (p *Pool) ImportRemoteImage(ctx context.Context, req api.ImportTemplateRequest, img v1.Image, ref string) (*Template, error) {
	if _, err := principal(ctx); err != nil {
		return nil, err
	}
	if err := ValidTemplateName(req.Name); err != nil {
		return nil, err
	}
	if req.Workdir != "" {
		return nil, errdefs.Invalid("workdir cannot be set on a pull")
	}
	d, err := img.Digest()
	if err != nil {
		return nil, errdefs.Unavailable("image %s: %v", ref, err)
	}
	return p.importOpened(ctx, req, img, ref, "registry "+ref+"@"+d.String()+" config", d.String(), time.Now())
}

// pushedFile is where the refs version of template name was pushed to are
// kept: beside its read-only subvolume, which cannot change.
func (p *Pool) pushedFile(name, version string) string {
	return filepath.Join(p.templatesDir(), name, version+".pushed.json")
}

// RecordPush notes that template version t was pushed to ref as digest
// (the newest push to a ref replaces an older one).
func (p *Pool) RecordPush(t *Template, ref, digest string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := readPushed(p.pushedFile(t.Name, t.Version))
	out := []PushedRef{{Ref: ref, Digest: digest}}
	for _, r := range cur {
		if r.Ref != ref {
			out = append(out, r)
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	path := p.pushedFile(t.Name, t.Version)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	t.Pushed = out
	return os.Rename(tmp, path)
}

func readPushed(path string) []PushedRef {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []PushedRef
	_ = json.Unmarshal(b, &out)
	return out
}

// TempDir makes a scratch directory in the pool for packed layers (a
// crash's leftovers go at the next start, removeTempFiles); the caller
// removes it.
func (p *Pool) TempDir() (string, error) {
	return os.MkdirTemp(p.root, stagingPrefix+"oci-")
}
