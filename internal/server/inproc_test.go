package server

import (
	"context"
	"net/http"
	"testing"

	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// A handler that panics under InProcessClient ends its request with an
// error, as under net/http's server, and the process goes on: the
// ReverseProxy of a fleet gateway aborts with http.ErrAbortHandler when
// the in-process caller goes away mid-answer.
func TestInProcessHandlerPanics(t *testing.T) {
	var mode string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, err := tenancy.From(r.Context()); err != nil || p.Tenant != "acme" {
			t.Errorf("the handler saw principal %+v, %v; want acme", p, err)
		}
		switch mode {
		case "before":
			panic(http.ErrAbortHandler)
		case "after":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			w.Write([]byte(`{"status":`))
			panic("a bug")
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"status":"ok","version":"t"}`))
		}
	})
	c := InProcessClient(h, auth.Principal{Tenant: "acme", KeyID: "k"})
	ctx := context.Background()
	if hl, err := c.Health(ctx); err != nil || hl.Status != "ok" {
		t.Fatalf("health: %+v, %v", hl, err)
	}
	for _, mode = range []string{"before", "after"} {
		if _, err := c.Health(ctx); err == nil {
			t.Errorf("a handler that panicked %s answering: no error", mode)
		}
	}
	mode = ""
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("health after the panics: %v", err)
	}
}
