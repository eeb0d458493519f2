package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/auth"
)

// Templates and snapshots between nodes, through the fleet's registry
// (fleet.registry, docs/cluster.md): the gateway asks a node that has a
// template or snapshot to push it, and the node that needs it to pull
// it, with the nodes' own push and pull routes. A spread fork's snapshot
// is streamed instead (streamSnapshot: one node's export piped into the
// other's import through the gateway, no registry), then pushed in the
// background for durability.
//
//   - A template is pushed from a node that holds it as
//     REGISTRY/templates/NAME:NODE-VERSION (the node's own version
//     number: two nodes' version 3 need not hold the same files) and
//     pulled by digest. Which (node, name, version) the gateway has pushed
//     is kept in memory: a gateway restarted pushes again, which costs
//     the packing but uploads nothing the registry has.
//   - A snapshot is pushed as REGISTRY/snapshots/ID:t-TENANT: its id is
//     unique in the fleet, and the tag names the tenant, so that a
//     tenant can pull only its own when the snapshot's node is down and
//     cannot be asked. Nothing is kept for it at the gateway: a create
//     from a snapshot whose node is down pulls that tag.
//   - Every pull onto a node is single-flight per (node, what): N creates
//     that need the same template on the same node wait for one pull.

// pullTimeout bounds one push or pull the gateway asks of a node.
const pullTimeout = 10 * time.Minute

// flights runs one call per key at a time; callers of a key that is
// running wait for its result.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done chan struct{}
	val  string
	err  error
}

// do runs fn for key unless a call for key is running, in which case it
// waits for that call's result.
func (f *flights) do(key string, fn func() (string, error)) (string, error) {
	f.mu.Lock()
	if f.m == nil {
		f.m = map[string]*flight{}
	}
	if c, ok := f.m[key]; ok {
		f.mu.Unlock()
		<-c.done
		return c.val, c.err
	}
	c := &flight{done: make(chan struct{})}
	f.m[key] = c
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.m, key)
		f.mu.Unlock()
		close(c.done)
	}()
	c.val, c.err = fn()
	return c.val, c.err
}

// wait waits for the call of key that is running, if one is, and returns
// its result; ok is false when none is running.
func (f *flights) wait(key string) (val string, err error, ok bool) {
	f.mu.Lock()
	c, ok := f.m[key]
	f.mu.Unlock()
	if !ok {
		return "", nil, false
	}
	<-c.done
	return c.val, c.err, true
}

// moves is the gateway's state for moving things between nodes.
type moves struct {
	flights flights
	mu      sync.Mutex
	// pushed: "NODE/NAME/VERSION" -> the manifest digest of a template
	// version the gateway had NODE push.
	pushed map[string]string
	// pulled: "NODE/SNAPSHOT-ID/TENANT" -> the id of the copy pulled (or
	// streamed) onto NODE.
	pulled map[string]string
	// snapPushed: "SNAPSHOT-ID/TENANT" -> the manifest digest of a
	// snapshot pushed to the fleet registry.
	snapPushed map[string]string
}

func (m *moves) get(tbl map[string]string, key string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := tbl[key]
	return v, ok
}

func (m *moves) set(tbl *map[string]string, key, v string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if *tbl == nil {
		*tbl = map[string]string{}
	}
	if v == "" {
		delete(*tbl, key)
		return
	}
	(*tbl)[key] = v
}

// adminFor is the principal of a push or pull done for p: an admin's
// rights (a node lets only the admin use a registry not in its
// tenant_registries) in p's tenant, which owns what is pulled.
func adminFor(p auth.Principal) auth.Principal {
	return auth.Principal{Tenant: p.Tenant, Admin: true, KeyID: auth.GatewayKeyID}
}

// asAdmin is the principal of the gateway's own calls.
var asAdmin = auth.Principal{Tenant: auth.AdminTenant, Admin: true, KeyID: auth.GatewayKeyID}

// actAs makes h a header of the gateway's request to a node acting for
// p: the fleet key as its bearer key, and p in the headers
// auth.GatewayPrincipal reads.
func (g *Gateway) actAs(h http.Header, p auth.Principal) {
	h.Set("Authorization", "Bearer "+g.o.Key)
	auth.SetGatewayHeaders(h, p)
}

// nodeRequest returns a request for path (with its query after a "?")
// on n acting for p (actAs).
func (g *Gateway) nodeRequest(ctx context.Context, n *node, p auth.Principal, method, path string, body io.Reader) (*http.Request, error) {
	path, query, _ := strings.Cut(path, "?")
	u := n.base.JoinPath(path)
	u.RawQuery = query
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	g.actAs(req.Header, p)
	return req, nil
}

