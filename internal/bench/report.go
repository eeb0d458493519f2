package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Groups of results, in the order the table prints them.
const (
	GroupBaseline   = "baseline"
	GroupLifecycle  = "lifecycle"
	GroupExec       = "exec"
	GroupFiles      = "files"
	GroupThroughput = "throughput"
)

// Result is one measured line.
type Result struct {
	Name  string `json:"name"`
	Group string `json:"group"`
	Summary
	Errors int `json:"errors"`
	// Rate is a throughput where the line has one (MB/s, creates/s, ...).
	Rate     float64 `json:"rate,omitempty"`
	RateUnit string  `json:"rate_unit,omitempty"`
	// Floor names the baseline this line is judged against, and Ratio is
	// this line's p50 over the floor's p50.
	Floor string  `json:"floor,omitempty"`
	Ratio float64 `json:"ratio_to_floor,omitempty"`
	Note  string  `json:"note,omitempty"`
}

// Density is the memory an idle sandbox costs the host.
type Density struct {
	Sandboxes int    `json:"sandboxes"`
	Template  string `json:"template"`
	Cgroup    string `json:"cgroup_version"`
	// Per idle sandbox, in bytes: the cgroup's whole charge (usage), its
	// anonymous memory (rss) and page cache, kernel memory where the
	// kernel reports it apart, and the proportional set size of its
	// processes (shared pages divided between their users).
	UsagePer  int64 `json:"usage_bytes_per_sandbox"`
	RSSPer    int64 `json:"rss_bytes_per_sandbox"`
	CachePer  int64 `json:"cache_bytes_per_sandbox"`
	KmemPer   int64 `json:"kmem_bytes_per_sandbox,omitempty"`
	PSSPer    int64 `json:"pss_bytes_per_sandbox"`
	Processes int   `json:"processes"`
	// The daemon's resident set before the sandboxes were made and with
	// all of them idle, and the growth divided by their number.
	DaemonPID         int   `json:"daemon_pid,omitempty"`
	DaemonRSSBefore   int64 `json:"daemon_rss_before_bytes,omitempty"`
	DaemonRSSAfter    int64 `json:"daemon_rss_after_bytes,omitempty"`
	DaemonGrowthPer   int64 `json:"daemon_growth_bytes_per_sandbox,omitempty"`
	HostPer           int64 `json:"host_bytes_per_sandbox"` // max(UsagePer, PSSPer) + DaemonGrowthPer: what the budget is judged on
	CreateErrors      int   `json:"create_errors"`
	UnreadableCgroups int   `json:"unreadable_cgroups,omitempty"`
}

// Budget is one line of the performance budget, judged.
type Budget struct {
	What   string  `json:"what"`
	Limit  string  `json:"limit"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Pass   bool    `json:"pass"`
	Source string  `json:"source"` // where the limit comes from
	Floors string  `json:"floors,omitempty"`
}

// Machine describes where the figures were taken.
type Machine struct {
	Hostname  string    `json:"hostname"`
	Kernel    string    `json:"kernel"`
	CPUs      int       `json:"cpus"`
	MemTotal  int64     `json:"mem_total_bytes"`
	CPUModel  string    `json:"cpu_model,omitempty"`
	Cgroup    string    `json:"cgroup_version"`
	Daemon    string    `json:"daemon_version,omitempty"`
	GoVersion string    `json:"go_version"`
	Date      time.Time `json:"date"`
}

// Report is everything one run measured.
type Report struct {
	Machine Machine  `json:"machine"`
	Command string   `json:"command,omitempty"`
	Quick   bool     `json:"quick"`
	Results []Result `json:"results"`
	Density *Density `json:"density,omitempty"`
	// Scale are the cost curves, one point per level (scale.go).
	Scale   []ScalePoint `json:"scale,omitempty"`
	Budgets []Budget     `json:"budgets"`
	// Peers are the published figures printed beside ours (peers.go).
	Peers    []Peer   `json:"peers,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	Duration float64  `json:"duration_s"`
}

