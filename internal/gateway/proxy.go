package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/server"
)

// How a request reaches its node: httputil.ReverseProxy, flushing every
// write at once (NDJSON exec output, tar streams, server-sent events) and
// passing WebSocket upgrades through (PTY, exec, desktop). The client's
// Authorization never reaches a node: the gateway's key does, with the
// principal in the headers of internal/auth/gateway.go.

type proxyKey struct{}

// how says, in a forwarded request's context, how it goes to the node.
type how struct {
	// as is the principal the request acts for at the node; nil: the
	// request goes with the credentials it came with (a preview's token).
	as *auth.Principal
	// keepHost keeps the client's Host (a preview host, which the node
	// routes by); otherwise the node's own.
	keepHost bool
}

// newProxy returns n's reverse proxy.
func (g *Gateway) newProxy(n *node) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			h, _ := pr.In.Context().Value(proxyKey{}).(how)
			pr.SetURL(n.base)
			if h.keepHost {
				pr.Out.Host = pr.In.Host
			}
			pr.Out.Header.Del(auth.TenantHeader)
			pr.Out.Header.Del(auth.AdminHeader)
			if h.as != nil {
				g.actAs(pr.Out.Header, *h.as)
			}
			pr.SetXForwarded()
		},
		Transport:     g.rt,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			// The node answers the id the gateway sent it, which the
			// gateway's response carries already.
			if resp.Request.Header.Get(metrics.RequestIDHeader) != "" {
				resp.Header.Del(metrics.RequestIDHeader)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return // the client went away
			}
			if connectFailed(err) {
				n.markDown(err)
				g.log.Warn("fleet node unreachable; marked unavailable", "node", n.id, "err", err)
			}
			server.WriteError(w, nodeUnavailable(n.id, err))
		},
	}
}

// connectFailed reports whether err is a failure to reach the node at all
// (so the request did not reach it), not a failure mid-answer.
func connectFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// nodeUnavailable is the 503 node_unavailable for node id.
func nodeUnavailable(id string, err error) error {
	if err != nil {
		return errdefs.New(errdefs.ErrNodeUnavailable, "fleet node %s does not answer: %v; its sandboxes are out of reach until it is back (GET /v1/fleet/nodes)", id, err)
	}
	return errdefs.New(errdefs.ErrNodeUnavailable, "fleet node %s is unavailable; its sandboxes are out of reach until it is back (GET /v1/fleet/nodes)", id)
}

// nodeOf returns the node of sandbox or snapshot id: not found for an id
// that names no node of this fleet, node_unavailable for a node that is
// down.
func (g *Gateway) nodeOf(id, what string) (*node, error) {
	nid, ok := api.NodeOfID(id)
	if !ok {
		return nil, errdefs.NotFound("%s %s not found: the ids of a fleet are 15 characters, a node's node_id and 12 more (an id of 12 was made by a daemon without node_id: call that daemon directly)", what, id)
	}
	n := g.members().byID[nid]
	if n == nil {
		return nil, errdefs.NotFound("%s %s not found: its node %s is not in this gateway's fleet (GET /v1/fleet/nodes lists them)", what, id, nid)
	}
	if !n.isAvailable() {
		return nil, nodeUnavailable(nid, nil)
	}
	return n, nil
}

// forward sends r to n acting for the request's principal.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, n *node) {
	p := principal(r)
	n.serve(w, r, how{as: &p})
}

// serve proxies r to n. Full duplex: an exec stream's stdin keeps coming
// while its output flows back, and without it Go's HTTP/1 server, once
// the node's response headers are written, reads what is left of the
// request body itself (to keep the connection) and drops it: a race
// with the proxy's copy of that body, which lost a stream's stdin and
// cut it off ("the exec stream ended before the command's exit") when
// the node answered before the client's stdin had passed.
// TestStreamFullDuplex holds this.
func (n *node) serve(w http.ResponseWriter, r *http.Request, h how) {
	_ = http.NewResponseController(w).EnableFullDuplex()
	n.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), proxyKey{}, h)))
}

// forwardSandbox serves /v1/sandboxes/{id} and everything under it.
func (g *Gateway) forwardSandbox(w http.ResponseWriter, r *http.Request) {
	n, err := g.nodeOf(r.PathValue("id"), "sandbox")
	if err != nil {
		server.WriteError(w, err)
		return
	}
	g.forward(w, r, n)
}

// servePreview routes a preview request to the sandbox's node. One with
// an API key is authenticated here and goes on as the gateway acting for
// that key's principal (the node checks that it owns the sandbox); one
// without goes as it came, token and all, for the node to check.
func (g *Gateway) servePreview(w http.ResponseWriter, r *http.Request, id string) {
	n, err := g.nodeOf(id, "sandbox")
	if err != nil {
		server.WriteError(w, err)
		return
	}
	h := how{keepHost: true}
	ar := r
	if tok := r.Header.Get(server.E2BTrafficTokenHeader); tok != "" && r.Header.Get("Authorization") == "" {
		// E2B's trafficAccessToken is the caller's key of this gateway
		// (sbx.getHost, docs/e2b.md): checked here, as Authorization is,
		// and never sent on (the node would take it for its own key).
		ar = r.Clone(r.Context())
		ar.Header.Set("Authorization", "Bearer "+tok)
		r.Header.Del(server.E2BTrafficTokenHeader)
	}
	if ar.Header.Get("Authorization") != "" {
		p, err := g.o.Auth.Authenticate(r.Context(), ar)
		if err != nil {
			server.WriteError(w, err)
			return
		}
		h.as = &p
	}
	n.serve(w, r, h)
}
