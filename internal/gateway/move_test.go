package gateway

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// N concurrent callers of one key run the function once and share its
// result; a later call runs it again.
func TestFlightsSingle(t *testing.T) {
	var f flights
	var runs atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]string, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = f.do("k", func() (string, error) {
				runs.Add(1)
				<-release
				return "v", nil
			})
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if runs.Load() != 1 {
		t.Errorf("8 concurrent calls ran %d times, want 1", runs.Load())
	}
	for _, r := range results {
		if r != "v" {
			t.Errorf("a caller got %q", r)
		}
	}
	if _, err := f.do("k", func() (string, error) { runs.Add(1); return "", nil }); err != nil || runs.Load() != 2 {
		t.Errorf("a later call: %v, runs %d", err, runs.Load())
	}
}

// A fork without spread goes to the parent's node as it came.
func TestSpreadForkRequests(t *testing.T) {
	f := newFleet(t, "n2a", "n3b")
	sb := f.nodes["n2a"].add(time.Now())
	f.do("POST", "/v1/sandboxes/"+sb.ID+"/fork", f.key, `{"count":2}`)
	if p := f.nodes["n2a"].lastPath; p != "/v1/sandboxes/"+sb.ID+"/fork" {
		t.Errorf("a fork without spread reached %q on the parent's node", p)
	}
	// A named node that is not in the fleet.
	if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{"node":"zzz"}`); resp.StatusCode != 400 {
		t.Errorf("create on an unknown node: %d %s", resp.StatusCode, body)
	}
	if resp, body := f.do("POST", "/v1/sandboxes", f.key, `{"node":"n3b"}`); resp.StatusCode != 201 || !strings.Contains(body, `"id":"n3b`) {
		t.Errorf("create on a named node: %d %s", resp.StatusCode, body)
	}
}

// A lost node's sandboxes are counted in the fleet table.
func TestLostSandboxes(t *testing.T) {
	f := newFleet(t, "n2a", "n3b")
	f.nodes["n3b"].add(time.Now())
	f.nodes["n3b"].add(time.Now())
	f.g.pollAll(context.Background())
	f.nodes["n3b"].srv.Close()
	f.g.pollAll(context.Background())
	f.g.pollAll(context.Background())
	for _, n := range f.g.Nodes() {
		if n.ID == "n3b" && (n.Available || n.LostSandboxes != 2) {
			t.Errorf("n3b down with 2 sandboxes: %+v", n)
		}
		if n.ID == "n2a" && n.LostSandboxes != 0 {
			t.Errorf("n2a up: lost %d", n.LostSandboxes)
		}
	}
}
