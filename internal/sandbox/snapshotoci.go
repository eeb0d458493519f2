package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/registry"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
	"github.com/agentbox/agentbox/internal/version"
)

// Snapshots through an OCI registry: a push packs the snapshot's own
// overlay upper directories (storage.SnapshotImage) under a config that
// names the template it stacks on (name, version, and where known the
// manifest digest and ref it was pushed or pulled as); a pull on another
// node finds that template (pulling it from its ref when this node lacks
// it), unpacks the layers into a new snapshot (storage.ImportSnapshot)
// and records it, so that a create from it works as from a snapshot
// taken here. A snapshot with memory carries its checkpoint's files too
// (memmove.go).

// SnapshotConfig is the config blob of a snapshot artifact
// (storage.SnapshotConfigType).
type SnapshotConfig struct {
	Agentbox  string            `json:"agentbox"` // the pushing daemon's version
	ID        string            `json:"id"`       // on the pushing node
	Name      string            `json:"name,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	Template  SnapshotTemplate  `json:"template"`
	Isolation string            `json:"isolation,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	// Resources of the source sandbox, when it still existed at the push.
	Resources *api.Resources `json:"resources,omitempty"`
	SizeBytes int64          `json:"size_bytes"`
	// DiffIDs are the sha256 of each layer's tar, bottom first (in a
	// snapshot stream, each layer's end frame carries it instead).
	DiffIDs []string `json:"diff_ids"`
	// Layers is the number of layers of a snapshot stream
	// (snapshotstream.go); unset in an OCI artifact.
	Layers int `json:"layers,omitempty"`
	// Memory is the snapshot's memory (memmove.go), nil for a snapshot
	// of files: its files follow the layers, in this order (in an OCI
	// artifact, one layer each after the upper directories').
	Memory *SnapshotMemory `json:"memory,omitempty"`
}

// SnapshotTemplate names the template version a snapshot stacks on.
type SnapshotTemplate struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Digest is the manifest digest the version was pushed or pulled as,
	// and Ref where it can be pulled from ("": never through a registry).
	Digest string `json:"digest,omitempty"`
	Ref    string `json:"ref,omitempty"`
}

// SetRegistry gives the service its registry client (snapshot pushes and
// pulls); without one they are refused.
func (s *Service) SetRegistry(c *registry.Client) { s.reg = c }

func (s *Service) realPool() (*storage.Pool, error) {
	p, ok := s.pool.(*storage.Pool)
	if !ok || s.reg == nil {
		return nil, errdefs.Unavailable("this daemon cannot move snapshots through a registry")
	}
	return p, nil
}

// registryRef parses ref and checks that the caller may use its registry.
func (s *Service) registryRef(ctx context.Context, ref string) (name.Reference, error) {
	who, err := tenancy.From(ctx)
	if err != nil {
		return nil, err
	}
	r, err := registry.ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if !who.Admin && !s.reg.TenantMayUse(r) {
		return nil, errdefs.New(errdefs.ErrPermissionDenied, "registry %s is not one that tenants may use: an admin lists it in [registry] tenant_registries", r.Context().RegistryStr())
	}
	return r, nil
}

// templateOrigin is where template version t can be found elsewhere: the
// digest and ref it was pushed as (the newest push), or pulled as.
func templateOrigin(t *storage.Template) (digest, ref string) {
	if len(t.Pushed) > 0 {
		r := t.Pushed[0]
		return r.Digest, refAt(r.Ref, r.Digest)
	}
	if t.Digest != "" {
		// Source is "registry REF@DIGEST config@...".
		src := strings.TrimPrefix(t.Source, "registry ")
		if i := strings.Index(src, "@"+t.Digest); i > 0 {
			return t.Digest, refAt(src[:i], t.Digest)
		}
		return t.Digest, ""
	}
	return "", ""
}

// refAt is ref's repository at digest.
func refAt(ref, digest string) string {
	r, err := name.ParseReference(ref)
	if err != nil {
		return ""
	}
	return r.Context().String() + "@" + digest
}

