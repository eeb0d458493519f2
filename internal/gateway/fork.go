package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/server"
)

// Cross-host fork: POST /v1/sandboxes/{id}/fork with "spread": true.
//
//  1. The parent's node A takes a snapshot of it (as the node's own fork
//     does: frozen for the capture, the parent keeps running), with its
//     memory for a fork with memory (gvisor: the snapshot's checkpoint
//     travels with it, and each child restores it; a tier whose memory
//     cannot leave its node, microvm for now, keeps every child on A).
//  2. Each child is placed best of K (place.go), counting the children
//     placed before it, on the parent's tier and template.
//  3. On every other target node, in this order: the template is made
//     ready there (ensureTemplate, through the fleet's registry when
//     there is one), and A's snapshot is streamed to it (streamSnapshot:
//     A's export piped into the node's import through the gateway,
//     uncompressed, no registry; once per node however many children it
//     gets). A node whose copy fails is left out and its children are
//     placed again, on the other nodes or A.
//  4. The children are created from the snapshot (A's, or each node's
//     copy) with the parent's settings as a fork keeps them: isolation,
//     resources, metadata, TTL, timeouts, network (a new preview token
//     and address), user limits; the env is the snapshot's.
//  5. All or nothing: if a child cannot be created, the children made are
//     destroyed and the answer is the error.
//  6. With a fleet registry, A then pushes the snapshot there in the
//     background (pushLater, pushq.go: one push at a time, only while no
//     spread fork is in flight): the durable copy a restore elsewhere
//     pulls once A is gone (a restore before the push ends pushes it or
//     waits for it).
//
// Lifetime: the snapshot and its copies belong to the fork. Each copy on
// a target is released once the children are made (releaseSnapshot:
// internal on its node, removed with the last child there), and A's
// snapshot once it is pushed (at once without a registry): removed then
// if no child on A stacks on it, else with the last of them. A fork that
// fails releases them all at once. The answer's Server-Timing header
// (and the gateway's log line) has the time of each step.

// maxForkCount is a node's (internal/sandbox.MaxForkCount).
const maxForkCount = 100

func (g *Gateway) fork(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, g.o.MaxBodyBytes)
	if err != nil {
		server.WriteError(w, err)
		return
	}
	var req api.ForkRequest
	if json.Unmarshal(body, &req) != nil || !req.Spread {
		// The parent's node forks (and refuses a bad body).
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		g.forwardSandbox(w, r)
		return
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 1 || req.Count > maxForkCount {
		server.WriteError(w, errdefs.Invalid("count must be between 1 and %d, got %d", maxForkCount, req.Count))
		return
	}
	start := time.Now()
	g.pushes.forkStarted() // background pushes give way (pushq.go)
	var sp forkSpans
	out, err := g.spreadFork(r.Context(), principal(r), r.PathValue("id"), req.Count, req.Memory, &sp)
	g.pushes.forkEnded()
	sp.total = time.Since(start)
	w.Header().Set("Server-Timing", sp.header())
	if err != nil {
		server.WriteError(w, err)
		return
	}
	g.log.Info("spread fork", "sandbox", r.PathValue("id"), "children", len(out), "took", sp.total.Round(time.Millisecond),
		"snapshot", sp.snapshot.Round(time.Millisecond), "template", sp.template.Round(time.Millisecond),
		"stream", sp.stream.Round(time.Millisecond), "create", sp.create.Round(time.Millisecond))
	server.WriteJSON(w, http.StatusCreated, api.ForkResponse{Sandboxes: out})
}

// forkSpans are the times of a spread fork's steps: the snapshot on the
// parent's node, the templates made ready on the targets, the snapshot's
// streams to them (each step's targets at once), the children's creates,
// and the whole.
type forkSpans struct {
	snapshot, template, stream, create, total time.Duration
}

// header is the spans as a Server-Timing header (milliseconds).
func (s *forkSpans) header() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) }
	return "snapshot;dur=" + ms(s.snapshot) + ", template;dur=" + ms(s.template) + ", stream;dur=" + ms(s.stream) +
		", create;dur=" + ms(s.create) + ", total;dur=" + ms(s.total)
}

