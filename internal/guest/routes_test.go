package guest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/guest/proto"
)

// TestServerServesEveryRoute holds the agent's mux to the protocol's
// route table: every route of proto.Routes reaches a handler registered
// for exactly that route (proto.Checkpoint is gvisorserve's, on its own
// mux), so a route added to the table without a handler, or a handler
// registered by a literal that drifted from it, fails here.
func TestServerServesEveryRoute(t *testing.T) {
	g := newTestGuest(t, Config{Version: "test"})
	// One request first: Shutdown (the test's cleanup) stops only a
	// server that Serve has started, and the ping's answer is checked too.
	resp, err := g.client.Get(proto.Ping.URL())
	if err != nil {
		t.Fatal(err)
	}
	var info proto.Info
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.Protocol != proto.Version || info.Version != "test" {
		t.Errorf("ping answered %+v (%v), want protocol %d and version test", info, err, proto.Version)
	}
	mux, ok := g.srv.Handler().(*http.ServeMux)
	if !ok {
		t.Fatalf("the agent's handler is a %T, want the *http.ServeMux built from proto.Routes", g.srv.Handler())
	}
	for _, rt := range proto.Routes {
		if rt == proto.Checkpoint {
			continue
		}
		// Fill each {wildcard} with a value, as a request would.
		u := rt.URL("x1", "x2", "x3")
		req, err := http.NewRequest(rt.Method, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, pattern := mux.Handler(req); pattern != rt.Pattern() {
			t.Errorf("%s %s is routed to %q, want a handler for %q", rt.Method, strings.TrimPrefix(u, "http://guest"), pattern, rt.Pattern())
		}
	}
}
