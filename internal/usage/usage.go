// Package usage samples every live sandbox's resource use (CPU, memory,
// disk, network bytes, pids) every few seconds and keeps the last hour of
// samples in memory, for GET /v1/sandboxes/{id}/metrics and `agentbox
// stats`. It reads what the host already counts (the sandbox's cgroups,
// its btrfs layer's qgroup, its veth's counters), so nothing runs inside
// the sandbox and nothing is added to a create or an exec. A rise in the
// cgroup's OOM kill count is reported as an oom event.
package usage

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/cgroups"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Keep is how long samples are kept.
const Keep = time.Hour

// Source is what the sampler needs of the sandbox service.
type Source interface {
	Live() []sandbox.LiveSandbox
	Emit(typ, id, detail string)
}

// DiskSource reads a sandbox's writable layer use (storage.Pool).
type DiskSource interface {
	LayerUsage(id string) (int64, error)
}

// Options configure a Sampler.
type Options struct {
	Source       Source
	Disk         DiskSource
	CgroupParent string
	Interval     time.Duration // default 5s
	Logger       *slog.Logger
	// SysClassNet is /sys/class/net (tests point it elsewhere).
	SysClassNet string
}

// Sampler keeps the samples.
type Sampler struct {
	o   Options
	cg  cgroups.Manager
	max int

	mu sync.Mutex
	// by holds each live sandbox's samples, oldest first, and the
	// cgroup it reads.
	by map[string]*series
}

type series struct {
	cg      cgroups.Cgroup
	samples []api.UsageSample
	oom     int64
	lastOOM time.Time // the sample that saw oom rise last
	lastCPU uint64
}

// New returns a sampler; Run samples until its context ends.
func New(o Options) (*Sampler, error) {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SysClassNet == "" {
		o.SysClassNet = "/sys/class/net"
	}
	m, err := cgroups.New(o.CgroupParent)
	if err != nil {
		return nil, fmt.Errorf("usage sampler: %w", err)
	}
	return &Sampler{o: o, cg: m, max: int(Keep / o.Interval), by: map[string]*series{}}, nil
}

// Interval is the time between samples.
func (s *Sampler) Interval() time.Duration { return s.o.Interval }

// Run samples every Interval until ctx is done.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	for {
		s.SampleOnce()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SampleOnce takes one sample of every live sandbox and forgets the
// sandboxes that are gone.
func (s *Sampler) SampleOnce() {
	now := time.Now().UTC()
	live := s.o.Source.Live()
	seen := make(map[string]bool, len(live))
	for _, sb := range live {
		seen[sb.ID] = true
		s.sample(sb, now)
	}
	s.mu.Lock()
	for id := range s.by {
		if !seen[id] {
			delete(s.by, id)
		}
	}
	s.mu.Unlock()
}

func (s *Sampler) sample(sb sandbox.LiveSandbox, now time.Time) {
	s.mu.Lock()
	sr := s.by[sb.ID]
	s.mu.Unlock()
	if sr == nil {
		cg, err := s.cg.Open(sb.ID)
		if err != nil {
			return // not made yet, or being destroyed
		}
		sr = &series{cg: cg}
	}
	st, err := sr.cg.Stats()
	if err != nil {
		return
	}
	smp := api.UsageSample{
		Time:        now,
		CPUSeconds:  float64(st.CPUNanos) / 1e9,
		MemoryBytes: st.MemoryBytes,
		Pids:        st.Pids,
	}
	if s.o.Disk != nil {
		smp.DiskBytes, _ = s.o.Disk.LayerUsage(sb.ID)
	}
	// The host end of the veth: what it receives the sandbox sent.
	dev := filepath.Join(s.o.SysClassNet, network.HostVeth(sb.ID), "statistics")
	smp.TxBytes = readCounter(filepath.Join(dev, "rx_bytes"))
	smp.RxBytes = readCounter(filepath.Join(dev, "tx_bytes"))

	s.mu.Lock()
	if n := len(sr.samples); n > 0 {
		prev := sr.samples[n-1]
		if dt := now.Sub(prev.Time).Seconds(); dt > 0 && st.CPUNanos >= sr.lastCPU {
			smp.CPUPercent = float64(st.CPUNanos-sr.lastCPU) / 1e9 / dt * 100
		}
	}
	sr.lastCPU = st.CPUNanos
	if len(sr.samples) >= s.max {
		sr.samples = append(sr.samples[:0], sr.samples[1:]...)
	}
	sr.samples = append(sr.samples, smp)
	newOOM := st.OOMKills - sr.oom
	sr.oom = st.OOMKills
	if newOOM > 0 {
		sr.lastOOM = now
	}
	s.by[sb.ID] = sr
	s.mu.Unlock()
	if newOOM > 0 {
		s.o.Source.Emit(events.OOM, sb.ID, fmt.Sprintf("the OOM killer killed %d process(es); %d in all", newOOM, st.OOMKills))
	}
}

func readCounter(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// OOM returns how many processes the OOM killer has killed in sandbox
// id's cgroup as of the last sample, and when a sample first saw the
// latest (zero: none seen).
func (s *Sampler) OOM(id string) (kills int64, last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sr := s.by[id]; sr != nil {
		return sr.oom, sr.lastOOM
	}
	return 0, time.Time{}
}

// Samples returns sandbox id's samples taken after since (zero: all),
// oldest first.
func (s *Sampler) Samples(id string, since time.Time) []api.UsageSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.by[id]
	if sr == nil {
		return []api.UsageSample{}
	}
	out := make([]api.UsageSample, 0, len(sr.samples))
	for _, smp := range sr.samples {
		if smp.Time.After(since) {
			out = append(out, smp)
		}
	}
	return out
}

// Latest returns every sandbox's last sample, by id, for the metrics.
func (s *Sampler) Latest() map[string]api.UsageSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]api.UsageSample, len(s.by))
	for id, sr := range s.by {
		if n := len(sr.samples); n > 0 {
			out[id] = sr.samples[n-1]
		}
	}
	return out
}