// call sends a JSON request to n acting for p and decodes a 2xx answer
// into out; another answer is the node's error, with its code.
func (g *Gateway) call(ctx context.Context, n *node, p auth.Principal, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := g.nodeRequest(ctx, n, p, method, path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return g.roundTrip(n, req, out)
}

// roundTrip sends req to n and decodes a 2xx answer into out; another
// answer is the node's error, with its code.
func (g *Gateway) roundTrip(n *node, req *http.Request, out any) error {
	method, path := req.Method, req.URL.Path
	resp, err := g.client.Do(req)
	if err != nil {
		if connectFailed(err) {
			n.markDown(err)
		}
		return nodeUnavailable(n.id, err)
	}
	defer resp.Body.Close()
	return answer(n, method, path, resp, out)
}

// answer decodes node n's answer resp to method path into out (a 2xx
// one), or returns the node's error, with its code.
func answer(n *node, method, path string, resp *http.Response, out any) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxListBody))
	if err != nil {
		return nodeUnavailable(n.id, err)
	}
	if resp.StatusCode >= 300 {
		var e api.ErrorBody
		if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
			return errdefs.FromCode(e.Error.Code, "node "+n.id+": "+e.Error.Message)
		}
		return errdefs.Unavailable("node %s answered %s %s with %s: %s", n.id, method, path, resp.Status, errorMessage(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return errdefs.Unavailable("node %s: the answer to %s %s is not valid: %v", n.id, method, path, err)
		}
	}
	return nil
}

// hasTemplate reports whether n's last status lists template name.
func (n *node) hasTemplate(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.status != nil && slices.Contains(n.status.Templates, name)
}

// addTemplate notes that n has template name now (until its next poll
// says so itself).
func (n *node) addTemplate(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.status == nil || slices.Contains(n.status.Templates, name) {
		return
	}
	st := *n.status
	st.Templates = append(slices.Clone(st.Templates), name)
	n.status = &st
}

// repo is the fleet registry's repository for kind ("templates",
// "snapshots") and name.
func (g *Gateway) repo(kind, name string) string {
	return strings.TrimSuffix(g.o.Registry, "/") + "/" + kind + "/" + name
}

// snapshotRef is where snapshot id is pushed for tenant.
func (g *Gateway) snapshotRef(id, tenant string) string {
	return g.repo("snapshots", id) + ":t-" + tenant
}

// ensureTemplate makes template name ready on n for p: from the
// cluster's catalog when it names the template; else when the fleet
// has a registry, n lacks it and another available node has it, that
// node pushes it (once per version) and n pulls it (once, however many
// creates wait). Otherwise it does nothing and n answers for itself.
func (g *Gateway) ensureTemplate(ctx context.Context, n *node, p auth.Principal, name string) error {
	if name == "" || n.hasTemplate(name) {
		return nil
	}
	if ok, err := g.pullFromCatalog(ctx, n, name); ok { // catalog.go
		return err
	}
	if g.o.Registry == "" {
		return nil
	}
	var holder *node
	for _, h := range g.available() {
		if h != n && h.hasTemplate(name) {
			holder = h
			break
		}
	}
	if holder == nil {
		return nil
	}
	_, err := g.mv.flights.do("tpl/"+n.id+"/"+p.Tenant+"/"+name, func() (string, error) {
		if n.hasTemplate(name) {
			return "", nil
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pullTimeout)
		defer cancel()
		var t api.Template
		if err := g.call(ctx, holder, p, "GET", "/v1/templates/"+url.PathEscape(name), nil, &t); err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return "", nil // not the caller's to use: n says so
			}
			return "", err
		}
		digest, err := g.pushTemplate(ctx, holder, t)
		if err != nil {
			return "", err
		}
		// The copy belongs to the template's owner, as on its node: the
		// admin pulls a public one; a tenant's own is pulled as that
		// tenant (the node must list the registry in tenant_registries).
		owner := asAdmin
		if t.Tenant != "" {
			owner = auth.Principal{Tenant: t.Tenant, KeyID: auth.GatewayKeyID}
		}
		start := time.Now()
		ref := g.repo("templates", name) + "@" + digest
		if err := g.call(ctx, n, owner, "POST", "/v1/templates/pull", api.PullRequest{Ref: ref, Name: name}, nil); err != nil {
			return "", fmt.Errorf("pulling template %s onto node %s from the fleet registry (%s): %w", name, n.id, ref, err)
		}
		n.addTemplate(name)
		g.log.Info("template pulled on first use", "template", name, "node", n.id, "from", holder.id, "ref", ref, "took", time.Since(start).Round(time.Millisecond))
		return "", nil
	})
	return err
}

