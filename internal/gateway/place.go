package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/server"
)

// Placement of a create (POST /v1/sandboxes), best of K as E2B's API
// places sandboxes on its orchestrators:
//
//  1. The candidates are the available nodes whose last status offers the
//     requested isolation tier (or, for a request that names none, whose
//     default tier is available).
//  2. If any candidate lists the requested template as ready, only those
//     are kept (no pull, no build on first use).
//  3. K (fleet.candidates) of them are sampled at random, and the one with
//     the highest score wins, ties broken at random:
//
//     score = memory_available_mb / (1 + sandboxes + in_flight + placed)
//
//     sandboxes is the node's running sandboxes at its last poll,
//     in_flight the creates this gateway has sent it that have not
//     answered, placed the creates it answered since that poll (which
//     the next poll counts in sandboxes). Free memory per sandbox spreads
//     creates over equal nodes and fills a bigger node more.
//  4. A create from a snapshot goes to the node that holds the snapshot
//     (its id names it; a name is looked up on every node), with no
//     retry: no other node has it yet.
//  5. A node that answers 503 or 429 (full, or its quota) or that cannot
//     be reached is skipped and the next best candidate tried, at most
//     maxRetries times; the body is kept for that (MaxBodyBytes). The
//     client gets the answer of the last node tried.

// maxRetries is how many more nodes a create tries after the first.
const maxRetries = 2

// createFields are what placement reads of a create request.
type createFields struct {
	Template  string `json:"template"`
	Isolation string `json:"isolation"`
	Snapshot  string `json:"snapshot"`
	Node      string `json:"node"`
}

func (g *Gateway) create(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, g.o.MaxBodyBytes)
	if err != nil {
		server.WriteError(w, err)
		return
	}
	var f createFields
	_ = json.Unmarshal(body, &f) // a bad body is the node's to refuse
	template, _, _ := strings.Cut(f.Template, "@")
	p := principal(r)
	var only *node // the node the request names
	if f.Node != "" {
		if only = g.members().byID[f.Node]; only == nil {
			server.WriteError(w, errdefs.Invalid("node %q is not in this gateway's fleet; GET /v1/fleet/nodes lists them", f.Node))
			return
		}
		if !only.isAvailable() {
			server.WriteError(w, nodeUnavailable(only.id, nil))
			return
		}
	}
	if f.Snapshot != "" {
		g.createFromSnapshot(w, r, p, body, f, only)
		return
	}
	tried := map[*node]bool{}
	var lastErr error
	for attempt := 0; attempt <= maxRetries; attempt++ {
		n := only
		if n == nil {
			n = g.place(f.Isolation, template, tried)
		} else if attempt > 0 {
			break
		}
		if n == nil {
			break
		}
		tried[n] = true
		if err := g.ensureTemplate(r.Context(), n, p, template); err != nil {
			g.log.Warn("pulling a template on first use failed; trying another node", "node", n.id, "template", template, "err", err)
			lastErr = err
			if r.Context().Err() != nil {
				return
			}
			continue
		}
		resp, err := g.send(r, n, p, body)
		if err != nil {
			if connectFailed(err) {
				n.markDown(err)
				g.log.Warn("fleet node unreachable; marked unavailable", "node", n.id, "err", err)
			}
			lastErr = nodeUnavailable(n.id, err)
			if r.Context().Err() != nil {
				return
			}
			continue
		}
		retry := (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests) && attempt < maxRetries && only == nil
		if retry && g.place(f.Isolation, template, tried) != nil {
			resp.Body.Close()
			g.log.Info("fleet node refused a create; trying another", "node", n.id, "status", resp.StatusCode)
			continue
		}
		relay(w, resp)
		return
	}
	if lastErr == nil && f.Isolation != "" {
		// A tier no node knows is the request's error, as on one node.
		tiers, _ := g.fleetTiers()
		var names []string
		for _, t := range tiers {
			names = append(names, t.Name)
		}
		if len(names) > 0 && !slices.Contains(names, f.Isolation) {
			lastErr = errdefs.Invalid("unknown isolation tier %q; the fleet's nodes know %s", f.Isolation, strings.Join(names, ", "))
		}
	}
	if lastErr == nil {
		tier := f.Isolation
		if tier == "" {
			tier = "the default tier"
		}
		lastErr = errdefs.New(errdefs.ErrNodeUnavailable, "no available fleet node offers %s; see GET /v1/fleet/nodes", tier)
	}
	server.WriteError(w, lastErr)
}

