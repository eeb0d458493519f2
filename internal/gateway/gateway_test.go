package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/store"
)

const fleetKey = "fleet-secret-for-tests-0123456789abcdef"

// fakeNode is a node-like HTTP server: it checks the fleet key as a node
// does, answers GET /v1/node, creates sandboxes with ids of its node_id,
// lists them with the node's cursor, and serves a streamed route, a
// WebSocket-like upgrade and a preview host.
type fakeNode struct {
	t   testing.TB
	id  string
	srv *httptest.Server

	mu         sync.Mutex
	sandboxes  []api.Sandbox
	memoryMB   int64
	templates  []string
	createCode int // status a create answers; 0: 201
	creates    atomic.Int32
	lastTenant string
	lastAdmin  string
	lastAuth   string
	lastHost   string
	lastReqID  string
	lastPath   string
	snapshots  map[string]string // name -> id
	pulls      []api.PullRequest // POST /v1/templates/pull bodies
	calls      []string          // the snapshot calls of a spread fork, in order
	// release ends the streamed route's answer.
	release chan struct{}
}

func newFakeNode(t testing.TB, id string) *fakeNode {
	f := &fakeNode{t: t, id: id, memoryMB: 8000, release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeNode) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.lastHost = r.Host
	f.lastReqID = r.Header.Get("X-Request-Id")
	f.lastPath = r.URL.Path
	f.mu.Unlock()
	if strings.HasSuffix(strings.Split(r.Host, ":")[0], ".localhost") { // a preview host
		f.mu.Lock()
		f.lastAuth = r.Header.Get("Authorization")
		f.mu.Unlock()
		fmt.Fprintf(w, "preview of %s on %s", r.Host, f.id)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+fleetKey {
		http.Error(w, `{"error":{"code":"unauthenticated","message":"not the gateway"}}`, http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	f.lastTenant, f.lastAdmin, f.lastAuth = r.Header.Get(auth.TenantHeader), r.Header.Get(auth.AdminHeader), r.Header.Get("Authorization")
	f.mu.Unlock()
	switch {
	case r.Method == "GET" && r.URL.Path == "/v1/node":
		f.mu.Lock()
		st := api.NodeStatus{NodeID: f.id, Version: "test", Tiers: []api.Tier{{Name: "container", Available: true, Default: true}, {Name: "gvisor", Available: f.id != "n2a"}},
			Sandboxes: len(f.sandboxes), CPUs: 2, MemoryTotalMB: 16000, MemoryAvailableMB: f.memoryMB, Templates: slices.Clone(f.templates)}
		f.mu.Unlock()
		writeJSON(w, st)
	case r.Method == "POST" && r.URL.Path == "/v1/sandboxes":
		f.creates.Add(1)
		var req api.CreateSandboxRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		code := f.createCode
		f.mu.Unlock()
		if code != 0 {
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"error":{"code":"unavailable","message":"full"}}`)
			return
		}
		sb := f.add(time.Now())
		sb.Template = req.Template
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(sb)
	case r.Method == "GET" && r.URL.Path == "/v1/sandboxes":
		f.list(w, r)
	case r.Method == "POST" && r.URL.Path == "/v1/templates/pull":
		var req api.PullRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.pulls = append(f.pulls, req)
		f.templates = append(f.templates, req.Name)
		f.mu.Unlock()
		writeJSON(w, api.Template{Name: req.Name})
	case strings.HasSuffix(r.URL.Path, "/exec/stream") && r.Header.Get("X-Test-Duplex") != "":
		// As the node's exec stream does: the start event goes out before
		// the stdin is read; the stdin is echoed once it has ended.
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		_ = rc.SetReadDeadline(time.Now().Add(10 * time.Second)) // a body that never ends fails the test, not hangs it
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"type":"start"}`)
		w.(http.Flusher).Flush()
		in, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "{\"type\":\"stdout\",\"data\":%q}\n", fmt.Sprintf("%s (%v)", in, err))
		fmt.Fprintln(w, `{"type":"exit","exit_code":0}`)
	case strings.HasSuffix(r.URL.Path, "/exec/stream"):
		fl := w.(http.Flusher)
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"type":"stdout","data":"first"}`)
		fl.Flush()
		<-f.release // the test reads the first chunk through the gateway first
		fmt.Fprintln(w, `{"type":"exit","exit_code":0}`)
	case strings.HasSuffix(r.URL.Path, "/pty/1/ws"):
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want an upgrade", 400)
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		fmt.Fprintf(brw, "echo from %s: %s", f.id, line)
		brw.Flush()
	case r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/v1/sandboxes/") && strings.HasSuffix(r.URL.Path, "/snapshots"):
		f.note(r)
		writeJSON(w, api.Snapshot{ID: f.id + "snapaaaaaaaa", Node: f.id})
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/v1/snapshots/") && strings.HasSuffix(r.URL.Path, "/export"):
		f.note(r)
		fmt.Fprint(w, "a snapshot stream")
	case r.Method == "POST" && r.URL.Path == "/v1/snapshots/import":
		b, _ := io.ReadAll(r.Body)
		if string(b) != "a snapshot stream" {
			http.Error(w, `{"error":{"code":"invalid_argument","message":"not the export"}}`, 400)
			return
		}
		f.note(r)
		writeJSON(w, api.Snapshot{ID: f.id + "copyaaaaaaaa", Node: f.id})
	case r.Method == "DELETE" && strings.HasPrefix(r.URL.Path, "/v1/snapshots/"):
		f.note(r)
		w.WriteHeader(http.StatusNoContent)
	case strings.HasPrefix(r.URL.Path, "/v1/sandboxes/"):
		id := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/sandboxes/"), "/")[0]
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, sb := range f.sandboxes {
			if sb.ID == id {
				writeJSON(w, sb)
				return
			}
		}
		w.WriteHeader(404)
		fmt.Fprintf(w, `{"error":{"code":"not_found","message":"sandbox %s not found on %s"}}`, id, f.id)
	case strings.HasPrefix(r.URL.Path, "/v1/snapshots/") && strings.HasSuffix(r.URL.Path, "/push"):
		f.note(r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(202)
		fmt.Fprint(w, `{"ref":"r","digest":"sha256:00"}`)
	case strings.HasPrefix(r.URL.Path, "/v1/snapshots/"):
		ref := strings.TrimPrefix(r.URL.Path, "/v1/snapshots/")
		f.mu.Lock()
		defer f.mu.Unlock()
		for name, id := range f.snapshots {
			if ref == name || ref == id {
				writeJSON(w, api.Snapshot{ID: id, Name: name, Node: f.id})
				return
			}
		}
		w.WriteHeader(404)
		fmt.Fprintf(w, `{"error":{"code":"not_found","message":"snapshot %s not found"}}`, ref)
	case r.URL.Path == "/v1/templates":
		f.mu.Lock()
		out := api.ListTemplatesResponse{Templates: []api.Template{}}
		for _, n := range f.templates {
			out.Templates = append(out.Templates, api.Template{Name: n, Version: "1"})
		}
		f.mu.Unlock()
		writeJSON(w, out)
	default:
		w.WriteHeader(404)
		fmt.Fprintf(w, `{"error":{"code":"not_found","message":"no route %s"}}`, r.URL.Path)
	}
}

// note records a call as "METHOD PATH[?QUERY]".
func (f *fakeNode) note(r *http.Request) {
	c := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		c += "?" + r.URL.RawQuery
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

// callLog returns the calls noted so far.
func (f *fakeNode) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// add makes a sandbox created at t.
func (f *fakeNode) add(t time.Time) api.Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	// 12 characters of the id alphabet, from the count (digits as letters).
	id := f.id + strings.NewReplacer("0", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5", "f", "6", "g", "7", "h", "8", "i", "9", "j").Replace(fmt.Sprintf("%012d", len(f.sandboxes)))
	sb := api.Sandbox{ID: id, Node: f.id, State: api.StateRunning, CreatedAt: t.UTC().Truncate(time.Millisecond)}
	f.sandboxes = append(f.sandboxes, sb)
	return sb
}

// list is the node's GET /v1/sandboxes: created_at then id, limit and
// cursor as internal/sandbox.ListPage has them.
func (f *fakeNode) list(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	all := slices.Clone(f.sandboxes)
	f.mu.Unlock()
	slices.SortFunc(all, func(a, b api.Sandbox) int {
		if position(a).Before(position(b)) {
			return -1
		}
		return 1
	})
	q := r.URL.Query()
	if c := q.Get("cursor"); c != "" {
		pos, err := store.ParseCursor(c)
		if err != nil {
			w.WriteHeader(400)
			fmt.Fprintf(w, `{"error":{"code":"invalid_argument","message":"bad cursor"}}`)
			return
		}
		all = slices.DeleteFunc(all, func(sb api.Sandbox) bool { return !pos.Before(position(sb)) })
	}
	out := api.ListSandboxesResponse{Sandboxes: all}
	var limit int
	fmt.Sscan(q.Get("limit"), &limit)
	if limit > 0 && len(all) > limit {
		out.Sandboxes = all[:limit]
		out.NextCursor = position(all[limit-1]).Cursor()
	}
	writeJSON(w, out)
}

// fleet is a gateway in front of fake nodes, with a tenant "acme" and its
// key, and the admin key.
type fleet struct {
	t      testing.TB
	g      *Gateway
	srv    *httptest.Server
	nodes  map[string]*fakeNode
	key    string // acme's
	admin  string
	client *http.Client
}

func newFleet(t testing.TB, ids ...string) *fleet {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateTenant(ctx, &store.TenantRecord{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	key, _, err := auth.CreateKey(ctx, st, "acme", "ci", false)
	if err != nil {
		t.Fatal(err)
	}
	admin, _, err := auth.CreateKey(ctx, st, auth.AdminTenant, "admin", true)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, nodes: map[string]*fakeNode{}, key: key, admin: admin, client: &http.Client{}}
	var cfgNodes []config.FleetNode
	for _, id := range ids {
		n := newFakeNode(t, id)
		f.nodes[id] = n
		cfgNodes = append(cfgNodes, config.FleetNode{ID: id, URL: n.srv.URL})
	}
	f.g, err = New(Options{Nodes: cfgNodes, Key: fleetKey, PollInterval: time.Hour, Candidates: 3, Store: st,
		Auth: auth.New(st, filepath.Join(dir, "admin.key"), nil), PreviewDomain: "localhost",
		Info: api.Info{DefaultIsolation: "container"}})
	if err != nil {
		t.Fatal(err)
	}
	f.g.Start(ctx) // one poll now; the test polls again by hand
	t.Cleanup(f.g.Close)
	f.srv = httptest.NewServer(f.g)
	t.Cleanup(f.srv.Close)
	return f
}

// do sends a request to the gateway with key.
func (f *fleet) do(method, path, key, body string, hdr ...string) (*http.Response, string) {
	f.t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func errCode(body string) string {
	var e api.ErrorBody
	_ = json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

// A sandbox's requests go to the node its id names, acting for the key's
// tenant with the fleet key; ids that name no node of the fleet are 404.
func TestRoutesByIDPrefix(t *testing.T) {
	f := newFleet(t, "n2a", "n3b")
	sb := f.nodes["n3b"].add(time.Now())
	resp, body := f.do("GET", "/v1/sandboxes/"+sb.ID, f.key, "", auth.TenantHeader, "evil", auth.AdminHeader, "true", "X-Request-Id", "req-123")
	if resp.StatusCode != 200 || !strings.Contains(body, sb.ID) {
		t.Fatalf("GET through the gateway: %d %s", resp.StatusCode, body)
	}
	n := f.nodes["n3b"]
	if n.lastTenant != "acme" || n.lastAdmin != "false" || n.lastAuth != "Bearer "+fleetKey {
		t.Errorf("node saw tenant %q admin %q auth %q; want acme, false and the fleet key (the client's headers dropped)", n.lastTenant, n.lastAdmin, n.lastAuth)
	}
	if n.lastReqID != "req-123" {
		t.Errorf("node saw request id %q, want the client's req-123", n.lastReqID)
	}
	if f.nodes["n2a"].lastTenant != "" {
		t.Error("node n2a got a request meant for n3b")
	}
	for _, id := range []string{"abcdefghijkl", "zzzabcdefghijkl", "n3b"} {
		resp, body := f.do("GET", "/v1/sandboxes/"+id+"/files?path=/x", f.key, "")
		if resp.StatusCode != 404 || errCode(body) != "not_found" {
			t.Errorf("GET for id %s: %d %s, want 404 not_found", id, resp.StatusCode, body)
		}
	}
	if resp, _ := f.do("GET", "/v1/sandboxes/"+sb.ID, "", ""); resp.StatusCode != 401 {
		t.Errorf("no key: %d, want 401", resp.StatusCode)
	}
}

// A node that does not answer: 503 node_unavailable for its ids, and it is
// out of placement; two failed polls in a row take it down too.
func TestNodeUnavailable(t *testing.T) {
	f := newFleet(t, "n2a", "n3b")
	sb := f.nodes["n3b"].add(time.Now())
	f.nodes["n3b"].srv.Close()
	resp, body := f.do("GET", "/v1/sandboxes/"+sb.ID, f.key, "")
	if resp.StatusCode != 503 || errCode(body) != "node_unavailable" {
		t.Fatalf("request for a dead node's sandbox: %d %s, want 503 node_unavailable", resp.StatusCode, body)
	}
	if f.g.members().byID["n3b"].isAvailable() {
		t.Error("a node that refused a connection is still available")
	}
	resp, body = f.do("GET", "/v1/sandboxes/"+sb.ID+"/exec", f.key, "")
	if resp.StatusCode != 503 || errCode(body) != "node_unavailable" {
		t.Errorf("second request: %d %s", resp.StatusCode, body)
	}
	for range 4 {
		if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{}`); resp.StatusCode != 201 || !strings.Contains(body, `"n2a`) {
			t.Fatalf("create with n3b down: %d %s, want it on n2a", resp.StatusCode, body)
		}
	}
	// Lists say what is missing.
	resp, _ = f.do("GET", "/v1/sandboxes", f.key, "")
	if got := resp.Header.Get(PartialHeader); got != "n3b" {
		t.Errorf("%s = %q, want n3b", PartialHeader, got)
	}
	// Polls: one failure keeps a node, two take it down, one success
	// brings it back.
	n2 := f.g.members().byID["n2a"]
	n2.pollResult(nil, fmt.Errorf("timeout"), time.Now())
	if !n2.isAvailable() {
		t.Error("one failed poll took n2a down")
	}
	n2.pollResult(nil, fmt.Errorf("timeout"), time.Now())
	if n2.isAvailable() {
		t.Error("two failed polls left n2a available")
	}
	f.g.pollAll(context.Background())
	if !n2.isAvailable() {
		t.Errorf("a successful poll did not bring n2a back: %+v", n2.row())
	}
	// With no node left for the tier: 503 node_unavailable.
	if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{"isolation":"gvisor"}`); resp.StatusCode != 503 || errCode(body) != "node_unavailable" {
		t.Errorf("create on a tier no available node has: %d %s", resp.StatusCode, body)
	}
}

// A node that answers 503 to a create is skipped for the next candidate.
func TestCreateRetriesOn503(t *testing.T) {
	f := newFleet(t, "n2a", "n3b")
	full := f.nodes["n2a"]
	full.mu.Lock()
	full.createCode, full.memoryMB = 503, 1<<20 // the best score: tried first
	full.mu.Unlock()
	f.g.pollAll(context.Background())
	resp, body := f.do("POST", "/v1/sandboxes", f.key, `{"template":"base"}`)
	if resp.StatusCode != 201 || !strings.Contains(body, `"id":"n3b`) {
		t.Fatalf("create: %d %s, want it on n3b", resp.StatusCode, body)
	}
	if full.creates.Load() != 1 || f.nodes["n3b"].creates.Load() != 1 {
		t.Errorf("creates: n2a %d, n3b %d; want 1 and 1", full.creates.Load(), f.nodes["n3b"].creates.Load())
	}
	// Every node full: the last node's answer.
	f.nodes["n3b"].mu.Lock()
	f.nodes["n3b"].createCode = 503
	f.nodes["n3b"].mu.Unlock()
	if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{}`); resp.StatusCode != 503 || !strings.Contains(body, "full") {
		t.Errorf("create with every node full: %d %s", resp.StatusCode, body)
	}
}

// Creates spread over equal nodes, and go where the template is.
func TestPlacement(t *testing.T) {
	f := newFleet(t, "n2a", "n3b", "n4c")
	for range 12 {
		if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{}`); resp.StatusCode != 201 {
			t.Fatalf("create: %d %s", resp.StatusCode, body)
		}
	}
	for id, n := range f.nodes {
		if c := n.creates.Load(); c < 3 {
			t.Errorf("node %s got %d of 12 creates; placement should spread them", id, c)
		}
	}
	f.nodes["n4c"].mu.Lock()
	f.nodes["n4c"].templates = []string{"python"}
	f.nodes["n4c"].mu.Unlock()
	f.g.pollAll(context.Background())
	before := f.nodes["n4c"].creates.Load()
	for range 5 {
		if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{"template":"python@3"}`); resp.StatusCode != 201 || !strings.Contains(body, `"id":"n4c`) {
			t.Fatalf("create of python: %d %s, want it on n4c, the node with the template", resp.StatusCode, body)
		}
	}
	if got := f.nodes["n4c"].creates.Load() - before; got != 5 {
		t.Errorf("n4c got %d of 5 python creates", got)
	}
	// A tier only some nodes offer.
	for range 4 {
		if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{"isolation":"gvisor"}`); resp.StatusCode != 201 || strings.Contains(body, `"id":"n2a`) {
			t.Fatalf("gvisor create: %d %s, want it off n2a (no gvisor there)", resp.StatusCode, body)
		}
	}
}

