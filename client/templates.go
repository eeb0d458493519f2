package client

import (
	"context"
	"net/url"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// ListTemplates lists the templates sandboxes can be created from.
func (c *Client) ListTemplates(ctx context.Context) ([]api.Template, error) {
	var out api.ListTemplatesResponse
	if err := c.doJSON(ctx, "GET", "/v1/templates", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Templates, nil
}

// GetTemplate returns the newest version of a template.
func (c *Client) GetTemplate(ctx context.Context, name string) (*api.Template, error) {
	if name == "" {
		return nil, errdefs.Invalid("a template name is required")
	}
	var t api.Template
	if err := c.doJSON(ctx, "GET", "/v1/templates/"+url.PathEscape(name), nil, nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ImportTemplate makes a new template version from a root filesystem
// directory on the daemon's host (admin only).
func (c *Client) ImportTemplate(ctx context.Context, req api.ImportTemplateRequest) (*api.Template, error) {
	var t api.Template
	if err := c.doJSON(ctx, "POST", "/v1/templates", nil, req, &t); err != nil {
		return nil, err
	}
	return &t, nil
}
