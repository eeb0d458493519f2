package usage

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/cgroups"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// fakeSource is a hand-written stand-in for the sandbox service.
type fakeSource struct {
	mu     sync.Mutex
	live   []sandbox.LiveSandbox
	events []string
}

func (f *fakeSource) Live() []sandbox.LiveSandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sandbox.LiveSandbox(nil), f.live...)
}

func (f *fakeSource) Emit(typ, id, detail string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, typ+" "+id)
}

type fakeDisk int64

func (d fakeDisk) LayerUsage(string) (int64, error) { return int64(d), nil }

// The sampler reads a real cgroup with a process in it, the veth's
// counters (a directory laid out as /sys/class/net) and the layer's use,
// and forgets a sandbox once it is gone.
func TestSampler(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	parent := fmt.Sprintf("agentbox-usage-test-%d", os.Getpid())
	m, err := cgroups.New(parent)
	if err != nil {
		t.Fatal(err)
	}
	const id = "usagetest001"
	cg, err := m.Create(id, cgroups.Resources{CPU: 0.5, MemoryBytes: 64 << 20, Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	paths := cg.Paths()
	t.Cleanup(func() {
		_ = cg.Destroy()
		for _, p := range paths {
			_ = os.Remove(filepath.Dir(p)) // the test's parent
		}
	})
	// The loop starts (exec: a new address space, every page of it
	// faulted in) only once the process is in the cgroup: on cgroup v1
	// the memory a task charged before it moved stays where it was, and
	// a busy loop charges nothing new, so its cgroup could read 0 bytes.
	cmd := exec.Command("sh", "-c", "read go; exec sh -c 'while :; do :; done'")
	start, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := cg.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := start.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	net := t.TempDir()
	stats := filepath.Join(net, "abx"+id, "statistics")
	if err := os.MkdirAll(stats, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(stats, "rx_bytes"), []byte("100\n"), 0o644)
	_ = os.WriteFile(filepath.Join(stats, "tx_bytes"), []byte("200\n"), 0o644)

	src := &fakeSource{live: []sandbox.LiveSandbox{{ID: id}}}
	s, err := New(Options{Source: src, Disk: fakeDisk(4096), CgroupParent: parent, Interval: time.Second, SysClassNet: net})
	if err != nil {
		t.Fatal(err)
	}
	s.SampleOnce()
	// CPU time accrues while the loop runs; wait until it has some.
	deadline := time.Now().Add(30 * time.Second)
	for {
		time.Sleep(200 * time.Millisecond)
		s.SampleOnce()
		smp := s.Samples(id, time.Time{})
		last := smp[len(smp)-1]
		if last.CPUPercent > 0 && last.CPUSeconds > 0 {
			if last.Pids < 1 || last.MemoryBytes <= 0 || last.DiskBytes != 4096 || last.RxBytes != 200 || last.TxBytes != 100 {
				t.Errorf("sample = %+v; want pids >= 1, memory > 0, disk 4096, rx 200 (the host end's tx), tx 100", last)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CPU use sampled in 30 s: %+v", smp)
		}
	}
	if l := s.Latest(); len(l) != 1 {
		t.Errorf("Latest has %d sandboxes, want 1", len(l))
	}
	if since := s.Samples(id, time.Now().Add(time.Hour)); len(since) != 0 {
		t.Errorf("samples after an hour from now: %d", len(since))
	}
	src.mu.Lock()
	src.live = nil
	src.mu.Unlock()
	s.SampleOnce()
	if smp := s.Samples(id, time.Time{}); len(smp) != 0 {
		t.Errorf("a gone sandbox keeps %d samples", len(smp))
	}
}