// A streamed answer reaches the client chunk by chunk: the first line
// arrives while the node's handler is still running.
func TestStreamingUnbuffered(t *testing.T) {
	f := newFleet(t, "n2a")
	sb := f.nodes["n2a"].add(time.Now())
	req, _ := http.NewRequest("POST", f.srv.URL+"/v1/sandboxes/"+sb.ID+"/exec/stream", strings.NewReader(`{"cmd":["x"]}`))
	req.Header.Set("Authorization", "Bearer "+f.key)
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan string, 1)
	br := bufio.NewReader(resp.Body)
	go func() {
		line, _ := br.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if !strings.Contains(line, "first") {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first chunk did not arrive while the node's handler ran: the gateway buffers")
	}
	close(f.nodes["n2a"].release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "exit") {
		t.Errorf("rest of the stream: %q", rest)
	}
}

// A stream's request body keeps flowing after the node's answer has
// begun (an exec's stdin while its output comes): the gateway neither
// drops it nor holds the answer back until it has ended.
func TestStreamFullDuplex(t *testing.T) {
	f := newFleet(t, "n2a")
	sb := f.nodes["n2a"].add(time.Now())
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", f.srv.URL+"/v1/sandboxes/"+sb.ID+"/exec/stream", pr)
	req.Header.Set("Authorization", "Bearer "+f.key)
	req.Header.Set("X-Test-Duplex", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req = req.WithContext(ctx)
	go func() { <-ctx.Done(); pw.CloseWithError(ctx.Err()) }() // the transport waits on the body
	go func() { _, _ = pw.Write([]byte(`{"cmd":["wc","-c"],"stdin_stream":true}` + "\n")) }()
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatalf("the stream's answer did not begin before its stdin ended: %v", err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "start") {
		t.Fatalf("first line %q, %v", line, err)
	}
	// Only now, with the answer under way, the rest of the body.
	if _, err := io.WriteString(pw, "stdin after the start"); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "stdin after the start (<nil>)") || !strings.Contains(string(rest), "exit") {
		t.Fatalf("rest of the stream: %q, %v; want the stdin echoed whole, then the exit", rest, err)
	}
}