// Find returns the result named name, or nil.
func (r *Report) Find(name string) *Result {
	for i := range r.Results {
		if r.Results[i].Name == name {
			return &r.Results[i]
		}
	}
	return nil
}

// WriteJSON writes the report, indented, to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing report: %w", err)
	}
	return nil
}

// WriteTable prints the report for a person: one table per group, the
// density figures, the budget and the notes.
func (r *Report) WriteTable(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "agentbox bench  %s  kernel %s  %d CPUs  %.1f GiB  cgroup %s  daemon %s\n",
		m.Date.Format(time.RFC3339), m.Kernel, m.CPUs, float64(m.MemTotal)/(1<<30), m.Cgroup, m.Daemon)
	if m.CPUModel != "" {
		fmt.Fprintf(w, "cpu: %s\n", m.CPUModel)
	}
	for _, g := range []string{GroupBaseline, GroupLifecycle, GroupState, GroupExec, GroupClients, GroupFleet, GroupMCP, GroupCode, GroupDesktop, GroupFiles, GroupWorkload, GroupScale, GroupThroughput, GroupE2B} {
		var rows []Result
		for _, res := range r.Results {
			if res.Group == g {
				rows = append(rows, res)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n== %s\n", g)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "name\tn\terr\tp50 ms\tp90 ms\tp99 ms\tmax ms\trate\tvs floor p50\t")
		for _, res := range rows {
			rate := ""
			if res.RateUnit != "" {
				rate = fmt.Sprintf("%.1f %s", res.Rate, res.RateUnit)
			}
			ratio := ""
			if res.Floor != "" && res.Ratio > 0 {
				ratio = fmt.Sprintf("%.1fx %s", res.Ratio, strings.TrimPrefix(res.Floor, "baseline/"))
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t\n",
				res.Name, res.N, res.Errors, res.P50, res.P90, res.P99, res.Max, rate, ratio)
		}
		tw.Flush()
	}
	if d := r.Density; d != nil {
		fmt.Fprintf(w, "\n== density (%d idle %s sandboxes, cgroup %s, %d processes)\n", d.Sandboxes, d.Template, d.Cgroup, d.Processes)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		row := func(name string, v int64) { fmt.Fprintf(tw, "%s\t%s\t\n", name, mib(v)) }
		row("cgroup usage / sandbox (total)", d.UsagePer)
		row("cgroup rss / sandbox", d.RSSPer)
		row("cgroup cache / sandbox", d.CachePer)
		if d.KmemPer > 0 {
			row("cgroup kmem / sandbox", d.KmemPer)
		}
		row("PSS of its processes / sandbox", d.PSSPer)
		if d.DaemonPID > 0 {
			row(fmt.Sprintf("daemon RSS before (pid %d)", d.DaemonPID), d.DaemonRSSBefore)
			row("daemon RSS with all idle", d.DaemonRSSAfter)
			row("daemon growth / sandbox", d.DaemonGrowthPer)
		}
		row("host memory / sandbox (max(usage, PSS) + daemon growth)", d.HostPer)
		tw.Flush()
		if d.CreateErrors > 0 || d.UnreadableCgroups > 0 {
			fmt.Fprintf(w, "(%d creates failed, %d cgroups unreadable)\n", d.CreateErrors, d.UnreadableCgroups)
		}
	}
	r.writeScale(w)
	r.writeMeasuredPeers(w)
	r.writePeers(w)
	if len(r.Budgets) > 0 {
		fmt.Fprintf(w, "\n== budget\n")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, b := range r.Budgets {
			verdict := "FAIL"
			if b.Pass {
				verdict = "PASS"
			}
			fmt.Fprintf(tw, "%s\t%s\t%.2f %s\t(limit %s, %s)\t%s\n", verdict, b.What, b.Value, b.Unit, b.Limit, b.Source, b.Floors)
		}
		tw.Flush()
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
	fmt.Fprintf(w, "\ntook %.1f s\n", r.Duration)
}

func mib(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }
