package client

import (
	"context"
	"net/url"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// PushTemplate pushes the newest version of template name to ref
// (HOST[:PORT]/REPO[:TAG]) as an OCI image and returns the manifest
// digest. See docs/cluster.md.
func (c *Client) PushTemplate(ctx context.Context, name, ref string) (*api.PushResponse, error) {
	if name == "" {
		return nil, errdefs.Invalid("a template name is required")
	}
	var out api.PushResponse
	if err := c.doJSON(ctx, "POST", "/v1/templates/"+url.PathEscape(name)+"/push", nil, api.PushRequest{Ref: ref}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PullTemplate pulls the OCI image at ref as a new version of template
// name ("": the repository's last component).
func (c *Client) PullTemplate(ctx context.Context, ref, name string) (*api.Template, error) {
	var t api.Template
	if err := c.doJSON(ctx, "POST", "/v1/templates/pull", nil, api.PullRequest{Ref: ref, Name: name}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// PushSnapshot pushes snapshot ref's (id or name) files to dest
// (HOST[:PORT]/REPO[:TAG]) as an OCI artifact and returns its digest.
func (c *Client) PushSnapshot(ctx context.Context, ref, dest string) (*api.PushResponse, error) {
	if ref == "" {
		return nil, errdefs.Invalid("a snapshot id or name is required")
	}
	var out api.PushResponse
	if err := c.doJSON(ctx, "POST", "/v1/snapshots/"+url.PathEscape(ref)+"/push", nil, api.PushRequest{Ref: dest}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PullSnapshot pulls a pushed snapshot from ref into a new snapshot on
// the daemon, named name ("" for none); create sandboxes from it with
// CreateSandbox's Snapshot.
func (c *Client) PullSnapshot(ctx context.Context, ref, name string) (*api.Snapshot, error) {
	var out api.Snapshot
	if err := c.doJSON(ctx, "POST", "/v1/snapshots/pull", nil, api.PullRequest{Ref: ref, Name: name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