// A WebSocket upgrade passes through, both ways.
func TestWebSocketUpgrade(t *testing.T) {
	f := newFleet(t, "n2a")
	sb := f.nodes["n2a"].add(time.Now())
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /v1/sandboxes/%s/pty/1/ws HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", sb.ID, f.key)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade: %d %s", resp.StatusCode, b)
	}
	fmt.Fprintf(conn, "hello\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo from n2a: hello\n" {
		t.Fatalf("through the upgraded connection: %q, %v", line, err)
	}
}

// Lists merge every node's in one order, and the cursor pages across
// nodes.
func TestListMergeAndCursor(t *testing.T) {
	f := newFleet(t, "n2a", "n3b")
	t0 := time.Now().Add(-time.Hour)
	var want []string
	for i := range 7 {
		n := f.nodes[[]string{"n2a", "n3b"}[i%2]]
		if i == 5 {
			n = f.nodes["n2a"] // two in a row on one node
		}
		want = append(want, n.add(t0.Add(time.Duration(i)*time.Second)).ID)
	}
	resp, body := f.do("GET", "/v1/sandboxes", f.key, "")
	var all api.ListSandboxesResponse
	json.Unmarshal([]byte(body), &all)
	if resp.StatusCode != 200 || len(all.Sandboxes) != 7 || all.NextCursor != "" || resp.Header.Get(PartialHeader) != "" {
		t.Fatalf("whole list: %d %s", resp.StatusCode, body)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("the cursor does not end")
		}
		q := "/v1/sandboxes?limit=3"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		resp, body := f.do("GET", q, f.key, "")
		var page api.ListSandboxesResponse
		if err := json.Unmarshal([]byte(body), &page); err != nil || resp.StatusCode != 200 {
			t.Fatalf("page: %d %s", resp.StatusCode, body)
		}
		if len(page.Sandboxes) > 3 {
			t.Fatalf("a page of %d with limit 3", len(page.Sandboxes))
		}
		for _, sb := range page.Sandboxes {
			got = append(got, sb.ID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged through the gateway:\n got %v\nwant %v", got, want)
	}
	if resp, body := f.do("GET", "/v1/sandboxes?limit=0", f.key, ""); resp.StatusCode != 400 {
		t.Errorf("limit=0: %d %s", resp.StatusCode, body)
	}
}

// The routes the gateway does not serve yet answer 501; the fleet table is
// the admin's; GET /v1/info sums the nodes up; templates are merged.
func TestGatewayOwnRoutes(t *testing.T) {
	f := newFleet(t, "n2a", "n3b")
	f.nodes["n2a"].templates = []string{"base", "python"}
	f.nodes["n3b"].templates = []string{"base"}
	resp, body := f.do("GET", "/v1/audit", f.admin, "")
	if resp.StatusCode != 501 || errCode(body) != "unimplemented" || !strings.Contains(body, "GET /v1/audit") {
		t.Errorf("GET /v1/audit: %d %s, want 501 naming the route", resp.StatusCode, body)
	}
	if resp, body := f.do("GET", "/console/", f.key, ""); resp.StatusCode != 501 {
		t.Errorf("/console: %d %s", resp.StatusCode, body)
	}
	if resp, _ := f.do("GET", "/v1/fleet/nodes", f.key, ""); resp.StatusCode != 403 {
		t.Errorf("fleet table with a tenant key: %d, want 403", resp.StatusCode)
	}
	resp, body = f.do("GET", "/v1/fleet/nodes", f.admin, "")
	var tbl api.ListFleetNodesResponse
	json.Unmarshal([]byte(body), &tbl)
	if resp.StatusCode != 200 || len(tbl.Nodes) != 2 || !tbl.Nodes[0].Available || tbl.Nodes[0].Status == nil || tbl.Nodes[0].Status.NodeID != "n2a" {
		t.Errorf("fleet table: %d %s", resp.StatusCode, body)
	}
	resp, body = f.do("GET", "/v1/info", f.key, "")
	var info api.Info
	json.Unmarshal([]byte(body), &info)
	if info.Role != "gateway" || info.Nodes == nil || info.Nodes.Available != 2 || len(info.Tiers) != 2 || !info.Tiers[1].Available {
		t.Errorf("info: %s", body)
	}
	resp, body = f.do("GET", "/v1/templates", f.key, "")
	var tpls api.ListTemplatesResponse
	json.Unmarshal([]byte(body), &tpls)
	if len(tpls.Templates) != 2 || tpls.Templates[0].Name != "base" || !slices.Equal(tpls.Templates[0].Nodes, []string{"n2a", "n3b"}) ||
		!slices.Equal(tpls.Templates[1].Nodes, []string{"n2a"}) {
		t.Errorf("templates: %s", body)
	}
	// Keys and tenants are the gateway's own (internal/server's handlers).
	resp, body = f.do("POST", "/v1/tenants", f.admin, `{"name":"newco"}`)
	if resp.StatusCode != 201 {
		t.Errorf("create tenant at the gateway: %d %s", resp.StatusCode, body)
	}
	resp, body = f.do("POST", "/v1/keys", f.admin, `{"tenant":"newco","name":"k"}`)
	var k api.Key
	json.Unmarshal([]byte(body), &k)
	if resp.StatusCode != 201 || k.Secret == "" {
		t.Fatalf("create key at the gateway: %d %s", resp.StatusCode, body)
	}
	if resp, body := f.do("POST", "/v1/sandboxes", k.Secret, `{}`); resp.StatusCode != 201 {
		t.Errorf("create with the new key: %d %s", resp.StatusCode, body)
	}
	var last *fakeNode
	for _, n := range f.nodes {
		if n.lastTenant == "newco" {
			last = n
		}
	}
	if last == nil {
		t.Error("no node saw tenant newco")
	}
	if resp, _ := f.do("POST", "/v1/tenants", f.key, `{"name":"x"}`); resp.StatusCode != 403 {
		t.Errorf("create tenant with a tenant key: %d, want 403", resp.StatusCode)
	}
}

// A preview host goes to the sandbox's node with its Host, and without
// the gateway's key when the client sent none.
func TestPreviewHost(t *testing.T) {
	f := newFleet(t, "n2a", "n3b")
	sb := f.nodes["n3b"].add(time.Now())
	req, _ := http.NewRequest("GET", f.srv.URL+"/index.html", nil)
	req.Host = "8000-" + sb.ID + ".localhost"
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "preview of 8000-"+sb.ID+".localhost on n3b") {
		t.Fatalf("preview: %d %s", resp.StatusCode, b)
	}
	if a := f.nodes["n3b"].lastAuth; a != "" {
		t.Errorf("a preview without a key reached the node with Authorization %q", a)
	}
	// With the tenant's key: the gateway's key and the tenant instead.
	req.Header.Set("Authorization", "Bearer "+f.key)
	resp, err = f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if a := f.nodes["n3b"].lastAuth; a != "Bearer "+fleetKey {
		t.Errorf("a preview with a key reached the node with Authorization %q, want the fleet key", a)
	}
}