// PushSnapshot pushes a tenant's snapshot (id or name) to ref as an OCI
// artifact and returns its manifest digest.
func (s *Service) PushSnapshot(ctx context.Context, scope tenancy.Scope, ref, dest string) (*api.PushResponse, error) {
	pool, err := s.realPool()
	if err != nil {
		return nil, err
	}
	// The snapshot first: another tenant's is not found, whatever ref
	// the request names (the hostile battery's item 31).
	rec, err := s.st.GetSnapshot(ctx, scope, ref)
	if err != nil {
		return nil, err
	}
	r, err := s.registryRef(ctx, dest)
	if err != nil {
		return nil, err
	}
	dirs, cfg, err := s.exportable(ctx, pool, rec, ref)
	if err != nil {
		return nil, err
	}
	mem, memDir, err := s.exportMemory(rec, true)
	if err != nil {
		return nil, err
	}
	var memFiles []storage.SnapshotFile
	if mem != nil {
		cfg.Memory, memFiles = mem, mem.Files
	}
	tmp, err := pool.TempDir()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	// The layers are packed once (the config needs their diff ids), then
	// the artifact is made around them.
	img, diffIDs, err := pool.SnapshotImage(ctx, dirs, []byte("{}"), tmp, memDir, memFiles)
	if err != nil {
		return nil, fmt.Errorf("packing snapshot %s: %w", rec.ID, err)
	}
	for _, d := range diffIDs {
		cfg.DiffIDs = append(cfg.DiffIDs, d.String())
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	if img, err = storage.Rewrap(img, raw); err != nil {
		return nil, err
	}
	packed := time.Since(start)
	d, err := s.reg.Write(ctx, r, img)
	if err != nil {
		return nil, err
	}
	s.log.Info("pushed snapshot", "snapshot", rec.ID, "ref", r.String(), "digest", d.String(), "layers", len(dirs), "memory", mem != nil,
		"packed_in", packed.Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond))
	return &api.PushResponse{Ref: r.String(), Digest: d.String()}, nil
}

// exportable checks that snapshot rec (asked for as ref) can leave this
// node (ready, stacked on its template as recorded; its memory is
// exportMemory's) and
// returns its own layer directories, bottom first, and its config
// (without diff ids).
func (s *Service) exportable(ctx context.Context, pool *storage.Pool, rec *store.SnapshotRecord, ref string) ([]string, SnapshotConfig, error) {
	var cfg SnapshotConfig
	if rec.State != store.SnapshotReady {
		return nil, cfg, errdefs.Precondition("snapshot %q is still being taken; retry in a moment", ref)
	}
	tpl, err := pool.TemplateVersion(rec.Template, rec.TemplateVersion)
	if err != nil {
		return nil, cfg, fmt.Errorf("template of snapshot %s: %w", rec.ID, err)
	}
	tl := tpl.LowerDirs()
	n := len(rec.Lowers) - len(tl)
	if n < 1 || !sameLowers(rec.Lowers[n:], tl) {
		return nil, cfg, errdefs.Precondition("snapshot %s does not stack on the layers of its template %s version %s as recorded; it cannot leave this node", rec.ID, rec.Template, rec.TemplateVersion)
	}
	own := rec.Lowers[:n] // top first
	dirs := make([]string, 0, n)
	for i := n - 1; i >= 0; i-- {
		dirs = append(dirs, own[i])
	}
	cfg = SnapshotConfig{Agentbox: version.Version, ID: rec.ID, Name: rec.Name, CreatedAt: rec.CreatedAt,
		Template:  SnapshotTemplate{Name: tpl.Name, Version: tpl.Version},
		Isolation: rec.Isolation, Env: rec.Env, SizeBytes: rec.SizeBytes}
	cfg.Template.Digest, cfg.Template.Ref = templateOrigin(tpl)
	if sb, err := s.st.GetSandbox(ctx, rec.SandboxID); err == nil {
		res := sb.Resources
		cfg.Resources = &res
	}
	return dirs, cfg, nil
}

// PullTemplateFunc pulls the template image at ref as a new version of
// template name for the caller (the template service's Pull).
type PullTemplateFunc func(ctx context.Context, ref, name string) error