// pushTemplate has holder push template t (its newest version) to the
// fleet registry, once per (node, name, version), and returns the
// manifest digest.
func (g *Gateway) pushTemplate(ctx context.Context, holder *node, t api.Template) (string, error) {
	key := holder.id + "/" + t.Name + "/" + t.Version
	if d, ok := g.mv.get(g.mv.pushed, key); ok {
		return d, nil
	}
	return g.mv.flights.do("push/"+key, func() (string, error) {
		if d, ok := g.mv.get(g.mv.pushed, key); ok {
			return d, nil
		}
		var out api.PushResponse
		ref := g.repo("templates", t.Name) + ":" + holder.id + "-" + t.Version
		if err := g.call(ctx, holder, asAdmin, "POST", "/v1/templates/"+url.PathEscape(t.Name)+"/push", api.PushRequest{Ref: ref}, &out); err != nil {
			return "", fmt.Errorf("pushing template %s from node %s to the fleet registry (%s): %w", t.Name, holder.id, ref, err)
		}
		g.mv.set(&g.mv.pushed, key, out.Digest)
		return out.Digest, nil
	})
}

// pushSnapshot has src push snapshot id (which p may see) to the fleet
// registry for p's tenant, and returns the manifest digest: once per
// (snapshot, tenant) while the gateway runs (a push running, such as a
// spread fork's in the background, is waited for; one that gives way to
// a fork meanwhile is made again at once for this caller).
func (g *Gateway) pushSnapshot(ctx context.Context, src *node, p auth.Principal, id string) (string, error) {
	for {
		d, err := g.pushSnapshotOnce(ctx, src, p, id)
		if err == nil || !gaveWay(err) || ctx.Err() != nil || gaveWay(context.Cause(ctx)) {
			return d, err
		}
	}
}

// pushSnapshotOnce is pushSnapshot's one try: a push running for another
// caller is waited for, and its error (errGaveWay too) is this one's.
func (g *Gateway) pushSnapshotOnce(ctx context.Context, src *node, p auth.Principal, id string) (string, error) {
	key := id + "/" + p.Tenant
	if d, ok := g.mv.get(g.mv.snapPushed, key); ok {
		return d, nil
	}
	return g.mv.flights.do(snapPushKey(id, p.Tenant), func() (string, error) {
		if d, ok := g.mv.get(g.mv.snapPushed, key); ok {
			return d, nil
		}
		var out api.PushResponse
		ref := g.snapshotRef(id, p.Tenant)
		start := time.Now()
		if err := g.call(ctx, src, adminFor(p), "POST", "/v1/snapshots/"+url.PathEscape(id)+"/push", api.PushRequest{Ref: ref}, &out); err != nil {
			if cause := context.Cause(ctx); gaveWay(cause) {
				return "", fmt.Errorf("pushing snapshot %s from node %s: %w", id, src.id, cause)
			}
			return "", fmt.Errorf("pushing snapshot %s from node %s to the fleet registry (%s): %w", id, src.id, ref, err)
		}
		g.mv.set(&g.mv.snapPushed, key, out.Digest)
		g.log.Info("snapshot pushed", "snapshot", id, "node", src.id, "ref", ref, "took", time.Since(start).Round(time.Millisecond))
		return out.Digest, nil
	})
}

func snapPushKey(id, tenant string) string { return "snappush/" + id + "/" + tenant }

// pushLater queues the push of spread fork snapshot id of src to the
// fleet registry (pushq.go: one at a time, giving way to spread forks),
// then releases the snapshot on src (releaseSnapshot: it goes with the
// last child there, at once if none). A push that fails is logged and
// the snapshot stays on src, where a restore elsewhere pushes it again;
// one the node refuses to push (412: it cannot leave the node) is
// released. Without a registry the snapshot is released at once.
func (g *Gateway) pushLater(src *node, p auth.Principal, id string) {
	if g.o.Registry == "" {
		go g.releaseSnapshot(src, p, id)
		return
	}
	queued := time.Now()
	g.pushes.add(func(ctx context.Context, yields int) error {
		ctx, cancel := context.WithTimeout(ctx, pullTimeout)
		defer cancel()
		if _, err := g.pushSnapshotOnce(ctx, src, p, id); err != nil {
			if gaveWay(err) {
				return err // queued again
			}
			if errors.Is(err, errdefs.ErrFailedPrecondition) { // it cannot leave its node (a microvm memory snapshot)
				g.log.Info("spread fork: the snapshot cannot go to the fleet registry; released", "snapshot", id, "node", src.id, "err", err)
				g.releaseSnapshot(src, p, id)
				return nil
			}
			g.log.Warn("spread fork: pushing the snapshot to the fleet registry in the background failed; it stays on its node, and a restore elsewhere pushes it then", "snapshot", id, "node", src.id, "err", err)
			return nil
		}
		g.log.Info("spread fork: snapshot pushed in the background", "snapshot", id, "node", src.id, "since_fork", time.Since(queued).Round(time.Millisecond), "gave_way", yields)
		g.releaseSnapshot(src, p, id)
		return nil
	})
}