// spreadFork forks sandbox id into count children placed over the fleet,
// with memory: each child goes on running the parent's processes. sp
// gets the time of each step.
func (g *Gateway) spreadFork(ctx context.Context, p auth.Principal, id string, count int, memory bool, sp *forkSpans) ([]api.Sandbox, error) {
	src, err := g.nodeOf(id, "sandbox")
	if err != nil {
		return nil, err
	}
	var parent api.Sandbox
	if err := g.call(ctx, src, p, "GET", "/v1/sandboxes/"+url.PathEscape(id), nil, &parent); err != nil {
		return nil, err
	}
	var snap api.Snapshot
	t0 := time.Now()
	if err := g.call(ctx, src, p, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/snapshots", api.CreateSnapshotRequest{Memory: memory}, &snap); err != nil {
		return nil, fmt.Errorf("snapshotting sandbox %s: %w", id, err)
	}
	sp.snapshot = time.Since(t0)
	targets := g.placeMany(parent.Isolation, parent.Template, count)
	for i := range targets {
		if targets[i] == nil {
			targets[i] = src
		}
	}
	local := map[*node]string{src: snap.ID} // each target's snapshot
	failed := map[*node]error{}
	for round := 0; ; round++ {
		var need []*node
		for _, t := range targets {
			if _, ok := local[t]; !ok && failed[t] == nil && !containsNode(need, t) {
				need = append(need, t)
			}
		}
		if len(need) == 0 {
			break
		}
		// Templates first: a template pushed now is named by the
		// snapshot's config, so the targets find it by digest.
		t0 := time.Now()
		errs := parallel(need, func(t *node) error { return g.ensureTemplate(ctx, t, p, snap.Template) })
		sp.template += time.Since(t0)
		t0 = time.Now()
		ids := make([]string, len(need))
		pullErrs := parallel(need, func(t *node) error {
			i := indexNode(need, t)
			if errs[i] != nil {
				return errs[i]
			}
			v, err := g.streamSnapshot(ctx, src, t, p, snap.ID)
			ids[i] = v
			return err
		})
		sp.stream += time.Since(t0)
		for i, t := range need {
			if pullErrs[i] != nil {
				failed[t] = pullErrs[i]
				g.log.Warn("spread fork: a target node could not get the snapshot; placing its children elsewhere", "node", t.id, "err", pullErrs[i])
				continue
			}
			local[t] = ids[i]
		}
		// The failed nodes' children go elsewhere: the best other node,
		// or the parent's (which has the snapshot).
		skip := map[*node]bool{}
		for n := range failed {
			skip[n] = true
		}
		for i, t := range targets {
			if failed[t] != nil {
				n := g.place(parent.Isolation, parent.Template, skip)
				if n == nil || round >= 2 {
					n = src
				}
				targets[i] = n
			}
		}
	}
	t0 = time.Now()
	children := make([]api.Sandbox, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, t := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = g.createChild(ctx, t, p, parent, local[t], &children[i])
		}()
	}
	wg.Wait()
	sp.create = time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		for i, c := range children {
			if errs[i] == nil && c.ID != "" {
				if derr := g.call(context.WithoutCancel(ctx), targets[i], p, "DELETE", "/v1/sandboxes/"+c.ID, nil, nil); derr != nil {
					g.log.Warn("spread fork: removing a child after a failure", "sandbox", c.ID, "err", derr)
				}
			}
		}
		for n, sid := range local { // nothing of the fork stacks on them now
			if n != src {
				g.mv.set(&g.mv.pulled, n.id+"/"+snap.ID+"/"+p.Tenant, "")
			}
			g.releaseSnapshot(n, p, sid)
		}
		return nil, fmt.Errorf("forking sandbox %s: %w", id, err)
	}
	// The copies go with their last child (a restore elsewhere pulls its
	// own copy from the registry); A's snapshot once pushed.
	go func() {
		for n, sid := range local {
			if n != src {
				g.mv.set(&g.mv.pulled, n.id+"/"+snap.ID+"/"+p.Tenant, "")
				g.releaseSnapshot(n, p, sid)
			}
		}
	}()
	g.pushLater(src, p, snap.ID)
	return children, nil
}

