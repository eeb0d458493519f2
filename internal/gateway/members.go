package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
)

// failsToDown is how many polls in a row must fail before a node is
// unavailable (a failed connection at request time takes it down at once).
const failsToDown = 2

// node is one member of the fleet, as this gateway sees it.
type node struct {
	id   string
	base *url.URL
	// proxy forwards the requests routed to this node (proxy.go).
	proxy *httputil.ReverseProxy

	mu        sync.Mutex
	available bool
	fails     int // polls failed in a row
	lastErr   string
	lastPoll  time.Time
	status    *api.NodeStatus
	inFlight  int // creates sent, not answered
	placed    int // creates answered 2xx since the last successful poll
}

// snapshot returns the node's row of the membership table.
func (n *node) row() api.FleetNode {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := api.FleetNode{ID: n.id, URL: n.base.String(), Available: n.available, LastError: n.lastErr, InFlight: n.inFlight}
	if !n.lastPoll.IsZero() {
		t := n.lastPoll
		out.LastPoll = &t
	}
	if n.status != nil {
		s := *n.status
		out.Status = &s
		if !n.available {
			out.LostSandboxes = s.Sandboxes
		}
	}
	return out
}

func (n *node) isAvailable() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.available
}

// markDown makes the node unavailable at once: a request could not reach
// it. The next successful poll brings it back.
func (n *node) markDown(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.available = false
	n.fails = failsToDown
	n.lastErr = err.Error()
}

// pollResult records one poll of GET /v1/node.
func (n *node) pollResult(st *api.NodeStatus, err error, at time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lastPoll = at
	if err != nil {
		n.fails++
		n.lastErr = err.Error()
		if n.fails >= failsToDown {
			n.available = false
		}
		return
	}
	if st.NodeID != n.id {
		// A node answering under another id would get requests for ids
		// it never made: never available.
		n.fails, n.available = failsToDown, false
		n.lastErr = fmt.Sprintf("the node at %s says its node_id is %q, the gateway's config says %q: fix one of them", n.base, st.NodeID, n.id)
		return
	}
	n.fails, n.available, n.lastErr = 0, true, ""
	n.status = st
	n.placed = 0 // the status counts them now
}

// poll reads the node's GET /v1/node once.
func (g *Gateway) poll(ctx context.Context, n *node) {
	timeout := g.o.PollInterval
	if timeout < time.Second {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := g.fetchStatus(ctx, n)
	n.pollResult(st, err, time.Now())
}

func (g *Gateway) fetchStatus(ctx context.Context, n *node) (*api.NodeStatus, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", n.base.JoinPath("/v1/node").String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+g.o.Key) // no tenant header: the admin
	resp, err := g.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/node: %s: %s", resp.Status, errorMessage(body))
	}
	var st api.NodeStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("GET /v1/node: %v", err)
	}
	return &st, nil
}

// pollAll polls every node at once and returns when all have answered.
func (g *Gateway) pollAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, n := range g.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.poll(ctx, n)
		}()
	}
	wg.Wait()
}

// run polls every node each PollInterval until ctx is done.
func (g *Gateway) run(ctx context.Context) {
	t := time.NewTicker(g.o.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.pollAll(ctx)
		}
	}
}

// Nodes returns the membership table, in the config's order.
func (g *Gateway) Nodes() []api.FleetNode {
	out := make([]api.FleetNode, 0, len(g.nodes))
	for _, n := range g.nodes {
		out = append(out, n.row())
	}
	return out
}

// available returns the available nodes, in the config's order.
func (g *Gateway) available() []*node {
	var out []*node
	for _, n := range g.nodes {
		if n.isAvailable() {
			out = append(out, n)
		}
	}
	return out
}

// errorMessage is the message of an API error body, or the body itself.
func errorMessage(body []byte) string {
	var e api.ErrorBody
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Code + ": " + e.Error.Message
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return string(body)
}
