package gateway

import (
	"context"
	"slices"
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

// waitFor polls cond until it holds (or fails the test after 10 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
	}
}

// A spread fork streams the snapshot to the target, creates the children
// there, then releases the copy (gone with its last child), pushes the
// parent's node's snapshot to the registry and releases it only then;
// its answer has each step's time.
func TestSpreadForkReleasesSnapshots(t *testing.T) {
	for _, registry := range []string{"127.0.0.1:5000/agentbox", ""} {
		t.Run("registry="+registry, func(t *testing.T) {
			f := newFleet(t, "n2a", "n3b")
			f.g.o.Registry = registry
			a, b := f.nodes["n2a"], f.nodes["n3b"]
			parent := a.add(time.Now())
			a.mu.Lock()
			a.memoryMB = 1 // every child goes to n3b
			a.mu.Unlock()
			f.g.pollAll(context.Background())
			resp, body := f.do("POST", "/v1/sandboxes/"+parent.ID+"/fork", f.key, `{"count":2,"spread":true}`)
			if resp.StatusCode != 201 || strings.Count(body, `"id":"n3b`) != 2 {
				t.Fatalf("spread fork: %d %s", resp.StatusCode, body)
			}
			if st := resp.Header.Get("Server-Timing"); !strings.Contains(st, "stream;dur=") || !strings.Contains(st, "total;dur=") {
				t.Errorf("Server-Timing %q: want the steps", st)
			}
			snap, cp := "/v1/snapshots/n2asnapaaaaaaaa", "/v1/snapshots/n3bcopyaaaaaaaa"
			waitFor(t, "the copy's release on n3b", func() bool { return slices.Contains(b.callLog(), "DELETE "+cp+"?when_unused=true") })
			wantB := []string{"POST /v1/snapshots/import", "DELETE " + cp + "?when_unused=true"}
			if got := b.callLog(); !slices.Equal(got, wantB) {
				t.Errorf("n3b's calls %v, want %v", got, wantB)
			}
			wantA := []string{"POST /v1/sandboxes/" + parent.ID + "/snapshots", "GET " + snap + "/export"}
			if registry != "" {
				wantA = append(wantA, "POST "+snap+"/push")
			}
			wantA = append(wantA, "DELETE "+snap+"?when_unused=true")
			waitFor(t, "the snapshot's release on n2a", func() bool { return len(a.callLog()) == len(wantA) })
			if got := a.callLog(); !slices.Equal(got, wantA) {
				t.Errorf("n2a's calls %v, want %v", got, wantA)
			}
		})
	}
}
