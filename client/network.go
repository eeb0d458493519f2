package client

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/agentbox/agentbox/api"
)

// PreviewURL returns the preview URL of port in sandbox sb,
// http://<port>-<id>.<preview_domain>/, with ?agentbox_token= when the
// sandbox's previews need its token. See docs/network.md.
func PreviewURL(sb *api.Sandbox, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", fmt.Errorf("port must be 1-65535, got %d", port)
	}
	n := sb.Network
	if n == nil || n.PreviewDomain == "" {
		return "", fmt.Errorf("sandbox %s has no preview settings (created by an older daemon?)", sb.ID)
	}
	u := "http://" + strconv.Itoa(port) + "-" + sb.ID + "." + n.PreviewDomain + "/"
	if n.Preview != api.PreviewPublic && n.PreviewToken != "" {
		u += "?" + api.PreviewTokenQuery + "=" + url.QueryEscape(n.PreviewToken)
	}
	return u, nil
}

// PreviewURL fetches sandbox id and returns the preview URL of its port.
func (c *Client) PreviewURL(ctx context.Context, id string, port int) (string, error) {
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		return "", err
	}
	return PreviewURL(sb, port)
}

// PortPath is the API path that proxies to port in sandbox id (send the
// API key, or the preview token as api.PreviewTokenHeader).
func PortPath(id string, port int) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + "/ports/" + strconv.Itoa(port) + "/"
}

// SetEgress changes sandbox id's egress policy while it runs: egress is
// api.EgressNone, api.EgressInternet or api.EgressCustom; allow and deny
// hold domains (example.org, *.example.org), CIDRs, addresses and ports
// (docs/network.md). New connections see
// the change at once.
func (c *Client) SetEgress(ctx context.Context, id, egress string, allow, deny []string) (*api.Sandbox, error) {
	return c.sandboxAction(ctx, id, "/egress", api.Network{Egress: egress, Allow: allow, Deny: deny})
}

// EgressLog returns sandbox id's egress log: its resolver's and web
// proxy's decisions, oldest first (docs/network.md).
func (c *Client) EgressLog(ctx context.Context, id string) (*api.EgressLog, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.EgressLog
	if err := c.doJSON(ctx, "GET", sandboxPath(id, "/egress/log"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
