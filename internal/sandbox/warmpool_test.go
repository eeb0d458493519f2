package sandbox

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/store"
)

// waitFor waits (generously) for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWarmPoolServesCreate(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	h.cfg.Pools = []config.WarmPool{{Template: "base", Isolation: "fake", Size: 1}}
	s := h.start()
	ready := func() bool { p := s.Pools(); return len(p) == 1 && p[0].Ready == 1 }
	waitFor(t, "the pool to fill", ready)
	member := h.drv.running()
	sb := create(t, s, nil)
	if !slices.Equal([]string{sb.ID}, member) {
		t.Errorf("created %s, want the pool's member %v", sb.ID, member)
	}
	if p := s.Pools()[0]; p.Served != 1 {
		t.Errorf("pool served %d, want 1", p.Served)
	}
	// It refills, and the sandbox it served is like any other.
	waitFor(t, "the pool to refill", ready)
	if err := s.Destroy(context.Background(), acme, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.leftNothing(sb.ID)
	// A request the pool cannot serve boots cold.
	cold := create(t, s, &api.CreateSandboxRequest{DiskMB: 2048})
	if p := s.Pools()[0]; p.Served != 1 {
		t.Errorf("pool served %d, want 1 (a disk size it has not)", p.Served)
	}
	if h.state(cold.ID) != api.StateRunning {
		t.Error("cold create is not running")
	}
	// Close destroys the ready members: nothing of them is left.
	s.Close()
	if got := h.drv.running(); !slices.Equal(got, []string{cold.ID}) {
		t.Errorf("after close the driver runs %v, want only %s", got, cold.ID)
	}
	if got := h.pool.layers(t); !slices.Equal(got, []string{cold.ID}) {
		t.Errorf("after close the layers are %v, want only %s's", got, cold.ID)
	}
}

// stubHost is a warmHost whose boots fail or make members with no
// sandbox behind them.
type stubHost struct {
	mu      sync.Mutex
	boots   int
	bootErr error
	version string
}

func (h *stubHost) bootMember(c config.WarmPool) (*member, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.boots++
	if h.bootErr != nil {
		return nil, h.bootErr
	}
	return nil, errors.New("stub: no members")
}

func (h *stubHost) fitMember(ctx context.Context, m *member, rec *store.SandboxRecord) error {
	return nil
}

func (h *stubHost) templateVersion(name string) string { return h.version }

// TestWarmPoolBackoff runs the pools on a host of their own: a boot that
// keeps failing is reported and retried after a back-off, not in a loop.
func TestWarmPoolBackoff(t *testing.T) {
	t.Parallel()
	host := &stubHost{bootErr: errors.New("template gone"), version: "1"}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	w := &warmPools{host: host, log: slog.New(slog.NewTextHandler(io.Discard, nil)), stop: stop, wg: &wg}
	w.start([]config.WarmPool{{Template: "base", Isolation: "fake", Size: 2}})
	defer func() { close(stop); wg.Wait(); w.close() }()
	w.wake()
	waitFor(t, "a failed boot to be reported", func() bool {
		st := w.status()
		return st[0].Failures > 0 && st[0].LastError == "template gone"
	})
	time.Sleep(200 * time.Millisecond)
	host.mu.Lock()
	boots := host.boots
	host.mu.Unlock()
	if boots != 1 {
		t.Errorf("%d boots within the 5 s back-off, want 1", boots)
	}
	if st := w.status()[0]; st.Ready != 0 || st.Booted != 0 {
		t.Errorf("status %+v, want nothing ready or booted", st)
	}
}

// SetPools changes the pools of a running service: a pool added fills, one
// grown keeps its members and fills the rest, one shrunk drops the
// members past its size, one removed drops them all, and nothing of a
// dropped member is left.
func TestSetPools(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start() // no [[pool]]: no filler yet
	a := config.WarmPool{Template: "base", Isolation: "fake", Size: 1, CPU: 1, MemoryMB: 512, DiskMB: 1024, Pids: 512, Egress: "none"}
	readyOf := func(want ...int) func() bool {
		return func() bool {
			p := s.Pools()
			if len(p) != len(want) {
				return false
			}
			for i := range p {
				if p[i].Ready != want[i] {
					return false
				}
			}
			return len(h.drv.running()) == total(want)
		}
	}
	s.SetPools([]config.WarmPool{a})
	waitFor(t, "the added pool to fill", readyOf(1))
	first := h.drv.running()
	a.Size = 3
	s.SetPools([]config.WarmPool{a})
	waitFor(t, "the grown pool to fill", readyOf(3))
	if !slices.Contains(h.drv.running(), first[0]) {
		t.Error("growing the pool dropped its member")
	}
	b := a
	b.Size, b.MemoryMB = 1, 256
	a.Size = 1
	s.SetPools([]config.WarmPool{a, b})
	waitFor(t, "one shrunk, one added", readyOf(1, 1))
	s.SetPools(nil)
	waitFor(t, "every pool removed", readyOf())
	if got := h.pool.layers(t); len(got) != 0 {
		t.Errorf("layers left by dropped members: %v", got)
	}
}

func total(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
