package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Peer is a published create figure of another sandbox system, printed
// beside ours. These are the vendors' own published numbers on their own
// hardware, not measured here: compare orders of magnitude, not ratios
// to the last decimal.
type Peer struct {
	Name   string  `json:"name"`
	P50    float64 `json:"p50_ms"`           // typical create, ms
	P99    float64 `json:"p99_ms,omitempty"` // where published
	Figure string  `json:"figure"`           // as published
}

// Peers are the published create times the issue names.
var Peers = []Peer{
	{Name: "E2B", P50: 150, Figure: "about 150 ms"},
	{Name: "Daytona", P50: 90, Figure: "under 90 ms"},
	{Name: "PandaStack", P50: 179, P99: 203, Figure: "179 ms p50, 203 ms p99"},
	{Name: "hosted services", P50: 1000, P99: 3000, Figure: "1-3 s"},
}

// writePeers prints the peers' published creates next to this run's
// cold and pool create p50 (first template).
func (r *Report) writePeers(w io.Writer) {
	var cold, pool *Result
	for i := range r.Results {
		res := &r.Results[i]
		if res.N == 0 {
			continue
		}
		if res.Group != GroupLifecycle || !strings.HasPrefix(res.Name, "create/") {
			continue
		}
		if strings.HasSuffix(res.Name, "(pool)") {
			if pool == nil {
				pool = res
			}
		} else if cold == nil {
			cold = res
		}
	}
	if cold == nil && pool == nil {
		return
	}
	fmt.Fprintf(w, "\n== peers (their published create times, not measured here)\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "system\tpublished\t"
	if cold != nil {
		head += fmt.Sprintf("vs our cold %s p50 %.2f ms\t", cold.Name, cold.P50)
	}
	if pool != nil {
		head += fmt.Sprintf("vs our %s p50 %.2f ms\t", pool.Name, pool.P50)
	}
	fmt.Fprintln(tw, head)
	for _, p := range Peers {
		line := p.Name + "\t" + p.Figure + "\t"
		if cold != nil {
			line += fmt.Sprintf("%.1fx ours\t", p.P50/cold.P50)
		}
		if pool != nil {
			line += fmt.Sprintf("%.0fx ours\t", p.P50/pool.P50)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// measuredPeers are the baselines of tools a user could pick instead,
// run in the same bench (baseline_linux.go).
var measuredPeers = []string{"baseline/runc", "baseline/runsc", "baseline/bwrap", "baseline/docker"}

// writeMeasuredPeers prints our create-to-first-output (a sandbox made and
// its first command's output back, what `docker run` of a command
// amounts to) next to each peer measured in this run, with the ratio.
func (r *Report) writeMeasuredPeers(w io.Writer) {
	ours := r.Find("create-to-first-output")
	if ours == nil || ours.N == 0 {
		return
	}
	var rows []*Result
	for _, name := range measuredPeers {
		if p := r.Find(name); p != nil && p.N > 0 {
			rows = append(rows, p)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== peers measured here (running `true` in the busybox root filesystem) vs our create-to-first-output p50 %.2f ms\n", ours.P50)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "peer\tp50 ms\tp99 ms\tours / peer (p50)\t")
	for _, p := range rows {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2fx\t\n", strings.TrimPrefix(p.Name, "baseline/"), p.P50, p.P99, ours.P50/p.P50)
	}
	tw.Flush()
}
