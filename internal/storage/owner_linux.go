package storage

import (
	"context"
	"strconv"
)

// TemplateFor returns the newest version of template name if the
// principal ctx carries may see it; a template of another tenant is not
// found, with the same error as a name that does not exist.
func (p *Pool) TemplateFor(ctx context.Context, name string) (*Template, error) {
	who, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	t, err := p.Template(name)
	if err != nil {
		return nil, err
	}
	if !sees(who, t) {
		return nil, templateNotFound(name)
	}
	return t, nil
}

// TemplateVersionFor returns one version of template name if the
// principal ctx carries may see it, and not found (as for a missing name)
// otherwise.
func (p *Pool) TemplateVersionFor(ctx context.Context, name, version string) (*Template, error) {
	who, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	t, err := p.TemplateVersion(name, version)
	if err != nil {
		if _, lerr := p.TemplateFor(ctx, name); lerr != nil {
			return nil, lerr // the name itself is not the caller's to know
		}
		return nil, err
	}
	if !sees(who, t) {
		return nil, templateNotFound(name)
	}
	return t, nil
}

// ListTemplatesFor returns the newest version of every template the
// principal ctx carries may see, by name.
func (p *Pool) ListTemplatesFor(ctx context.Context) ([]*Template, error) {
	who, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	all, err := p.ListTemplates()
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, t := range all {
		if sees(who, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// CheckNewVersion reports whether the principal ctx carries may make a new
// version of template name (a new name, or one it owns), so that a long
// import or build can fail before it starts. buildTemplate checks again
// when it publishes the version.
func (p *Pool) CheckNewVersion(ctx context.Context, name string) error {
	if _, err := principal(ctx); err != nil {
		return err
	}
	if err := ValidTemplateName(name); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.newVersionOwner(ctx, name)
	return err
}

// newVersionOwner returns the tenant that owns a new version of template
// name made for the principal ctx carries (see newVersionOwner in
// owner.go). The caller holds p.mu, so the answer holds until it
// publishes the version.
func (p *Pool) newVersionOwner(ctx context.Context, name string) (string, error) {
	who, err := principal(ctx)
	if err != nil {
		return "", err
	}
	versions, err := p.versions(name)
	if err != nil {
		return "", err
	}
	cur := ""
	if len(versions) > 0 {
		t, err := p.load(name, strconv.Itoa(versions[len(versions)-1]))
		if err != nil {
			return "", err
		}
		cur = t.Tenant
	}
	return newVersionOwner(who, name, len(versions) > 0, cur)
}
