package gateway

import (
	"bytes"
	"encoding/json"
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
}

func (g *Gateway) create(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > g.o.MaxBodyBytes {
		server.WriteError(w, errdefs.Invalid("request body of %d bytes is larger than %d bytes", r.ContentLength, g.o.MaxBodyBytes))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, g.o.MaxBodyBytes+1))
	if err != nil {
		server.WriteError(w, errdefs.Invalid("reading request body: %v", err))
		return
	}
	if int64(len(body)) > g.o.MaxBodyBytes {
		server.WriteError(w, errdefs.Invalid("request body is larger than %d bytes", g.o.MaxBodyBytes))
		return
	}
	var f createFields
	_ = json.Unmarshal(body, &f) // a bad body is the node's to refuse
	template, _, _ := strings.Cut(f.Template, "@")
	p := principal(r)
	if f.Snapshot != "" {
		// A snapshot lives on one node (until phase 2 moves them): the
		// create goes there, or nowhere.
		n, err := g.snapshotNode(r, f.Snapshot)
		if err != nil {
			server.WriteError(w, err)
			return
		}
		resp, err := g.send(r, n, p, body)
		if err != nil {
			if connectFailed(err) {
				n.markDown(err)
			}
			server.WriteError(w, nodeUnavailable(n.id, err))
			return
		}
		relay(w, resp)
		return
	}
	tried := map[*node]bool{}
	var lastErr error
	for attempt := 0; attempt <= maxRetries; attempt++ {
		n := g.place(f.Isolation, template, tried)
		if n == nil {
			break
		}
		tried[n] = true
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
		retry := (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests) && attempt < maxRetries
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

// send POSTs a create to n, counting it in flight, and on a 2xx counts it
// placed.
func (g *Gateway) send(r *http.Request, n *node, p auth.Principal, body []byte) (*http.Response, error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, n.base.JoinPath(r.URL.Path).String(), bytes.NewReader(body))
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
	out.Header.Set("Authorization", "Bearer "+g.o.Key)
	auth.SetGatewayHeaders(out.Header, p)
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
	type cand struct {
		n     *node
		score float64
		has   bool
	}
	var cands []cand
	anyHas := false
	for _, n := range g.nodes {
		if skip[n] {
			continue
		}
		n.mu.Lock()
		st, ok := n.status, n.available
		load := 1 + n.inFlight + n.placed
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
