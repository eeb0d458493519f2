package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/server"
	"github.com/agentbox/agentbox/internal/store"
)

// The lists: asked of every available node at once and merged. A node
// that is unavailable, or fails to answer, is left out of the answer and
// named in the PartialHeader, so that a client can tell "no sandbox"
// from "no answer". Each list costs one request per node: fine up to
// about 100 nodes (docs/cluster.md, "Limits").

// PartialHeader, on a merged list, names the nodes (comma-separated ids)
// whose part is missing because they are unavailable or failed to
// answer; absent when every node answered.
const PartialHeader = "Agentbox-Partial"

// maxListBody bounds what the gateway reads of one node's list.
const maxListBody = 64 << 20

// nodeAnswer is one node's answer to a fan-out.
type nodeAnswer struct {
	n      *node
	status int
	body   []byte
	err    error
}

// fanout sends method path?query to every node at once, acting for p,
// and returns the answers of the available ones, in the config's order,
// and the ids of the nodes left out (unavailable, or failed).
func (g *Gateway) fanout(ctx context.Context, p auth.Principal, method, path, query string) (answers []nodeAnswer, missing []string) {
	var wg sync.WaitGroup
	nodes := g.members().nodes
	all := make([]nodeAnswer, len(nodes))
	for i, n := range nodes {
		if !n.isAvailable() {
			all[i] = nodeAnswer{n: n, err: nodeUnavailable(n.id, nil)}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			all[i] = g.ask(ctx, n, p, method, path, query)
		}()
	}
	wg.Wait()
	for _, a := range all {
		if a.err != nil || a.status >= 500 {
			missing = append(missing, a.n.id)
			continue
		}
		answers = append(answers, a)
	}
	return answers, missing
}

// ask sends one request to n acting for p and reads the whole answer.
func (g *Gateway) ask(ctx context.Context, n *node, p auth.Principal, method, path, query string) nodeAnswer {
	req, err := g.nodeRequest(ctx, n, p, method, path, nil)
	if err != nil {
		return nodeAnswer{n: n, err: err}
	}
	req.URL.RawQuery = query
	resp, err := g.client.Do(req)
	if err != nil {
		if connectFailed(err) {
			n.markDown(err)
		}
		return nodeAnswer{n: n, err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListBody))
	if err != nil {
		return nodeAnswer{n: n, err: err}
	}
	return nodeAnswer{n: n, status: resp.StatusCode, body: body}
}

// clientError returns the first 4xx answer as the error to answer (the
// request itself is wrong, and every node says so), or nil.
func clientError(w http.ResponseWriter, answers []nodeAnswer) bool {
	for _, a := range answers {
		if a.status >= 400 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(a.status)
			_, _ = w.Write(a.body)
			return true
		}
	}
	return false
}

func setPartial(w http.ResponseWriter, missing []string) {
	if len(missing) > 0 {
		w.Header().Set(PartialHeader, strings.Join(missing, ","))
	}
}

// listSandboxes serves GET /v1/sandboxes: every node's list, in the
// nodes' own order (created_at, then id). With limit, each node is asked
// for the same page (limit and cursor), the answers are merged, the first
// limit kept, and the cursor of the last one kept is the next page's. A
// cursor is a position in that order, not a row of one node
// (store.Position), so every node reads it: the next page holds, from
// every node, what comes after it.
func (g *Gateway) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			server.WriteError(w, errdefs.Invalid("limit must be a number from 1 to 1000, got %q", v))
			return
		}
		limit = n
	}
	answers, missing := g.fanout(r.Context(), principal(r), "GET", "/v1/sandboxes", r.URL.RawQuery)
	if clientError(w, answers) {
		return
	}
	var all []api.Sandbox
	more := false
	for _, a := range answers {
		var page api.ListSandboxesResponse
		if err := json.Unmarshal(a.body, &page); err != nil {
			missing = append(missing, a.n.id)
			continue
		}
		all = append(all, page.Sandboxes...)
		more = more || page.NextCursor != ""
	}
	sort.Slice(all, func(i, j int) bool { return position(all[i]).Before(position(all[j])) })
	out := api.ListSandboxesResponse{Sandboxes: all}
	if limit > 0 {
		if len(all) > limit {
			out.Sandboxes, more = all[:limit], true
		}
		if more && len(out.Sandboxes) > 0 {
			out.NextCursor = position(out.Sandboxes[len(out.Sandboxes)-1]).Cursor()
		}
	}
	if out.Sandboxes == nil {
		out.Sandboxes = []api.Sandbox{}
	}
	setPartial(w, missing)
	server.WriteJSON(w, http.StatusOK, out)
}

// listPools serves GET /v1/pools: every node's warm pools, each with its
// node.
func (g *Gateway) listPools(w http.ResponseWriter, r *http.Request) {
	answers, missing := g.fanout(r.Context(), principal(r), "GET", "/v1/pools", "")
	if clientError(w, answers) {
		return
	}
	out := api.ListPoolsResponse{Pools: []api.PoolStatus{}}
	for _, a := range answers {
		var page api.ListPoolsResponse
		if err := json.Unmarshal(a.body, &page); err != nil {
			missing = append(missing, a.n.id)
			continue
		}
		for _, p := range page.Pools {
			p.Node = a.n.id
			out.Pools = append(out.Pools, p)
		}
	}
	setPartial(w, missing)
	server.WriteJSON(w, http.StatusOK, out)
}

func position(sb api.Sandbox) store.Position {
	return store.Position{CreatedAt: sb.CreatedAt, ID: sb.ID}
}