// PullSnapshot pulls the snapshot artifact at req.Ref into a new snapshot
// of tenant named req.Name ("" for none). Its template must be here: the
// version with the digest the artifact names, or, when it names none, the
// same version number; otherwise it is pulled with pullTemplate from the
// ref the artifact names, or the error says which template is missing.
func (s *Service) PullSnapshot(ctx context.Context, tenant string, req api.PullRequest, pullTemplate PullTemplateFunc) (*api.Snapshot, error) {
	pool, err := s.realPool()
	if err != nil {
		return nil, err
	}
	if req.Name != "" && !snapNameRE.MatchString(req.Name) {
		return nil, errdefs.Invalid("snapshot name %q is not valid: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", req.Name)
	}
	r, err := s.registryRef(ctx, req.Ref)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	img, err := s.reg.Image(ctx, r, nil)
	if err != nil {
		return nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, registry.Wrap(err, "reading the manifest of "+r.String())
	}
	if m.Config.MediaType != storage.SnapshotConfigType {
		return nil, errdefs.Invalid("%s is not an agentbox snapshot (its config is %s, not %s); to pull an image as a template use POST /v1/templates/pull", r, m.Config.MediaType, storage.SnapshotConfigType)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, registry.Wrap(err, "reading the config of "+r.String())
	}
	var cfg SnapshotConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, errdefs.Invalid("%s: the snapshot config is not valid: %v", r, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, registry.Wrap(err, "listing the layers of "+r.String())
	}
	nf := 0
	if cfg.Memory != nil {
		nf = len(cfg.Memory.Files)
	}
	if len(cfg.DiffIDs) == 0 || len(layers) != len(cfg.DiffIDs)+nf {
		return nil, errdefs.Invalid("%s: %d layers but %d diff ids and %d memory files in its config", r, len(layers), len(cfg.DiffIDs), nf)
	}
	memDrv, err := s.memoryTier(cfg.Memory, cfg.Isolation)
	if err != nil {
		return nil, err
	}
	fileLayers := layers[len(cfg.DiffIDs):]
	layers = layers[:len(cfg.DiffIDs)]
	diffIDs := make([]v1.Hash, len(cfg.DiffIDs))
	for i, d := range cfg.DiffIDs {
		if diffIDs[i], err = v1.NewHash(d); err != nil {
			return nil, errdefs.Invalid("%s: diff id %q: %v", r, d, err)
		}
	}
	rec, tpl, err := s.landSnapshot(ctx, pool, tenant, req.Name, &cfg, len(layers), pullTemplate, func(ctx context.Context, snapID string) (int64, error) {
		n, err := pool.ImportSnapshot(ctx, snapID, layers, diffIDs)
		if err != nil {
			return 0, fmt.Errorf("pulling snapshot %s: %w", r, err)
		}
		if cfg.Memory == nil {
			return 0, nil
		}
		m, err := s.landMemory(ctx, snapID, cfg.Memory, memDrv, n, func(dir string) error {
			for i, f := range cfg.Memory.Files {
				if err := storage.ReceiveSnapshotFileLayer(dir, f, fileLayers[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			_ = pool.RemoveSnapshot(context.WithoutCancel(ctx), snapID)
			return 0, fmt.Errorf("pulling snapshot %s: %w", r, err)
		}
		return m, nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("pulled snapshot", "snapshot", rec.ID, "ref", r.String(), "template", tpl.Name+"@"+tpl.Version,
		"layers", len(layers), "memory", cfg.Memory != nil, "size", rec.SizeBytes, "took", time.Since(start).Round(time.Millisecond))
	out := s.snapshotOut(rec)
	return &out, nil
}

// landSnapshot records the snapshot a pull or a stream import brings to
// this node: it finds (or pulls, with pullTemplate) the template cfg
// names, records a creating snapshot of tenant named name that stacks n
// layers on it, has fill write those layers (and its memory) into
// snapshot snapID under a context that carries the tenant's disk quota,
// and marks the snapshot ready, its size the layers' and the bytes fill
// returns (its memory's). It returns the ready record and its template;
// on an error nothing is left (fill leaves nothing on disk when it
// fails).
func (s *Service) landSnapshot(ctx context.Context, pool *storage.Pool, tenant, name string, cfg *SnapshotConfig, n int, pullTemplate PullTemplateFunc, fill func(ctx context.Context, snapID string) (int64, error)) (*store.SnapshotRecord, *storage.Template, error) {
	tpl, err := s.snapshotTemplate(ctx, pool, cfg.Template, pullTemplate)
	if err != nil {
		return nil, nil, err
	}
	tl := tpl.LowerDirs()
	if n+len(tl) > maxLowers {
		return nil, nil, errdefs.Precondition("the snapshot stacks %d layers on its template's %d; the most is %d", n, len(tl), maxLowers)
	}
	snapID := s.newID()
	rec := &store.SnapshotRecord{
		ID:              snapID,
		Name:            name,
		Tenant:          tenant,
		State:           store.SnapshotCreating,
		Template:        tpl.Name,
		TemplateVersion: tpl.Version,
		Isolation:       cfg.Isolation,
		Lowers:          append(pool.SnapshotLayerDirs(snapID, n), tl...),
		Env:             cfg.Env,
	}
	if _, ok := s.drivers[rec.Isolation]; !ok && cfg.Memory == nil {
		rec.Isolation = "" // a tier this node lacks: the create's own
	}
	// The intent comes first: recovery removes a snapshot left creating.
	if err := s.st.CreateSnapshot(ctx, rec); err != nil {
		return nil, nil, err
	}
	ictx := ctx
	if left, err := s.tenantBytesLeft(ctx, tenant); err != nil {
		_ = s.st.DeleteSnapshot(context.WithoutCancel(ctx), snapID)
		return nil, nil, err
	} else if left > 0 {
		ictx = storage.WithMaxBytes(ctx, left)
	}
	memBytes, err := fill(ictx, snapID)
	if err != nil {
		_ = s.st.DeleteSnapshot(context.WithoutCancel(ctx), snapID)
		return nil, nil, err
	}
	size, _ := pool.SnapshotSize(snapID)
	size += memBytes
	if err := s.st.FinishSnapshot(ctx, snapID, size); err != nil {
		_ = pool.RemoveSnapshot(context.WithoutCancel(ctx), snapID)
		_ = os.RemoveAll(s.ckpt.snapshotDir(snapID))
		_ = s.st.DeleteSnapshot(context.WithoutCancel(ctx), snapID)
		return nil, nil, err
	}
	rec.State, rec.SizeBytes = store.SnapshotReady, size
	return rec, tpl, nil
}

// snapshotTemplate finds (or pulls) the template version a pulled
// snapshot stacks on.
func (s *Service) snapshotTemplate(ctx context.Context, pool *storage.Pool, want SnapshotTemplate, pullTemplate PullTemplateFunc) (*storage.Template, error) {
	if err := storage.ValidTemplateName(want.Name); err != nil {
		return nil, errdefs.Invalid("the snapshot's template: %v", err)
	}
	find := func() (*storage.Template, error) {
		if _, err := pool.TemplateFor(ctx, want.Name); err != nil {
			return nil, err
		}
		vs, err := pool.TemplateVersions(want.Name)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			if want.Digest == "" && v.Version == want.Version {
				return v, nil
			}
			if want.Digest != "" {
				if d, _ := templateOrigin(v); d == want.Digest || v.Digest == want.Digest {
					return v, nil
				}
				for _, p := range v.Pushed {
					if p.Digest == want.Digest {
						return v, nil
					}
				}
			}
		}
		return nil, errdefs.NotFound("template %s has no version with the snapshot's files", want.Name)
	}
	t, err := find()
	if err == nil {
		return t, nil
	}
	what := "template " + want.Name + " version " + want.Version
	if want.Digest != "" {
		what += " (" + want.Digest + ")"
	}
	if want.Ref == "" || pullTemplate == nil {
		if want.Digest == "" {
			return nil, errdefs.Precondition("this node lacks %s, which the snapshot stacks on and which was never pushed to a registry: push it on the snapshot's node (agentbox template push %s REF), pull it here (agentbox template pull REF --name %s), then pull the snapshot again", what, want.Name, want.Name)
		}
		return nil, errdefs.Precondition("this node lacks %s, which the snapshot stacks on: pull it (agentbox template pull REPO@%s --name %s), then pull the snapshot again", what, want.Digest, want.Name)
	}
	if perr := pullTemplate(ctx, want.Ref, want.Name); perr != nil {
		return nil, fmt.Errorf("this node lacks %s, which the snapshot stacks on, and pulling it from %s failed: %w", what, want.Ref, perr)
	}
	t, err = find()
	if err != nil {
		return nil, fmt.Errorf("%s pulled from %s: %w", what, want.Ref, err)
	}
	return t, nil
}

// tenantBytesLeft is what tenant's disk_mb quota leaves for a pulled
// snapshot (0: no limit); an error when nothing is left.
func (s *Service) tenantBytesLeft(ctx context.Context, tenant string) (int64, error) {
	tn, err := s.st.GetTenant(ctx, tenant)
	if err != nil || tn.Quotas.DiskMB <= 0 {
		return 0, nil
	}
	u, err := s.st.TenantUsage(ctx, tenant)
	if err != nil {
		return 0, err
	}
	left := (tn.Quotas.DiskMB - u.DiskMB) << 20
	if left <= 0 {
		return 0, errdefs.Exhausted("tenant %q: its disk_mb quota of %d is used up; remove sandboxes, or ask an admin to raise it", tenant, tn.Quotas.DiskMB)
	}
	return left, nil
}