// releaseSnapshot asks n to remove snapshot id once nothing stacks on it
// (DELETE /v1/snapshots/{id}?when_unused=true: at once when no sandbox
// or snapshot does, otherwise with the last of them); a failure is
// logged.
func (g *Gateway) releaseSnapshot(n *node, p auth.Principal, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := g.call(ctx, n, adminFor(p), "DELETE", "/v1/snapshots/"+url.PathEscape(id)+"?when_unused=true", nil, nil)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		g.log.Warn("releasing a spread fork's snapshot failed; it stays on its node until removed (DELETE /v1/snapshots/ID)", "snapshot", id, "node", n.id, "err", err)
	}
}

// streamSnapshot makes a copy of snapshot id (which p may see) of src on
// n without a registry: src's GET /v1/snapshots/{id}/export is piped
// into n's POST /v1/snapshots/import, through the gateway, uncompressed;
// once per (node, snapshot, tenant), as pullSnapshot. It returns the
// copy's id on n.
func (g *Gateway) streamSnapshot(ctx context.Context, src, n *node, p auth.Principal, id string) (string, error) {
	key := n.id + "/" + id + "/" + p.Tenant
	if v, ok := g.mv.get(g.mv.pulled, key); ok {
		return v, nil
	}
	return g.mv.flights.do("snap/"+key, func() (string, error) {
		if v, ok := g.mv.get(g.mv.pulled, key); ok {
			return v, nil
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pullTimeout)
		defer cancel()
		start := time.Now()
		path := "/v1/snapshots/" + url.PathEscape(id) + "/export"
		req, err := g.nodeRequest(ctx, src, adminFor(p), "GET", path, nil)
		if err != nil {
			return "", err
		}
		resp, err := g.client.Do(req)
		if err != nil {
			if connectFailed(err) {
				src.markDown(err)
			}
			return "", fmt.Errorf("exporting snapshot %s from node %s: %w", id, src.id, nodeUnavailable(src.id, err))
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err := answer(src, "GET", path, resp, nil)
			if err == nil {
				err = errdefs.Unavailable("node %s answered GET %s with %s", src.id, path, resp.Status)
			}
			return "", fmt.Errorf("exporting snapshot %s from node %s: %w", id, src.id, err)
		}
		imp, err := g.nodeRequest(ctx, n, adminFor(p), "POST", "/v1/snapshots/import", resp.Body)
		if err != nil {
			return "", err
		}
		imp.ContentLength = -1
		imp.Header.Set("Content-Type", resp.Header.Get("Content-Type"))
		var s api.Snapshot
		if err := g.roundTrip(n, imp, &s); err != nil {
			return "", fmt.Errorf("streaming snapshot %s from node %s to node %s: %w", id, src.id, n.id, err)
		}
		g.mv.set(&g.mv.pulled, key, s.ID)
		g.log.Info("snapshot streamed", "snapshot", id, "from", src.id, "node", n.id, "copy", s.ID, "took", time.Since(start).Round(time.Millisecond))
		return s.ID, nil
	})
}

// pullSnapshot makes a copy of snapshot id, pushed for p's tenant (at
// digest when known, else its tag), on n, once per (node, snapshot,
// tenant), and returns the copy's id on n.
func (g *Gateway) pullSnapshot(ctx context.Context, n *node, p auth.Principal, id, digest string) (string, error) {
	key := n.id + "/" + id + "/" + p.Tenant
	if v, ok := g.mv.get(g.mv.pulled, key); ok {
		return v, nil
	}
	return g.mv.flights.do("snap/"+key, func() (string, error) {
		if v, ok := g.mv.get(g.mv.pulled, key); ok {
			return v, nil
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pullTimeout)
		defer cancel()
		if digest == "" {
			// A push of it running (a spread fork's, in the background):
			// its digest, once done.
			if d, err, ok := g.mv.flights.wait(snapPushKey(id, p.Tenant)); ok && err == nil {
				digest = d
			} else if d, ok := g.mv.get(g.mv.snapPushed, id+"/"+p.Tenant); ok {
				digest = d
			}
		}
		ref := g.snapshotRef(id, p.Tenant)
		if digest != "" {
			ref = g.repo("snapshots", id) + "@" + digest
		}
		start := time.Now()
		var s api.Snapshot
		if err := g.call(ctx, n, adminFor(p), "POST", "/v1/snapshots/pull", api.PullRequest{Ref: ref}, &s); err != nil {
			return "", fmt.Errorf("pulling snapshot %s onto node %s from the fleet registry (%s): %w", id, n.id, ref, err)
		}
		g.mv.set(&g.mv.pulled, key, s.ID)
		g.log.Info("snapshot pulled", "snapshot", id, "node", n.id, "copy", s.ID, "took", time.Since(start).Round(time.Millisecond))
		return s.ID, nil
	})
}
