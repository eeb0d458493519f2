package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// Build layers. A build step runs in a sandbox; its writable layer (the
// sandbox's subvolume: upper/ and work/) is then snapshotted read-only to
// storage/layers/<id>/, whose upper/ is an overlay lower from then on. The
// id is the step's cache key (see internal/build), so the same step on the
// same parent is one layer, whichever template uses it. A built template
// version is a read-only subvolume holding only template.json: its own
// layers (top first) and the template version it stacks on (From), whose
// root filesystem it shares, never copies. Layers that no template
// version, sandbox or snapshot uses are removed by GCLayers.

// BuildInfo is what a build adds to a template version.
type BuildInfo struct {
	// From is NAME@VERSION of the template this one stacks on.
	From string `json:"from,omitempty"`
	// Layers are the build layers of this version, top first (ids in
	// storage/layers).
	Layers []string `json:"layers,omitempty"`
	// Start is a shell command started in every new sandbox; Ready the
	// check create waits for.
	Start string          `json:"start,omitempty"`
	Ready *api.ReadyCheck `json:"ready,omitempty"`

	lowers []string // resolved overlay lowers, top first
}

// LayerMeta describes a build layer (layer.json in its subvolume).
type LayerMeta struct {
	ID        string    `json:"id"`
	Parent    string    `json:"parent"` // the parent's cache key
	Step      string    `json:"step"`   // what ran
	CreatedAt time.Time `json:"created_at"`
	// Image: the layer is an image (from: FILE), with its defaults.
	Image *ImageDefaults `json:"image,omitempty"`
}

var buildLayerRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// maxFromDepth bounds a chain of templates built from templates.
const maxFromDepth = 16

type buildState struct {
	mu   sync.Mutex
	pins map[string]int
	// sizes caches BuildLayerSize by layer id (a committed layer is
	// read-only).
	sizes map[string]int64
}

// LowerDirs returns the overlay lower dirs of a sandbox made from t, top
// first.
func (t *Template) LowerDirs() []string {
	if t.lowers != nil {
		return append([]string(nil), t.lowers...)
	}
	return []string{t.Rootfs}
}

func (p *Pool) layersDir() string { return filepath.Join(p.root, "layers") }

// BuildLayerUpper is the overlay lower dir of build layer id.
func (p *Pool) BuildLayerUpper(id string) string {
	return filepath.Join(p.layersDir(), id, "upper")
}

// HasBuildLayer reports whether build layer id exists, whole.
func (p *Pool) HasBuildLayer(id string) bool {
	if !buildLayerRE.MatchString(id) {
		return false
	}
	ro, err := subvolReadOnly(filepath.Join(p.layersDir(), id))
	return err == nil && ro
}

// PinBuildLayers keeps GCLayers from removing layers ids (and any added
// later with the returned add) until release is called: a build pins what
// it stacks on before the template that references them exists.
func (p *Pool) PinBuildLayers() (add func(ids ...string), release func()) {
	var mine []string
	add = func(ids ...string) {
		p.build.mu.Lock()
		defer p.build.mu.Unlock()
		if p.build.pins == nil {
			p.build.pins = map[string]int{}
		}
		for _, id := range ids {
			p.build.pins[id]++
			mine = append(mine, id)
		}
	}
	release = func() {
		p.build.mu.Lock()
		defer p.build.mu.Unlock()
		for _, id := range mine {
			if p.build.pins[id]--; p.build.pins[id] <= 0 {
				delete(p.build.pins, id)
			}
		}
		mine = nil
	}
	return add, release
}

// CommitBuildLayer snapshots sandbox sandboxID's writable layer read-only
// as build layer meta.ID. The sandbox's processes must have finished
// writing. A layer that exists already (the same step committed by a
// concurrent build) is kept and is not an error.
func (p *Pool) CommitBuildLayer(ctx context.Context, sandboxID string, meta LayerMeta) error {
	if !buildLayerRE.MatchString(meta.ID) {
		return errdefs.Invalid("build layer id %q is not valid", meta.ID)
	}
	if err := validLayerID(sandboxID); err != nil {
		return err
	}
	if err := os.MkdirAll(p.layersDir(), 0o711); err != nil {
		return err
	}
	_ = os.Chmod(p.layersDir(), 0o711)
	src := p.layerDir(sandboxID)
	b, _ := json.MarshalIndent(meta, "", "  ")
	_ = os.Remove(filepath.Join(src, "layer.json"))
	if err := writeFileSync(filepath.Join(src, "layer.json"), append(b, '\n')); err != nil {
		return fmt.Errorf("committing build layer: %w", err)
	}
	if fd, err := openDir(src); err == nil {
		_ = unix.Syncfs(fd)
		unix.Close(fd)
	}
	dst := filepath.Join(p.layersDir(), meta.ID)
	if err := snapCreate(src, dst, true); err != nil {
		switch {
		case errors.Is(err, unix.EEXIST):
			return nil
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
			return errdefs.Exhausted("the storage pool is full: %v", err)
		case errors.Is(err, unix.ENOTTY):
			if out, cerr := runCmd(ctx, "btrfs", "subvolume", "snapshot", "-r", src, dst); cerr != nil {
				return fmt.Errorf("committing build layer: %w: %s", cerr, out)
			}
		default:
			return fmt.Errorf("committing build layer: %w", err)
		}
	}
	return nil
}