func TestNotServedListed(t *testing.T) {
	ns := NotServed()
	for _, want := range []string{"GET /v1/audit", "GET /v1/events", "POST /v1/tickets", "GET /v1/node"} {
		if !slices.Contains(ns, want) {
			t.Errorf("NotServed() lacks %s: %v", want, ns)
		}
	}
	for _, served := range []string{"POST /v1/sandboxes", "GET /v1/pools", "GET /v1/keys", "GET /v1/fleet/nodes", "POST /v1/templates/build", "POST /v1/templates/import", "DELETE /v1/templates/{name}", "POST /v1/sandboxes/{id}/fork"} {
		if slices.Contains(ns, served) {
			t.Errorf("NotServed() lists %s", served)
		}
	}
}

// docs/cluster.md names every route a gateway answers 501.
func TestClusterDocListsNotServed(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cluster.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range NotServed() {
		if !strings.Contains(string(doc), "`"+p+"`") {
			t.Errorf("docs/cluster.md does not name %s among the routes a gateway does not serve", p)
		}
	}
}

// A create from a snapshot goes to the snapshot's node, by id or by name.
func TestCreateFromSnapshotGoesToItsNode(t *testing.T) {
	f := newFleet(t, "n2a", "n3b", "n4c")
	f.nodes["n3b"].snapshots = map[string]string{"mysnap": "n3baaaaaaaaaaaa"}
	for _, ref := range []string{"n3baaaaaaaaaaaa", "mysnap"} {
		resp, body := f.do("POST", "/v1/sandboxes", f.key, `{"snapshot":"`+ref+`"}`)
		if resp.StatusCode != 201 || !strings.Contains(body, `"id":"n3b`) {
			t.Errorf("create from snapshot %s: %d %s, want it on n3b", ref, resp.StatusCode, body)
		}
	}
	if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{"snapshot":"nosuch"}`); resp.StatusCode != 404 {
		t.Errorf("create from an unknown snapshot: %d %s", resp.StatusCode, body)
	}
	if resp, body := f.do("GET", "/v1/snapshots/mysnap", f.key, ""); resp.StatusCode != 200 || !strings.Contains(body, `"node":"n3b"`) {
		t.Errorf("GET /v1/snapshots/mysnap: %d %s", resp.StatusCode, body)
	}
	// A push by name goes to the node, by the snapshot's id.
	if resp, body := f.do("POST", "/v1/snapshots/mysnap/push", f.key, `{"ref":"r"}`); resp.StatusCode != 202 || f.nodes["n3b"].lastPath != "/v1/snapshots/n3baaaaaaaaaaaa/push" {
		t.Errorf("push by name: %d %s, node saw %s", resp.StatusCode, body, f.nodes["n3b"].lastPath)
	}
}

// TestPinnedNode: a node whose [[fleet.node]] pins its certificate is
// reached over TLS when the certificate matches, and not when another
// certificate answers.
func TestPinnedNode(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("node"))
	}))
	defer srv.Close()
	sum := sha256.Sum256(srv.Certificate().Raw)
	u, _ := url.Parse(srv.URL)
	for _, c := range []struct {
		name, fp string
		ok       bool
	}{
		{"its certificate", hex.EncodeToString(sum[:]), true},
		{"another certificate", strings.Repeat("ab", 32), false},
	} {
		g, err := New(Options{Nodes: []config.FleetNode{{ID: "n2a", URL: srv.URL, Fingerprint: c.fp}}, Key: fleetKey})
		if err != nil {
			t.Fatal(err)
		}
		rt := g.rt.(*http.Transport)
		resp, err := (&http.Client{Transport: rt}).Get("https://" + u.Host + "/")
		if c.ok != (err == nil) {
			t.Fatalf("%s: err = %v", c.name, err)
		}
		if err == nil {
			resp.Body.Close()
		}
		rt.CloseIdleConnections()
	}
	// Unpinned, the system's roots do not know httptest's certificate.
	rt := newTransport(func(string) *tls.Config { return nil })
	if _, err := (&http.Client{Transport: rt}).Get(srv.URL); err == nil {
		t.Fatal("an unpinned node with an unknown certificate was trusted")
	}
	if _, err := New(Options{Nodes: []config.FleetNode{{ID: "n2a", URL: srv.URL, Fingerprint: "zz"}}, Key: fleetKey}); err == nil {
		t.Fatal("a malformed fingerprint was taken")
	}
}

// SetMembers changes the fleet under a running gateway: a new node is
// polled and routed to, one held down (its Lease expired) is out of
// placement and routing with the reason shown, one removed is not found,
// and a node that stays keeps its state.
func TestSetMembers(t *testing.T) {
	f := newFleet(t, "n2a")
	a := f.g.members().byID["n2a"]
	c := newFakeNode(t, "n4c")
	sb := c.add(time.Now())
	members := func(down string) []Member {
		return []Member{
			{FleetNode: config.FleetNode{ID: "n2a", URL: f.nodes["n2a"].srv.URL}, Source: SourceConfig},
			{FleetNode: config.FleetNode{ID: "n4c", URL: c.srv.URL}, Source: SourceKubernetes, Down: down},
		}
	}
	if err := f.g.SetMembers(members("")); err != nil {
		t.Fatal(err)
	}
	if f.g.members().byID["n2a"] != a {
		t.Error("a node that stayed was made again (its state lost)")
	}
	for !f.g.members().byID["n4c"].isAvailable() { // polled at once, in the background
		time.Sleep(10 * time.Millisecond)
	}
	if resp, body := f.do("GET", "/v1/sandboxes/"+sb.ID, f.key, ""); resp.StatusCode != 200 {
		t.Fatalf("a sandbox of the new node: %d %s", resp.StatusCode, body)
	}
	if err := f.g.SetMembers(members("its Lease expired 3s ago")); err != nil {
		t.Fatal(err)
	}
	if resp, body := f.do("GET", "/v1/sandboxes/"+sb.ID, f.key, ""); resp.StatusCode != 503 || errCode(body) != "node_unavailable" {
		t.Errorf("a node held down: %d %s, want 503 node_unavailable", resp.StatusCode, body)
	}
	var rows api.ListFleetNodesResponse
	_, body := f.do("GET", "/v1/fleet/nodes", f.admin, "")
	if err := json.Unmarshal([]byte(body), &rows); err != nil || len(rows.Nodes) != 2 {
		t.Fatalf("fleet nodes: %v %s", err, body)
	}
	if r := rows.Nodes[1]; r.ID != "n4c" || r.Available || r.Source != "kubernetes" || r.Lease != "its Lease expired 3s ago" || r.LostSandboxes != 1 {
		t.Errorf("row of the node held down: %+v", r)
	}
	for range 3 {
		if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{}`); resp.StatusCode != 201 || !strings.Contains(body, `"n2a`) {
			t.Fatalf("create with one node held down: %d %s", resp.StatusCode, body)
		}
	}
	if err := f.g.SetMembers(members("")[:1]); err != nil {
		t.Fatal(err)
	}
	if resp, body := f.do("GET", "/v1/sandboxes/"+sb.ID, f.key, ""); resp.StatusCode != 404 {
		t.Errorf("a sandbox of a node removed from the fleet: %d %s, want 404", resp.StatusCode, body)
	}
	bad := []Member{{FleetNode: config.FleetNode{ID: "n2a", URL: "ftp://x"}, Source: SourceKubernetes}}
	if err := f.g.SetMembers(bad); err == nil || f.g.members().byID["n2a"] != a {
		t.Errorf("a bad member: err %v, and the fleet must stay as it was", err)
	}
}

// A template of the cluster's catalog that no node has is pulled from its
// image onto the node a create goes to, once, as a public template; a
// template a node has is not pulled.
func TestTemplateCatalog(t *testing.T) {
	f := newFleet(t, "n2a")
	f.nodes["n2a"].templates = []string{"base"}
	f.g.pollAll(context.Background())
	f.g.SetTemplateCatalog(map[string]string{"cat": "198.19.250.1:5000/agentbox/cat:1", "base": "198.19.250.1:5000/agentbox/base:1"})
	for i := 0; i < 2; i++ {
		if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{"template":"cat"}`); resp.StatusCode != 201 {
			t.Fatalf("create %d from the catalog: %d %s", i, resp.StatusCode, body)
		}
	}
	if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{"template":"base"}`); resp.StatusCode != 201 {
		t.Fatalf("create of a template the node has: %d %s", resp.StatusCode, body)
	}
	n := f.nodes["n2a"]
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.pulls) != 1 || n.pulls[0] != (api.PullRequest{Ref: "198.19.250.1:5000/agentbox/cat:1", Name: "cat"}) {
		t.Errorf("pulls = %+v, want one of cat's image", n.pulls)
	}
}
