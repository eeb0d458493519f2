package sandbox

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/guestclient"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// resolveNetwork checks a create request's network settings and fills the
// defaults, a fresh preview token and the preview host.
func resolveNetwork(cfg *config.Config, req *api.Network) (*api.Network, error) {
	n := &api.Network{}
	if req != nil {
		*n = *req
	}
	if n.PreviewToken != "" || n.PreviewDomain != "" || n.Address != "" {
		return nil, errdefs.Invalid("network.preview_token, network.preview_domain and network.address are set by the daemon; leave them out")
	}
	if n.Egress == "" {
		n.Egress = api.EgressNone
	}
	switch n.Egress {
	case api.EgressNone:
		if len(n.Allow) > 0 || len(n.Deny) > 0 {
			return nil, errdefs.Invalid("network.allow and network.deny need egress %q or %q; egress %q allows nothing", api.EgressCustom, api.EgressInternet, api.EgressNone)
		}
	case api.EgressInternet, api.EgressCustom:
		if _, err := network.ParsePolicy(n.Egress, n.Allow, n.Deny); err != nil {
			return nil, err
		}
	default:
		return nil, errdefs.Invalid("network.egress must be %q, %q or %q, got %q", api.EgressNone, api.EgressInternet, api.EgressCustom, n.Egress)
	}
	if err := resolveLimits(cfg, n); err != nil { // netlimits.go
		return nil, err
	}
	if n.Preview == "" {
		n.Preview = api.PreviewTokenMode
	}
	if n.Preview != api.PreviewTokenMode && n.Preview != api.PreviewPublic {
		return nil, errdefs.Invalid("network.preview must be %q or %q, got %q", api.PreviewTokenMode, api.PreviewPublic, n.Preview)
	}
	n.PreviewToken = newPreviewToken()
	n.PreviewDomain = cfg.PreviewHost()
	return n, nil
}

// forkNetwork gives a fork its parent's settings with a token of its own.
func forkNetwork(n *api.Network) *api.Network {
	if n == nil {
		return nil
	}
	c := *n
	c.PreviewToken = newPreviewToken()
	c.Address = "" // the fork gets its own
	return &c
}

// newPreviewToken returns 192 random bits, URL-safe.
func newPreviewToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Preview returns what the preview proxy needs of sandbox id, of any
// tenant: its tenant and network settings.
func (s *Service) Preview(ctx context.Context, id string) (tenant string, n api.Network, err error) {
	rec, err := s.visible(ctx, tenancy.AllTenants(), id)
	if err != nil {
		return "", n, err
	}
	if rec.Spec.Network != nil {
		n = *rec.Spec.Network
	} else {
		n = api.Network{Egress: api.EgressNone, Preview: api.PreviewTokenMode}
	}
	return rec.Tenant, n, nil
}

// DialPort opens a TCP connection to 127.0.0.1:port inside a running
// sandbox, through its guest agent (proto.Dial). The caller has
// already checked access.
func (s *Service) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if _, err := s.Guest(ctx, tenancy.AllTenants(), id); err != nil { // running, resumed if auto_resume
		return nil, err
	}
	e, err := s.lookup(ctx, tenancy.AllTenants(), id)
	if err != nil {
		return nil, err
	}
	c, err := e.drv.DialGuest(ctx, e.handle())
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(15 * time.Second))
	}
	br, err := guestclient.DialPortOn(c, port)
	if err != nil {
		c.Close()
		if guestclient.Unreachable(err) {
			err = fmt.Errorf("sandbox %s: %w", id, err)
		}
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return &activeConn{Conn: &bufferedConn{Conn: c, r: br}, a: &e.act}, nil
}

// bufferedConn reads first what the response reader had buffered.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the guest connection, which the guest passes on.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// PreviewDomain is the domain of the preview URLs, without a port.
func (s *Service) PreviewDomain() string { return s.cfg.PreviewDomain() }