// BuildLayerSize returns the bytes build layer id holds on disk: its
// files' allocated blocks, each inode counted once. It is measured by
// walking the layer (once: a committed layer never changes), not read from
// its qgroup, whose figures are only as good as btrfs's accounting: once
// qgroups are marked inconsistent (a large subvolume dropped past
// qgroup's drop_subtree_threshold does it) a new snapshot's qgroup can
// read 0 until a rescan, which let a build past a tenant's disk quota
// (TestTenantTemplateBuild saw it once in a full run).
func (p *Pool) BuildLayerSize(id string) int64 {
	p.build.mu.Lock()
	n, ok := p.build.sizes[id]
	p.build.mu.Unlock()
	if ok {
		return n
	}
	n, err := diskUsage(filepath.Join(p.layersDir(), id))
	if err != nil {
		return 0
	}
	p.build.mu.Lock()
	if p.build.sizes == nil {
		p.build.sizes = map[string]int64{}
	}
	p.build.sizes[id] = n
	p.build.mu.Unlock()
	return n
}

// diskUsage is what the tree at dir holds on disk: the allocated blocks of
// every file, directory and link under it, each inode once (as du).
func diskUsage(dir string) (int64, error) {
	seen := map[uint64]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		if st.Nlink > 1 && !d.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// BuildLayerInfo reads build layer id's layer.json.
func (p *Pool) BuildLayerInfo(id string) (*LayerMeta, error) {
	if !buildLayerRE.MatchString(id) {
		return nil, errdefs.Invalid("build layer id %q is not valid", id)
	}
	b, err := os.ReadFile(filepath.Join(p.layersDir(), id, "layer.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.NotFound("build layer %s not found", id)
	}
	if err != nil {
		return nil, err
	}
	var m LayerMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("reading build layer %s: %w", id, err)
	}
	return &m, nil
}

// ListBuildLayers returns the ids of the build layers on disk, sorted.
func (p *Pool) ListBuildLayers() ([]string, error) {
	ents, err := os.ReadDir(p.layersDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if buildLayerRE.MatchString(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// SaveBuiltTemplate publishes t (BuildInfo set) as the next version of
// template name, unless the newest version is the same build (same
// layers, base and defaults): then it returns that version, so a rebuild
// with nothing changed makes no new version. The principal ctx carries
// must be allowed a new version of name (CheckNewVersion), whether one is
// made or not.
func (p *Pool) SaveBuiltTemplate(ctx context.Context, name string, t *Template) (tpl *Template, created bool, err error) {
	if err := p.CheckNewVersion(ctx, name); err != nil {
		return nil, false, err
	}
	if cur, err := p.Template(name); err == nil && sameBuild(cur, t) {
		return cur, false, nil
	}
	var size int64
	for _, id := range t.Layers {
		size += p.BuildLayerSize(id)
	}
	out, err := p.buildTemplate(ctx, name, t, func(string) (int64, error) { return size, nil })
	if err != nil {
		return nil, false, err
	}
	// Reload: resolves the lowers.
	tpl, err = p.TemplateVersion(name, out.Version)
	return tpl, err == nil, err
}

func sameBuild(a, b *Template) bool {
	return a.From == b.From && reflect.DeepEqual(a.Layers, b.Layers) && a.Start == b.Start &&
		reflect.DeepEqual(a.Ready, b.Ready) && a.User == b.User && a.Workdir == b.Workdir &&
		len(a.Env) == len(b.Env) && (len(a.Env) == 0 || reflect.DeepEqual(a.Env, b.Env)) && a.Source == b.Source
}

// resolveLowers fills t.lowers for a built template: its layers, then
// those of the template it stacks on.
func (p *Pool) resolveLowers(t *Template, depth int) error {
	if t.From == "" && len(t.Layers) == 0 {
		return nil
	}
	if depth > maxFromDepth {
		return fmt.Errorf("template %s version %s: templates built from templates nest deeper than %d", t.Name, t.Version, maxFromDepth)
	}
	var lowers []string
	for _, id := range t.Layers {
		if !buildLayerRE.MatchString(id) {
			return fmt.Errorf("template %s version %s names a bad layer id %q", t.Name, t.Version, id)
		}
		lowers = append(lowers, p.BuildLayerUpper(id))
	}
	if t.From != "" {
		name, ver, ok := strings.Cut(t.From, "@")
		if !ok {
			return fmt.Errorf("template %s version %s: from %q is not NAME@VERSION", t.Name, t.Version, t.From)
		}
		parent, err := p.loadDepth(name, ver, depth+1)
		if err != nil {
			return fmt.Errorf("template %s version %s stacks on %s: %w", t.Name, t.Version, t.From, err)
		}
		lowers = append(lowers, parent.LowerDirs()...)
	}
	t.lowers = lowers
	return nil
}

func (p *Pool) loadDepth(name, version string, depth int) (*Template, error) {
	dir := filepath.Join(p.templatesDir(), name, version)
	b, err := os.ReadFile(filepath.Join(dir, templateMeta))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.NotFound("template %s has no version %s", name, version)
	}
	if err != nil {
		return nil, err
	}
	var t Template
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("reading template %s version %s: %w", name, version, err)
	}
	t.Name, t.Version = name, version
	t.Rootfs = filepath.Join(dir, "rootfs")
	if err := p.resolveLowers(&t, depth); err != nil {
		return nil, err
	}
	return &t, nil
}

// allVersions returns every version of every template.
func (p *Pool) allVersions() ([]*Template, error) {
	names, err := os.ReadDir(p.templatesDir())
	if err != nil {
		return nil, err
	}
	var out []*Template
	for _, n := range names {
		if !n.IsDir() || !templateNameRe.MatchString(n.Name()) {
			continue
		}
		vs, err := p.versions(n.Name())
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			dir := filepath.Join(p.templatesDir(), n.Name(), strconv.Itoa(v))
			b, err := os.ReadFile(filepath.Join(dir, templateMeta))
			if err != nil {
				continue
			}
			var t Template
			if json.Unmarshal(b, &t) != nil {
				continue
			}
			t.Name, t.Version = n.Name(), strconv.Itoa(v)
			out = append(out, &t)
		}
	}
	return out, nil
}

// TemplateDependents returns the template versions built on version
// version of name ("" = any version), as NAME@VERSION.
func (p *Pool) TemplateDependents(name, version string) ([]string, error) {
	all, err := p.allVersions()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range all {
		fn, fv, _ := strings.Cut(t.From, "@")
		if fn == name && (version == "" || fv == version) && t.Name != name {
			out = append(out, t.Name+"@"+t.Version)
		}
	}
	sort.Strings(out)
	return out, nil
}

// GCLayers removes the build layers that no template version references,
// that no running build has pinned, and whose upper dir is not in inUse
// (the lowers of sandboxes and snapshots). It returns the removed ids.
func (p *Pool) GCLayers(ctx context.Context, inUse map[string]bool) ([]string, error) {
	ids, err := p.ListBuildLayers()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	// The pool lock orders this against a build publishing a template.
	p.mu.Lock()
	defer p.mu.Unlock()
	all, err := p.allVersions()
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, t := range all {
		for _, id := range t.Layers {
			used[id] = true
		}
	}
	var removed []string
	for _, id := range ids {
		p.build.mu.Lock()
		pinned := p.build.pins[id] > 0
		p.build.mu.Unlock()
		if used[id] || pinned || inUse[p.BuildLayerUpper(id)] {
			continue
		}
		dir := filepath.Join(p.layersDir(), id)
		subID, idErr := subvolID(dir)
		if err := subvolDestroy(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			p.log.Warn("removing unused build layer", "layer", id, "err", err)
			continue
		}
		if idErr == nil {
			_ = qgroupDestroy(p.root, subID)
			p.removeFloor(subID)
		}
		p.build.mu.Lock()
		delete(p.build.sizes, id)
		p.build.mu.Unlock()
		removed = append(removed, id)
	}
	if len(removed) > 0 {
		p.log.Info("removed unused build layers", "count", len(removed))
	}
	return removed, nil
}

// removeTempFiles deletes the temporary files and directories that an
// upload, image import or build interrupted by a crash left in the pool
// root (.tmp-upload-*, .tmp-image-*, .tmp-build-*) and half-imported
// image layers (layers/.tmp-*).
func (p *Pool) removeTempFiles() {
	var paths []string
	for _, dir := range []string{p.root, p.layersDir()} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), stagingPrefix) {
				paths = append(paths, filepath.Join(dir, e.Name()))
			}
		}
	}
	for _, path := range paths {
		if sub, err := isSubvolume(path); err == nil && sub {
			_ = subvolDestroy(path)
		}
		if err := os.RemoveAll(path); err != nil {
			p.log.Warn("removing leftover temporary file", "path", path, "err", err)
		} else {
			p.log.Info("removed leftover temporary file", "path", path)
		}
	}
}

