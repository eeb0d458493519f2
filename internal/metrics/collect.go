package metrics

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/tenancy"
)

var (
	descSandboxes   = prometheus.NewDesc("agentbox_sandboxes", "Sandboxes by state and tier (destroyed ones left out).", []string{"state", "tier"}, nil)
	descPoolSize    = prometheus.NewDesc("agentbox_warm_pool_size", "Sandboxes a warm pool keeps ready.", []string{"pool", "template", "tier"}, nil)
	descPoolReady   = prometheus.NewDesc("agentbox_warm_pool_ready", "Sandboxes ready in a warm pool now.", []string{"pool", "template", "tier"}, nil)
	descPoolFills   = prometheus.NewDesc("agentbox_warm_pool_fills_total", "Sandboxes a warm pool has booted.", []string{"pool", "template", "tier"}, nil)
	descPoolServed  = prometheus.NewDesc("agentbox_warm_pool_served_total", "Creates a warm pool answered.", []string{"pool", "template", "tier"}, nil)
	descPoolMisses  = prometheus.NewDesc("agentbox_warm_pool_misses_total", "Creates that matched a warm pool while it was empty.", []string{"pool", "template", "tier"}, nil)
	descPoolFailed  = prometheus.NewDesc("agentbox_warm_pool_failures_total", "Failed boots of a warm pool.", []string{"pool", "template", "tier"}, nil)
	descEgress      = prometheus.NewDesc("agentbox_egress_decisions_total", "Egress decisions of the sandboxes' resolvers, proxies and firewalls, by kind (dns, connect) and verdict (allow, deny).", []string{"kind", "verdict"}, nil)
	descSubnets     = prometheus.NewDesc("agentbox_host_subnets_free", "Sandbox subnets left in the network pool.", nil, nil)
	descUIDRanges   = prometheus.NewDesc("agentbox_host_uid_ranges_free", "Sandbox host uid ranges left to hand out (uid_ranges).", nil, nil)
	descMemAvail    = prometheus.NewDesc("agentbox_host_memory_available_bytes", "The host's MemAvailable.", nil, nil)
	descDiskFree    = prometheus.NewDesc("agentbox_host_disk_free_bytes", "Bytes free in the storage pool (the data dir where it has none).", nil, nil)
	descScrapeError = prometheus.NewDesc("agentbox_scrape_errors", "Sources that could not be read for this scrape.", []string{"source"}, nil)
)

// stateCollector reads the gauges at scrape time.
type stateCollector struct{ m *Metrics }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSandboxes, descPoolSize, descPoolReady, descPoolFills, descPoolServed,
		descPoolMisses, descPoolFailed, descEgress, descSubnets, descUIDRanges, descMemAvail, descDiskFree, descScrapeError} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	o := c.m.o
	if o.Sandboxes != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := o.Sandboxes.List(ctx, tenancy.AllTenants(), sandbox.ListFilter{})
		cancel()
		if err != nil {
			ch <- prometheus.MustNewConstMetric(descScrapeError, prometheus.GaugeValue, 1, "sandboxes")
		} else {
			type key struct{ state, tier string }
			n := map[key]int{}
			for _, sb := range list {
				n[key{sb.State, sb.Isolation}]++
			}
			for k, v := range n {
				ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, float64(v), k.state, k.tier)
			}
		}
		for i, p := range o.Sandboxes.Pools() {
			l := []string{strconv.Itoa(i), p.Template, p.Isolation}
			ch <- prometheus.MustNewConstMetric(descPoolSize, prometheus.GaugeValue, float64(p.Size), l...)
			ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(p.Ready), l...)
			ch <- prometheus.MustNewConstMetric(descPoolFills, prometheus.CounterValue, float64(p.Booted), l...)
			ch <- prometheus.MustNewConstMetric(descPoolServed, prometheus.CounterValue, float64(p.Served), l...)
			ch <- prometheus.MustNewConstMetric(descPoolMisses, prometheus.CounterValue, float64(p.Misses), l...)
			ch <- prometheus.MustNewConstMetric(descPoolFailed, prometheus.CounterValue, float64(p.Failures), l...)
		}
	}
	if o.Network != nil {
		for _, d := range o.Network.EgressDecisions() {
			ch <- prometheus.MustNewConstMetric(descEgress, prometheus.CounterValue, float64(d.Count), d.Kind, d.Verdict)
		}
		ch <- prometheus.MustNewConstMetric(descSubnets, prometheus.GaugeValue, float64(o.Network.SubnetsFree()))
	}
	if o.UIDRanges != nil {
		ch <- prometheus.MustNewConstMetric(descUIDRanges, prometheus.GaugeValue, float64(o.UIDRanges.Free()))
	}
	if v, ok := memAvailable(); ok {
		ch <- prometheus.MustNewConstMetric(descMemAvail, prometheus.GaugeValue, v)
	}
	if o.DataDir != "" {
		dir := filepath.Join(o.DataDir, "storage")
		if _, err := os.Stat(dir); err != nil {
			dir = o.DataDir
		}
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) == nil {
			ch <- prometheus.MustNewConstMetric(descDiskFree, prometheus.GaugeValue, float64(st.Bavail)*float64(st.Bsize))
		}
	}
}

// memAvailable reads MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (float64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