// readBody reads r's body, at most max bytes.
func readBody(r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, errdefs.Invalid("request body of %d bytes is larger than %d bytes", r.ContentLength, max)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, errdefs.Invalid("reading request body: %v", err)
	}
	if int64(len(body)) > max {
		return nil, errdefs.Invalid("request body is larger than %d bytes", max)
	}
	return body, nil
}

// createFromSnapshot places a create from snapshot f.Snapshot: on the
// snapshot's node when it is available (and the request names no other);
// otherwise, with a registry, on another node that pulls the snapshot
// from the fleet's registry first ("restore elsewhere": the snapshot's
// node pushes it when it is up; when it is down the snapshot must have
// been pushed before, by a spread fork or an earlier restore).
func (g *Gateway) createFromSnapshot(w http.ResponseWriter, r *http.Request, p auth.Principal, body []byte, f createFields, only *node) {
	var src *node
	var srcErr error
	id := f.Snapshot
	if _, ok := api.NodeOfID(id); ok {
		src, srcErr = g.nodeOf(id, "snapshot")
		if srcErr != nil && !errors.Is(srcErr, errdefs.ErrNodeUnavailable) {
			server.WriteError(w, srcErr)
			return
		}
	} else {
		// A name is known only to its node: it must answer.
		snap, n, _, err := g.findSnapshot(r, id)
		if err != nil {
			if g.o.Registry != "" && errors.Is(err, errdefs.ErrNodeUnavailable) {
				err = fmt.Errorf("%w (a create elsewhere needs the snapshot's id: a name is known to its node only)", err)
			}
			server.WriteError(w, err)
			return
		}
		src, id = n, snap.ID
	}
	if srcErr == nil && (only == nil || only == src) {
		resp, err := g.send(r, src, p, body)
		if err != nil {
			if connectFailed(err) {
				src.markDown(err)
			}
			server.WriteError(w, nodeUnavailable(src.id, err))
			return
		}
		relay(w, resp)
		return
	}
	if g.o.Registry == "" {
		if srcErr != nil {
			server.WriteError(w, srcErr)
		} else {
			server.WriteError(w, errdefs.Precondition("snapshot %s is on node %s, not %s: a create elsewhere needs the fleet's registry (fleet.registry, docs/cluster.md)", id, src.id, only.id))
		}
		return
	}
	var snap api.Snapshot
	if srcErr == nil {
		// The snapshot's node is up: p must see the snapshot there, and
		// that node pushes it once the target has its template.
		if err := g.call(r.Context(), src, p, "GET", "/v1/snapshots/"+id, nil, &snap); err != nil {
			server.WriteError(w, err)
			return
		}
	}
	digest := ""
	tried := map[*node]bool{}
	if src != nil {
		tried[src] = true
	}
	var lastErr error
	for attempt := 0; attempt <= maxRetries; attempt++ {
		n := only
		if n == nil {
			n = g.place(f.Isolation, "", tried)
		} else if attempt > 0 {
			break
		}
		if n == nil {
			break
		}
		tried[n] = true
		if srcErr == nil && digest == "" {
			if err := g.ensureTemplate(r.Context(), n, p, snap.Template); err != nil {
				lastErr = err
				continue
			}
			d, err := g.pushSnapshot(r.Context(), src, p, id)
			if err != nil {
				server.WriteError(w, err)
				return
			}
			digest = d
		}
		local, err := g.pullSnapshot(r.Context(), n, p, id, digest)
		if err != nil {
			lastErr = err
			if errors.Is(err, errdefs.ErrNotFound) && srcErr != nil {
				nid, _ := api.NodeOfID(id)
				lastErr = errdefs.New(errdefs.ErrNodeUnavailable, "snapshot %s: its node %s is unavailable and the snapshot was never pushed to the fleet's registry (%s); it is out of reach until the node is back", id, nid, g.snapshotRef(id, p.Tenant))
				break
			}
			g.log.Warn("pulling a snapshot failed; trying another node", "snapshot", id, "node", n.id, "err", err)
			continue
		}
		nb, err := withFields(body, map[string]any{"snapshot": local, "node": n.id})
		if err != nil {
			server.WriteError(w, errdefs.Invalid("the request body is not a JSON object: %v", err))
			return
		}
		resp, err := g.send(r, n, p, nb)
		if err != nil {
			lastErr = nodeUnavailable(n.id, err)
			continue
		}
		if resp.StatusCode == http.StatusNotFound {
			g.mv.set(&g.mv.pulled, n.id+"/"+id+"/"+p.Tenant, "") // the copy is gone: the next create pulls again
		}
		relay(w, resp)
		return
	}
	if lastErr == nil {
		lastErr = errdefs.New(errdefs.ErrNodeUnavailable, "no available fleet node to create from snapshot %s on; see GET /v1/fleet/nodes", id)
	}
	server.WriteError(w, lastErr)
}

