package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/console"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// newKeyedServer is a Server on a real store with no drivers: enough for
// authentication, the console's files and the ticket routes.
func newKeyedServer(t *testing.T) (*Server, *store.Store, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := &config.Config{DataDir: dir, RunDir: dir}
	svc := sandbox.New(sandbox.Options{Config: cfg, Store: st})
	secret, _, err := auth.CreateKey(ctx, st, "default", "test", false)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Service: svc, Store: st, Auth: auth.New(st, filepath.Join(dir, "admin.key"), nil)})
	return s, st, secret
}

// TestConsoleShellNeedsNoKey: the console's static files load without a
// key and carry the CSP; every API route still refuses a request without
// one (the console adds no way around the API's authentication).
func TestConsoleShellNeedsNoKey(t *testing.T) {
	s, _, secret := newKeyedServer(t)
	for _, path := range []string{"/console/", "/console/app.js", "/console/app.css"} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != http.StatusOK {
			t.Errorf("GET %s without a key: %d, want 200", path, w.Code)
		}
		if w.Header().Get("Content-Security-Policy") != console.CSP {
			t.Errorf("GET %s: no Content-Security-Policy", path)
		}
	}
	fill := strings.NewReplacer("{id}", "abcdefghijkl", "{pid}", "1", "{ref}", "1", "{name}", "base", "{ctx}", "c")
	for _, r := range api.Routes {
		path := fill.Replace(r.Path)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(r.Method, path, strings.NewReader("{}")))
		if w.Code != http.StatusUnauthorized {
			t.Errorf("%s %s without a key: %d, want 401", r.Method, path, w.Code)
		}
	}
	// With the key, the same data call answers.
	r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
	r.Header.Set("Authorization", "Bearer "+secret)
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Errorf("GET /v1/sandboxes with the key: %d %s", w.Code, w.Body)
	}
}

// TestTickets: a ticket opens one WebSocket path once, as its key, and
// nothing else; a revoked key's ticket is refused.
func TestTickets(t *testing.T) {
	s, st, secret := newKeyedServer(t)
	wsPath := "/v1/sandboxes/abcdefghijkl/pty/7/ws"
	issue := func(path, key string) (int, api.Ticket) {
		r := httptest.NewRequest("POST", "/v1/tickets", bytes.NewReader([]byte(`{"path":"`+path+`"}`)))
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		var tk api.Ticket
		_ = json.Unmarshal(w.Body.Bytes(), &tk)
		return w.Code, tk
	}
	upgrade := func(path, ticket string) int {
		r := httptest.NewRequest("GET", path+"?ticket="+ticket, nil)
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", "websocket")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Code
	}
	if code, _ := issue(wsPath, ""); code != http.StatusUnauthorized {
		t.Errorf("a ticket without a key: %d, want 401", code)
	}
	for _, bad := range []string{"/v1/sandboxes", "/v1/sandboxes/x/files", "/v1/sandboxes/x/pty/1/ws/x", "/v1/keys", "/v1/sandboxes//pty/1/ws"} {
		if code, _ := issue(bad, secret); code != http.StatusBadRequest {
			t.Errorf("a ticket for %s: %d, want 400", bad, code)
		}
	}
	code, tk := issue(wsPath, secret)
	if code != http.StatusCreated || tk.Ticket == "" || tk.Path != wsPath {
		t.Fatalf("a ticket: %d %+v", code, tk)
	}
	// For another path it fails, and is spent.
	if got := upgrade("/v1/sandboxes/abcdefghijkl/pty/8/ws", tk.Ticket); got != http.StatusUnauthorized {
		t.Errorf("a ticket on another path: %d, want 401", got)
	}
	if got := upgrade(wsPath, tk.Ticket); got != http.StatusUnauthorized {
		t.Errorf("a spent ticket: %d, want 401", got)
	}
	// A good one gets past authentication: the sandbox does not exist (404).
	_, tk = issue(wsPath, secret)
	if got := upgrade(wsPath, tk.Ticket); got != http.StatusNotFound {
		t.Errorf("a good ticket: %d, want 404 (past authentication, no such sandbox)", got)
	}
	if got := upgrade(wsPath, tk.Ticket); got != http.StatusUnauthorized {
		t.Errorf("a ticket used twice: %d, want 401", got)
	}
	// A ticket is not a key for anything but a WebSocket upgrade.
	_, tk = issue(wsPath, secret)
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", "/v1/sandboxes?ticket="+tk.Ticket, nil))
	if w.Code != http.StatusUnauthorized {
		t.Errorf("a ticket on a plain request: %d, want 401", w.Code)
	}
	// Revoking the key spoils its outstanding tickets.
	_, tk = issue(wsPath, secret)
	k, err := st.KeyByHash(context.Background(), auth.Hash(secret))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RevokeKey(context.Background(), k.ID); err != nil {
		t.Fatal(err)
	}
	if got := upgrade(wsPath, tk.Ticket); got != http.StatusUnauthorized {
		t.Errorf("a revoked key's ticket: %d, want 401", got)
	}
}
