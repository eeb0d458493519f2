package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// MaxImageUpload bounds an uploaded image archive (compressed).
const MaxImageUpload int64 = 32 << 30

// ImportImageReader imports an image archive (docker save or OCI layout
// tar, optionally gzipped) read from r, as ImportImage does with a file:
// r is first streamed to a temporary file in the pool (the archive is read
// several times), which is removed afterwards. req.Image is ignored.
func (p *Pool) ImportImageReader(ctx context.Context, req api.ImportTemplateRequest, r io.Reader) (*Template, error) {
	if _, err := principal(ctx); err != nil {
		return nil, err
	}
	if err := ValidTemplateName(req.Name); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(p.root, stagingPrefix+"upload-")
	if err != nil {
		return nil, fmt.Errorf("storing the uploaded image: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(r, MaxImageUpload+1))
	if err != nil {
		return nil, fmt.Errorf("receiving the uploaded image: %w", err)
	}
	if n > MaxImageUpload {
		return nil, errdefs.Invalid("the uploaded image is larger than %d bytes", MaxImageUpload)
	}
	if n == 0 {
		return nil, errdefs.Invalid("the request body is empty: send the image archive (docker save or OCI layout tar) as the body")
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	req.Image, req.Rootfs = f.Name(), ""
	t, err := p.importImage(ctx, req, "upload")
	if err != nil {
		return nil, err
	}
	return t, nil
}

// RemoveTemplateAll deletes every version of template name, for the
// principal ctx carries: another tenant's template is not found, and a
// public one needs the admin. The caller checks that no sandbox or
// snapshot uses it.
func (p *Pool) RemoveTemplateAll(ctx context.Context, name string) error {
	who, err := principal(ctx)
	if err != nil {
		return err
	}
	if err := ValidTemplateName(name); err != nil {
		return err
	}
	t, err := p.TemplateFor(ctx, name)
	if err != nil {
		return err
	}
	if t.Tenant == "" && !who.Admin {
		return errdefs.New(errdefs.ErrPermissionDenied, "template %q is public: removing it needs an admin key", name)
	}
	versions, err := p.versions(name)
	if err != nil {
		return err
	}
	if len(versions) == 0 {
		return templateNotFound(name)
	}
	// Newest first: a failure part-way leaves the name pointing at an
	// older, whole version rather than at nothing.
	for i := len(versions) - 1; i >= 0; i-- {
		if err := p.RemoveTemplate(ctx, name, strconv.Itoa(versions[i])); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(p.templatesDir(), name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		p.log.Warn("removing template directory", "template", name, "err", err)
	}
	return nil
}