// withFields returns the JSON object body with fields set.
func withFields(body []byte, fields map[string]any) ([]byte, error) {
	m := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, err
		}
	}
	for k, v := range fields {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		m[k] = b
	}
	return json.Marshal(m)
}

// send POSTs a create to n, counting it in flight, and on a 2xx counts it
// placed.
func (g *Gateway) send(r *http.Request, n *node, p auth.Principal, body []byte) (*http.Response, error) {
	out, err := g.nodeRequest(r.Context(), n, p, r.Method, r.URL.Path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	out.URL.RawQuery = r.URL.RawQuery
	for k, vs := range r.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Authorization", "Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
			"Proxy-Authorization", "Content-Length", http.CanonicalHeaderKey(auth.TenantHeader), http.CanonicalHeaderKey(auth.AdminHeader):
			continue
		}
		out.Header[k] = slices.Clone(vs)
	}
	out.ContentLength = int64(len(body))
	n.mu.Lock()
	n.inFlight++
	n.mu.Unlock()
	resp, err := g.rt.RoundTrip(out)
	n.mu.Lock()
	n.inFlight--
	if err == nil && resp.StatusCode < 300 {
		n.placed++
	}
	n.mu.Unlock()
	return resp, err
}

// relay writes a node's answer to the client.
func relay(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		switch k {
		case "Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "X-Request-Id":
			continue
		}
		w.Header()[k] = vs
	}
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// place picks the node for a create of template on tier ("": the nodes'
// default), skipping the nodes in skip; nil when none is left.
func (g *Gateway) place(tier, template string, skip map[*node]bool) *node {
	return g.placeLoad(tier, template, skip, nil)
}

// placeLoad is place, with extra[n] more sandboxes counted on node n.
func (g *Gateway) placeLoad(tier, template string, skip map[*node]bool, extra map[*node]int) *node {
	type cand struct {
		n     *node
		score float64
		has   bool
	}
	var cands []cand
	anyHas := false
	for _, n := range g.members().nodes {
		if skip[n] {
			continue
		}
		n.mu.Lock()
		st, ok := n.status, n.available && n.down == ""
		load := 1 + n.inFlight + n.placed + extra[n]
		n.mu.Unlock()
		if !ok || st == nil || st.Draining || !offers(st.Tiers, tier) {
			continue
		}
		has := template != "" && slices.Contains(st.Templates, template)
		anyHas = anyHas || has
		cands = append(cands, cand{n: n, has: has, score: float64(st.MemoryAvailableMB) / float64(load+st.Sandboxes)})
	}
	if anyHas {
		cands = slices.DeleteFunc(cands, func(c cand) bool { return !c.has })
	}
	if len(cands) == 0 {
		return nil
	}
	// Sample K: a partial Fisher-Yates shuffle.
	k := min(g.o.Candidates, len(cands))
	for i := 0; i < k; i++ {
		j := i + rand.IntN(len(cands)-i)
		cands[i], cands[j] = cands[j], cands[i]
	}
	best := cands[0]
	for _, c := range cands[1:k] {
		if c.score > best.score {
			best = c
		}
	}
	return best.n
}

// offers reports whether tiers has tier available ("": the default one).
func offers(tiers []api.Tier, tier string) bool {
	for _, t := range tiers {
		if t.Available && (t.Name == tier || tier == "" && t.Default) {
			return true
		}
	}
	return false
}