// listTemplates serves GET /v1/templates: every node's templates, one
// entry per name (the first node's, in the config's order), with the
// nodes that hold it.
func (g *Gateway) listTemplates(w http.ResponseWriter, r *http.Request) {
	answers, missing := g.fanout(r.Context(), principal(r), "GET", "/v1/templates", "")
	if clientError(w, answers) {
		return
	}
	var out []api.Template
	idx := map[string]int{}
	for _, a := range answers {
		var list api.ListTemplatesResponse
		if err := json.Unmarshal(a.body, &list); err != nil {
			missing = append(missing, a.n.id)
			continue
		}
		for _, t := range list.Templates {
			i, ok := idx[t.Name]
			if !ok {
				idx[t.Name] = len(out)
				t.Nodes = nil
				out = append(out, t)
				i = len(out) - 1
			}
			out[i].Nodes = append(out[i].Nodes, a.n.id)
		}
	}
	slices.SortFunc(out, func(a, b api.Template) int { return strings.Compare(a.Name, b.Name) })
	if out == nil {
		out = []api.Template{}
	}
	setPartial(w, missing)
	server.WriteJSON(w, http.StatusOK, api.ListTemplatesResponse{Templates: out})
}

// getTemplate serves GET /v1/templates/{name}: the first node's answer
// that has it, with the nodes that hold it.
func (g *Gateway) getTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	answers, missing := g.fanout(r.Context(), principal(r), "GET", "/v1/templates/"+url.PathEscape(name), "")
	var out *api.Template
	for _, a := range answers {
		if a.status != http.StatusOK {
			continue
		}
		var t api.Template
		if err := json.Unmarshal(a.body, &t); err != nil {
			continue
		}
		if out == nil {
			out = &t
			out.Nodes = nil
		}
		out.Nodes = append(out.Nodes, a.n.id)
	}
	setPartial(w, missing)
	if out == nil {
		if clientError(w, answers) { // every node's not found, or its refusal
			return
		}
		server.WriteError(w, errdefs.NotFound("template %q not found on any available node", name))
		return
	}
	server.WriteJSON(w, http.StatusOK, out)
}

// listSnapshots serves GET /v1/snapshots: every node's, by creation time.
func (g *Gateway) listSnapshots(w http.ResponseWriter, r *http.Request) {
	answers, missing := g.fanout(r.Context(), principal(r), "GET", "/v1/snapshots", r.URL.RawQuery)
	if clientError(w, answers) {
		return
	}
	out := []api.Snapshot{}
	for _, a := range answers {
		var list api.ListSnapshotsResponse
		if err := json.Unmarshal(a.body, &list); err != nil {
			missing = append(missing, a.n.id)
			continue
		}
		out = append(out, list.Snapshots...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	setPartial(w, missing)
	server.WriteJSON(w, http.StatusOK, api.ListSnapshotsResponse{Snapshots: out})
}

// snapshotByRef serves GET and DELETE /v1/snapshots/{ref} and POST
// /v1/snapshots/{ref}/push. An id names its node; a name is looked up on
// every node, and must be found on one, to which the request goes with
// the snapshot's id in place of the name.
func (g *Gateway) snapshotByRef(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("ref")
	if _, ok := api.NodeOfID(ref); ok {
		n, err := g.nodeOf(ref, "snapshot")
		if err != nil {
			server.WriteError(w, err)
			return
		}
		g.forward(w, r, n)
		return
	}
	snap, n, missing, err := g.findSnapshot(r, ref)
	setPartial(w, missing)
	switch {
	case err != nil:
		server.WriteError(w, err)
	case r.Method == http.MethodGet:
		server.WriteJSON(w, http.StatusOK, snap)
	default:
		r2 := r.Clone(r.Context())
		rest := strings.TrimPrefix(r.URL.Path, "/v1/snapshots/"+ref) // "" or "/push"
		r2.URL.Path, r2.URL.RawPath = "/v1/snapshots/"+snap.ID+rest, ""
		g.forward(w, r2, n)
	}
}

// snapshotNode returns the node that holds snapshot ref (an id or a
// name).
func (g *Gateway) snapshotNode(r *http.Request, ref string) (*node, error) {
	if _, ok := api.NodeOfID(ref); ok {
		return g.nodeOf(ref, "snapshot")
	}
	_, n, _, err := g.findSnapshot(r, ref)
	return n, err
}

// findSnapshot looks snapshot name ref up on every available node: it
// must be on exactly one.
func (g *Gateway) findSnapshot(r *http.Request, ref string) (*api.Snapshot, *node, []string, error) {
	answers, missing := g.fanout(r.Context(), principal(r), "GET", "/v1/snapshots/"+url.PathEscape(ref), "")
	var found []api.Snapshot
	var at []*node
	for _, a := range answers {
		var s api.Snapshot
		if a.status == http.StatusOK && json.Unmarshal(a.body, &s) == nil {
			found, at = append(found, s), append(at, a.n)
		}
	}
	switch {
	case len(found) > 1:
		var ids []string
		for _, s := range found {
			ids = append(ids, s.ID)
		}
		return nil, nil, missing, errdefs.Precondition("snapshot name %q is on several nodes (%s): use its id", ref, strings.Join(ids, ", "))
	case len(found) == 0 && len(missing) > 0:
		return nil, nil, missing, errdefs.New(errdefs.ErrNodeUnavailable, "snapshot %q not found on the available nodes; nodes %s did not answer", ref, strings.Join(missing, ", "))
	case len(found) == 0:
		return nil, nil, missing, errdefs.NotFound("snapshot %q not found", ref)
	}
	return &found[0], at[0], missing, nil
}
