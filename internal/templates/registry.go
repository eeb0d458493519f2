package templates

import (
	"context"
	"os"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/registry"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// SetRegistry gives the service its registry client (pushes and pulls);
// without one they are refused.
func (s *Service) SetRegistry(c *registry.Client) { s.reg = c }

// registryRef parses ref and checks that the caller may use its registry:
// the admin any, a tenant those of [registry] tenant_registries.
func (s *Service) registryRef(ctx context.Context, ref string) (name.Reference, error) {
	who, err := tenancy.From(ctx)
	if err != nil {
		return nil, err
	}
	if s.reg == nil {
		return nil, errdefs.Unavailable("this daemon has no registry client")
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

// Push pushes the newest version of template name, which the caller
// sees, to ref as an OCI image (storage.TemplateImage) and returns the
// manifest digest. The push is recorded with the version, so that a
// snapshot of it names where its template can be pulled from.
func (s *Service) Push(ctx context.Context, tplName, ref string) (*api.PushResponse, error) {
	// The template first: another tenant's is not found, whatever ref
	// the request names (the hostile battery's item 31).
	t, err := s.pool.TemplateFor(ctx, tplName)
	if err != nil {
		return nil, err
	}
	r, err := s.registryRef(ctx, ref)
	if err != nil {
		return nil, err
	}
	add, release := s.pool.PinBuildLayers()
	defer release()
	add(t.Layers...)
	tmp, err := s.pool.TempDir()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	img, err := s.pool.TemplateImage(ctx, t, tmp)
	if err != nil {
		return nil, err
	}
	packed := time.Since(start)
	d, err := s.reg.Write(ctx, r, img)
	if err != nil {
		return nil, err
	}
	if err := s.pool.RecordPush(t, r.String(), d.String()); err != nil {
		s.log.Warn("recording a template push", "template", t.Name, "version", t.Version, "err", err)
	}
	s.log.Info("pushed template", "template", t.Name, "version", t.Version, "ref", r.String(), "digest", d.String(),
		"packed_in", packed.Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond))
	return &api.PushResponse{Ref: r.String(), Digest: d.String()}, nil
}

// Pull pulls the image at req.Ref (any OCI image for linux on this
// host's architecture, or one agentbox pushed) as a new version of
// req.Name (default: the repository's last component) for the caller,
// as an upload is: the same name rules, quota and checks.
func (s *Service) Pull(ctx context.Context, req api.PullRequest) (*api.Template, error) {
	r, err := s.registryRef(ctx, req.Ref)
	if err != nil {
		return nil, err
	}
	tplName := req.Name
	if tplName == "" {
		tplName = registry.RepoName(r)
	}
	if err := s.CheckName(ctx, tplName); err != nil {
		return nil, err
	}
	ctx, done, err := s.turn(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	start := time.Now()
	img, err := s.reg.Image(ctx, r, &v1.Platform{OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		return nil, err
	}
	t, err := s.pool.ImportRemoteImage(ctx, api.ImportTemplateRequest{Name: tplName}, img, r.String())
	if err != nil {
		return nil, err
	}
	s.log.Info("pulled template", "template", t.Name, "version", t.Version, "ref", r.String(), "took", time.Since(start).Round(time.Millisecond))
	out := s.pool.Describe(t)
	return &out, nil
}
