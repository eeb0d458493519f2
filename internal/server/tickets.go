package server

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/auth"
)

// WebSocket tickets (api/ticket.go): a browser cannot put a key in a
// WebSocket's headers, and a key in a URL ends up in histories and logs;
// a ticket is good once, for one path, for api.TicketTTLSeconds, and is
// redeemed by checking the key that asked for it again (by its hash,
// which is all a ticket keeps), so it is never more than that key.

// maxTicketsPerKey bounds the tickets one key has outstanding; the
// table holds no expired ticket past the next issue.
const maxTicketsPerKey = 64

type ticket struct {
	keyID   string
	keyHash []byte
	path    string
	expires time.Time
}

type ticketTable struct {
	mu sync.Mutex
	// m maps a ticket's secret to what it opens.
	m map[string]ticket
}

// issue records a ticket for path on behalf of the key (its id and hash).
func (t *ticketTable) issue(keyID string, keyHash []byte, path string, now time.Time) (string, time.Time, error) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	secret := base64.RawURLEncoding.EncodeToString(b)
	exp := now.Add(api.TicketTTLSeconds * time.Second)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]ticket{}
	}
	n := 0
	for k, v := range t.m {
		switch {
		case now.After(v.expires):
			delete(t.m, k)
		case v.keyID == keyID:
			n++
		}
	}
	if n >= maxTicketsPerKey {
		return "", time.Time{}, errdefs.Exhausted("API key %s has %d unused WebSocket tickets; use them or wait %ds", keyID, n, api.TicketTTLSeconds)
	}
	t.m[secret] = ticket{keyID: keyID, keyHash: keyHash, path: path, expires: exp}
	return secret, exp, nil
}

// take removes the ticket and returns it when it is good for path now.
func (t *ticketTable) take(secret, path string, now time.Time) (ticket, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk, ok := t.m[secret]
	if !ok {
		return ticket{}, false
	}
	delete(t.m, secret) // once, whatever the outcome
	if now.After(tk.expires) || subtle.ConstantTimeCompare([]byte(tk.path), []byte(path)) != 1 {
		return ticket{}, false
	}
	return tk, true
}

// ticketPath says whether path is one a ticket may open: a PTY's
// WebSocket.
func ticketPath(path string) bool {
	rest, ok := strings.CutPrefix(path, "/v1/sandboxes/")
	if !ok {
		return false
	}
	parts := strings.Split(rest, "/")
	return len(parts) == 4 && parts[0] != "" && parts[1] == "pty" && parts[2] != "" && parts[3] == "ws" &&
		!strings.ContainsAny(rest, "?#%")
}

func (s *Server) createTicket(w http.ResponseWriter, r *http.Request) {
	var req api.TicketRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if !ticketPath(req.Path) {
		writeError(w, errdefs.Invalid("path must be a PTY's WebSocket, /v1/sandboxes/{id}/pty/{pid}/ws, got %q", req.Path))
		return
	}
	hash := auth.SecretHash(r)
	if hash == nil { // an in-process caller (MCP) has no key to hand on
		writeError(w, errdefs.New(errdefs.ErrPermissionDenied, "a ticket needs a request with an API key in its Authorization header"))
		return
	}
	secret, exp, err := s.tickets.issue(principal(r.Context()).KeyID, hash, req.Path, time.Now())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.Ticket{Ticket: secret, Path: req.Path, ExpiresAt: exp})
}

// ticketPrincipal authenticates a WebSocket request that carries a ticket
// (?ticket=, no Authorization header), removing the ticket from the
// request's URL so that nothing downstream sees or logs it. ok is false
// when r is not such a request.
func (s *Server) ticketPrincipal(r *http.Request) (p auth.Principal, ok bool, err error) {
	if r.Method != http.MethodGet || r.Header.Get("Authorization") != "" || !isUpgrade(r) {
		return p, false, nil
	}
	q := r.URL.Query()
	secret := q.Get("ticket")
	if secret == "" {
		return p, false, nil
	}
	q.Del("ticket")
	r.URL.RawQuery = q.Encode()
	r.RequestURI = r.URL.RequestURI()
	tk, good := s.tickets.take(secret, r.URL.Path, time.Now())
	if !good {
		return p, true, errdefs.New(errdefs.ErrUnauthenticated, "invalid WebSocket ticket: a ticket is good once, for %ds, for the path it was issued for; ask POST /v1/tickets for another", api.TicketTTLSeconds)
	}
	p, err = s.auth.AuthenticateHash(r.Context(), tk.keyHash)
	return p, true, err
}

// ticketHandlers are the routes this file serves.
func (s *Server) ticketHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /v1/tickets": s.createTicket,
	}
}
