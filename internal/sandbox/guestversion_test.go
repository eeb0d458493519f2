package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/store"
)

// TestAdoptedGuestVersion: after a restart, a sandbox whose agent speaks
// a protocol this daemon serves (0 included: agents from before
// versioning) is served; one whose agent speaks another is refused guest
// requests with a message saying to restart it, and its record says so
// too until a later check finds an agent it serves; a new init (a reset)
// is not held to its predecessor's verdict; a paused sandbox's agent is
// asked at its first guest request.
func TestAdoptedGuestVersion(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateSandbox(ctx, &store.SandboxRecord{ID: "sb1", Tenant: "t1", State: api.StateRunning, Isolation: "container"}); err != nil {
		t.Fatal(err)
	}
	var protocol atomic.Int64
	var pings atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != proto.Ping.Path {
			http.NotFound(w, r)
			return
		}
		pings.Add(1)
		fmt.Fprintf(w, `{"version":"v-test","protocol":%d,"pid":1}`, protocol.Load())
	}))
	defer srv.Close()
	s := New(Options{Store: st, Logger: slog.New(slog.DiscardHandler)})
	addr := srv.Listener.Addr().String()
	e := &entry{id: "sb1", guest: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}}
	e.hp.Store(&driver.Handle{ID: "sb1"})
	recError := func() string {
		rec, err := st.GetSandbox(ctx, "sb1")
		if err != nil {
			t.Fatal(err)
		}
		return rec.Error
	}

	// An agent from before versioning (no protocol field: 0) is served.
	protocol.Store(0)
	s.checkAdoptedGuest(ctx, e, false)
	if err := s.guestRefused(ctx, e); err != nil {
		t.Fatalf("an agent of protocol 0 is refused: %v", err)
	}
	if got := recError(); got != "" {
		t.Errorf("record error %q for a served agent", got)
	}

	// One newer than this daemon is refused, and the record says why.
	protocol.Store(proto.Version + 1)
	s.checkAdoptedGuest(ctx, e, false)
	err = s.guestRefused(ctx, e)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("guestRefused = %v, want a failed precondition", err)
	}
	for _, want := range []string{"sandbox sb1 needs a restart", fmt.Sprintf("speaks guest protocol %d", proto.Version+1), "create it again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if got := recError(); !strings.HasPrefix(got, guestRefusedPrefix) {
		t.Errorf("record error %q, want it to start with %q", got, guestRefusedPrefix)
	}

	// A new init (a reset swaps the handle) is the daemon's own agent.
	old := e.handle()
	e.hp.Store(&driver.Handle{ID: "sb1"})
	if err := s.guestRefused(ctx, e); err != nil {
		t.Errorf("a new init is refused for its predecessor's agent: %v", err)
	}
	e.hp.Store(old)

	// A later check that finds a served agent clears the record's error.
	protocol.Store(proto.Version)
	s.checkAdoptedGuest(ctx, e, false)
	if err := s.guestRefused(ctx, e); err != nil {
		t.Errorf("refused after a served answer: %v", err)
	}
	if got := recError(); got != "" {
		t.Errorf("record error %q after a served answer, want none", got)
	}

	// Paused: not asked at adoption, asked once at the first request.
	protocol.Store(proto.Version + 1)
	n := pings.Load()
	s.checkAdoptedGuest(ctx, e, true)
	if pings.Load() != n {
		t.Error("a paused sandbox's frozen agent was asked at adoption")
	}
	if err := s.guestRefused(ctx, e); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("first request to a paused-then-resumed sandbox with a newer agent: %v, want refused", err)
	}
	if err := s.guestRefused(ctx, e); !errors.Is(err, errdefs.ErrFailedPrecondition) || pings.Load() != n+1 {
		t.Errorf("second request: %v after %d pings, want refused after 1", err, pings.Load()-n)
	}
}
