package client

import (
	"context"
	"io"
	"net/url"
	"sort"
	"strconv"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// UploadTemplate makes a new version of template req.Name from an image
// archive read from r: a `docker save` archive or a tar of an OCI image
// layout, optionally gzipped. With a tenant's key the template belongs to
// that tenant; with an admin key it is public. req.User, req.Workdir and
// req.Env override the image config's defaults; req.Rootfs and req.Image
// must be empty.
func (c *Client) UploadTemplate(ctx context.Context, req api.ImportTemplateRequest, r io.Reader) (*api.Template, error) {
	if req.Name == "" {
		return nil, errdefs.Invalid("a template name is required")
	}
	if req.Rootfs != "" || req.Image != "" {
		return nil, errdefs.Invalid("UploadTemplate sends the image itself: leave rootfs and image empty (use ImportTemplate for paths on the daemon's host)")
	}
	q := url.Values{"name": {req.Name}}
	if req.User != "" {
		q.Set("user", req.User)
	}
	if req.Workdir != "" {
		q.Set("workdir", req.Workdir)
	}
	if req.MemoryMB != 0 {
		q.Set("memory_mb", strconv.FormatInt(req.MemoryMB, 10))
	}
	keys := make([]string, 0, len(req.Env))
	for k := range req.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("env", k+"="+req.Env[k])
	}
	var t api.Template
	if err := c.doStream(ctx, "POST", "/v1/templates/import", q, r, "application/x-tar", &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// RemoveTemplate deletes every version of a template: a tenant's own, or
// any with an admin key. It fails with errdefs.ErrFailedPrecondition
// while a sandbox or snapshot uses the template.
func (c *Client) RemoveTemplate(ctx context.Context, name string) error {
	if name == "" {
		return errdefs.Invalid("a template name is required")
	}
	return c.doJSON(ctx, "DELETE", "/v1/templates/"+url.PathEscape(name), nil, nil, nil)
}
