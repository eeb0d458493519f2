// Package bench is agentbox's benchmark harness. It drives a running
// daemon through the Go SDK (package client) and measures what a user
// waits for: create, destroy, create-to-first-output, exec round trips,
// stream throughput, file transfer, memory per idle sandbox and sustained
// creates and execs per second. Baselines (fork+exec, namespaces, unshare,
// runc) are measured in the same run on the same machine, so figures are
// judged as ratios to floors rather than against numbers from elsewhere.
//
// `agentbox bench` (internal/cli) and `make bench` run it; docs/PERFORMANCE.md
// records the figures.
package bench

import (
	"math"
	"slices"
	"time"
)

// Summary describes a set of latency samples. Durations are in
// milliseconds so that the JSON is readable as is.
type Summary struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest sample such that at least p percent of
// the samples are less than or equal to it. It returns 0 for no samples.
// sorted must be in ascending order.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	// The small epsilon keeps 0.9*100 = 90.00000000000001 at rank 90.
	rank := int(math.Ceil(p/100*float64(n) - 1e-9))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Summarize sorts a copy of samples and returns their summary.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Summary{
		N:    len(s),
		P50:  ms(Percentile(s, 50)),
		P90:  ms(Percentile(s, 90)),
		P99:  ms(Percentile(s, 99)),
		Max:  ms(s[len(s)-1]),
		Mean: ms(sum / time.Duration(len(s))),
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