// Describe is t as GET /v1/templates/{name} shows it: with the numbers of
// every version of its name.
func (p *Pool) Describe(t *Template) api.Template {
	out := t.API()
	if vs, err := p.versions(t.Name); err == nil {
		for _, v := range vs {
			out.Versions = append(out.Versions, strconv.Itoa(v))
		}
	}
	for _, id := range t.Layers {
		l := api.TemplateLayer{ID: id, SizeBytes: p.BuildLayerSize(id)}
		if m, err := p.BuildLayerInfo(id); err == nil {
			l.Step, l.CreatedAt = m.Step, m.CreatedAt
		}
		out.LayerInfo = append(out.LayerInfo, l)
	}
	return out
}

// ImageDefaults are the defaults an image's config gives a template.
type ImageDefaults struct {
	Env     map[string]string `json:"env,omitempty"`
	User    string            `json:"user,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Digest  string            `json:"digest"` // of the image config
}

// ImportImageLayer makes build layer id from the OCI image at path (a
// docker save archive or an OCI layout tar, as ImportImage takes): its
// layers are applied, flattened, into the layer's upper/, with the same
// checks and safety as ImportImage. A build spec's `from: IMAGE-FILE`
// stacks on it. If layer id exists already it is not imported again.
func (p *Pool) ImportImageLayer(ctx context.Context, path, id string) (*ImageDefaults, error) {
	if _, err := principal(ctx); err != nil {
		return nil, err
	}
	if !buildLayerRE.MatchString(id) {
		return nil, errdefs.Invalid("build layer id %q is not valid", id)
	}
	if p.HasBuildLayer(id) {
		m, err := p.BuildLayerInfo(id)
		if err != nil {
			return nil, err
		}
		if m.Image == nil {
			return nil, fmt.Errorf("build layer %s is not an image layer", id)
		}
		return m.Image, nil
	}
	tmp, err := os.MkdirTemp(p.root, stagingPrefix+"image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	img, err := openImage(path, tmp)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, errdefs.Invalid("reading the image config: %v", err)
	}
	if err := checkPlatform(cfg.OS, cfg.Architecture); err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, errdefs.Invalid("listing the image's layers: %v", err)
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return nil, errdefs.Invalid("the image manifest has %d layers but its config names %d", len(layers), len(cfg.RootFS.DiffIDs))
	}
	digest, _ := img.ConfigName()
	def := &ImageDefaults{Env: map[string]string{}, Workdir: cfg.Config.WorkingDir, Digest: digest.String()}
	for _, kv := range cfg.Config.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			def.Env[k] = v
		}
	}
	if def.Workdir != "" && !filepath.IsAbs(def.Workdir) {
		def.Workdir = "/" + def.Workdir
	}
	def.User, _, _ = strings.Cut(cfg.Config.User, ":")

	if err := os.MkdirAll(p.layersDir(), 0o711); err != nil {
		return nil, err
	}
	staging := filepath.Join(p.layersDir(), stagingPrefix+randHex())
	if err := subvolCreate(staging); err != nil {
		return nil, fmt.Errorf("importing image layer: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = subvolDestroy(staging)
		}
	}()
	upper := filepath.Join(staging, "upper")
	if err := os.Mkdir(upper, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chown(upper, p.uidBase, p.uidBase); err != nil {
		return nil, err
	}
	a, err := newLayerApplier(ctx, upper, p.uidBase, p.uidCount)
	if err != nil {
		return nil, err
	}
	for i, l := range layers {
		what := fmt.Sprintf("image layer %d of %d", i+1, len(layers))
		if d, err := l.Digest(); err == nil {
			what += " (" + d.String() + ")"
		}
		if err := applyLayer(a, l, cfg.RootFS.DiffIDs[i], what); err != nil {
			a.Close()
			return nil, err
		}
	}
	a.Close()
	meta, _ := json.MarshalIndent(LayerMeta{ID: id, Step: "from image " + def.Digest, CreatedAt: time.Now().UTC(), Image: def}, "", "  ")
	if err := writeFileSync(filepath.Join(staging, "layer.json"), append(meta, '\n')); err != nil {
		return nil, err
	}
	if fd, err := openDir(staging); err == nil {
		_ = unix.Syncfs(fd)
		unix.Close(fd)
	}
	if err := subvolSetReadOnly(staging, true); err != nil {
		return nil, fmt.Errorf("importing image layer: %w", err)
	}
	if err := os.Rename(staging, filepath.Join(p.layersDir(), id)); err != nil {
		if p.HasBuildLayer(id) { // a concurrent build made it
			return def, nil
		}
		return nil, fmt.Errorf("importing image layer: %w", err)
	}
	ok = true
	return def, nil
}

// SetLowers sets the overlay lowers of a template that is not on disk
// (a build's stand-in base).
func (t *Template) SetLowers(lowers []string) { t.lowers = lowers }
