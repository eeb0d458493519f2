package gateway

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/config"
)

// failsToDown is how many polls in a row must fail before a node is
// unavailable (a failed connection at request time takes it down at once).
const failsToDown = 2

// Where a gateway learns of a node (api.FleetNode.Source).
const (
	SourceConfig     = "config"     // a [[fleet.node]]
	SourceKubernetes = "kubernetes" // an AgentboxNode object (internal/kube)
)

// Member is one node of the fleet as a membership source gives it: the
// config's [[fleet.node]] list, or a Kubernetes cluster's AgentboxNode
// objects and Leases.
type Member struct {
	config.FleetNode
	// Source is SourceConfig or SourceKubernetes.
	Source string
	// Down, when not "", holds the node out of placement and routing
	// whatever its polls say, and says why (its Lease has expired).
	Down string
}

// membership is the fleet at one moment; SetMembers replaces it whole,
// so a request reads one consistent table without a lock.
type membership struct {
	nodes []*node // the sources' order: the config's, then the cluster's by id
	byID  map[string]*node
	// trust is the TLS trust of each https node, by the address dialled.
	trust map[string]*tls.Config
}

func (g *Gateway) members() *membership { return g.mem.Load() }

// trustFor is the TLS trust of the node at addr (HOST:PORT); nil: the
// system's roots.
func (g *Gateway) trustFor(addr string) *tls.Config { return g.members().trust[addr] }

// SetMembers makes ms the fleet. A node that stays (same id, url and
// trust) keeps its state; a new one is polled at once; one that is gone
// gets no new request (those under way finish). A member the gateway
// cannot use (a bad url, an id listed twice) is an error and changes
// nothing.
func (g *Gateway) SetMembers(ms []Member) error {
	g.memMu.Lock()
	defer g.memMu.Unlock()
	old := g.members()
	next := &membership{byID: make(map[string]*node, len(ms)), trust: map[string]*tls.Config{}}
	var fresh []*node
	for _, m := range ms {
		u, err := url.Parse(m.URL)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return errdefs.Invalid("fleet node %s (%s): url %q is not http(s)://HOST:PORT", m.ID, m.Source, m.URL)
		}
		u.Path = ""
		if _, dup := next.byID[m.ID]; dup {
			return errdefs.Invalid("fleet node %s is listed twice (%s); every node needs a node_id of its own", m.ID, m.Source)
		}
		if m.Fingerprint != "" || m.CAFile != "" {
			if u.Scheme != "https" {
				return errdefs.Invalid("fleet node %s: fingerprint and ca_file need an https url, got %q", m.ID, m.URL)
			}
			tc, err := client.TLSConfig(m.Fingerprint, m.CAFile)
			if err != nil {
				return errdefs.Invalid("fleet node %s: %v", m.ID, err)
			}
			next.trust[hostPort(u)] = tc
		}
		n := old.byID[m.ID]
		if n == nil || n.base.String() != u.String() || n.trust != m.Fingerprint+"\x00"+m.CAFile {
			n = &node{id: m.ID, base: u, trust: m.Fingerprint + "\x00" + m.CAFile}
			n.proxy = g.newProxy(n)
			fresh = append(fresh, n)
		}
		n.mu.Lock()
		n.source, n.down = m.Source, m.Down
		n.mu.Unlock()
		next.nodes = append(next.nodes, n)
		next.byID[m.ID] = n
	}
	g.mem.Store(next)
	if g.ctx != nil {
		for _, n := range fresh {
			go g.poll(g.ctx, n)
		}
	}
	return nil
}

// node is one member of the fleet, as this gateway sees it.
type node struct {
	id    string
	base  *url.URL
	trust string // the member's fingerprint and ca_file
	// proxy forwards the requests routed to this node (proxy.go).
	proxy *httputil.ReverseProxy

	mu        sync.Mutex
	source    string // Member.Source
	down      string // Member.Down
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
	out := api.FleetNode{ID: n.id, URL: n.base.String(), Source: n.source, Lease: n.down,
		Available: n.available && n.down == "", LastError: n.lastErr, InFlight: n.inFlight}
	if !n.lastPoll.IsZero() {
		t := n.lastPoll
		out.LastPoll = &t
	}
	if n.status != nil {
		s := *n.status
		out.Status = &s
		if !out.Available {
			out.LostSandboxes = s.Sandboxes
		}
	}
	return out
}

// isAvailable: its last poll succeeded, no request has failed to
// connect since, and its membership source does not hold it down.
func (n *node) isAvailable() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.available && n.down == ""
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
	for _, n := range g.members().nodes {
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

// Nodes returns the membership table: the config's nodes in its order,
// then the cluster's.
func (g *Gateway) Nodes() []api.FleetNode {
	nodes := g.members().nodes
	out := make([]api.FleetNode, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.row())
	}
	return out
}

// available returns the available nodes, in the membership's order.
func (g *Gateway) available() []*node {
	var out []*node
	for _, n := range g.members().nodes {
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