// createChild creates one child of parent on n from snapshot snapID.
func (g *Gateway) createChild(ctx context.Context, n *node, p auth.Principal, parent api.Sandbox, snapID string, out *api.Sandbox) error {
	req := api.CreateSandboxRequest{
		Snapshot:           snapID,
		Isolation:          parent.Isolation,
		CPU:                parent.Resources.CPU,
		MemoryMB:           parent.Resources.MemoryMB,
		DiskMB:             parent.Resources.DiskMB,
		Pids:               parent.Resources.Pids,
		Metadata:           parent.Metadata,
		OnTimeout:          parent.OnTimeout,
		AutoResume:         parent.AutoResume,
		IdleTimeoutSeconds: parent.IdleTimeoutSeconds,
		UserLimits:         parent.UserLimits,
		TTLSeconds:         -1,
	}
	if parent.ExpiresAt != nil {
		req.TTLSeconds = max(1, int64(math.Ceil(parent.ExpiresAt.Sub(parent.CreatedAt).Seconds())))
	}
	if parent.Network != nil {
		nw := *parent.Network
		nw.PreviewToken, nw.Address, nw.PreviewDomain = "", "", "" // the child's own
		req.Network = &nw
	}
	n.mu.Lock()
	n.inFlight++
	n.mu.Unlock()
	err := g.call(ctx, n, p, "POST", "/v1/sandboxes", req, out)
	n.mu.Lock()
	n.inFlight--
	if err == nil {
		n.placed++
	}
	n.mu.Unlock()
	return err
}

// placeMany places count sandboxes one after the other, each counting
// those placed before it; nil where no node is left.
func (g *Gateway) placeMany(tier, template string, count int) []*node {
	out := make([]*node, count)
	extra := map[*node]int{}
	for i := range out {
		out[i] = g.placeLoad(tier, template, nil, extra)
		if out[i] != nil {
			extra[out[i]]++
		}
	}
	return out
}

// parallel runs fn for every node at once and returns the errors in
// order.
func parallel(nodes []*node, fn func(*node) error) []error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(n)
		}()
	}
	wg.Wait()
	return errs
}

func containsNode(ns []*node, n *node) bool { return indexNode(ns, n) >= 0 }

func indexNode(ns []*node, n *node) int {
	for i, m := range ns {
		if m == n {
			return i
		}
	}
	return -1
}

// templateWrite serves POST /v1/templates/build and /import: the
// template is made on one node (placed as a create is: best of K by free
// memory), and the other nodes pull it from the fleet's registry on
// first use (ensureTemplate).
func (g *Gateway) templateWrite(w http.ResponseWriter, r *http.Request) {
	n := g.place("", "", nil)
	if n == nil {
		server.WriteError(w, errdefs.New(errdefs.ErrNodeUnavailable, "no fleet node is available to make the template on; see GET /v1/fleet/nodes"))
		return
	}
	g.forward(w, r, n)
}

// deleteTemplate serves DELETE /v1/templates/{name}: removed from every
// node that has it. The answer is 204 when one node removed it, the
// nodes' error when none did (not found on all: 404), and an error when
// some node failed: the nodes named there still have it.
func (g *Gateway) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	answers, missing := g.fanout(r.Context(), principal(r), "DELETE", "/v1/templates/"+url.PathEscape(name), r.URL.RawQuery)
	setPartial(w, missing)
	removed, failed := 0, []string{}
	var refusal *nodeAnswer
	for i, a := range answers {
		switch {
		case a.status < 300:
			removed++
		case a.status == http.StatusNotFound:
		default:
			failed = append(failed, a.n.id)
			if refusal == nil {
				refusal = &answers[i]
			}
		}
	}
	g.mv.mu.Lock()
	for k := range g.mv.pushed {
		if parts := strings.Split(k, "/"); len(parts) == 3 && parts[1] == name {
			delete(g.mv.pushed, k)
		}
	}
	g.mv.mu.Unlock()
	switch {
	case refusal != nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(refusal.status)
		_, _ = w.Write(refusal.body)
	case len(missing) > 0:
		server.WriteError(w, errdefs.New(errdefs.ErrNodeUnavailable, "template %s: nodes %v did not answer and may still have it; delete again when they are back", name, missing))
	case removed == 0:
		server.WriteError(w, errdefs.NotFound("template %q not found on any node", name))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
