package bench

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func msd(v int) time.Duration { return time.Duration(v) * time.Millisecond }

// ramp returns 1..n ms, shuffled, so Summarize must sort.
func ramp(n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = msd(i + 1)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	rnd.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name    string
		samples []time.Duration
		want    Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []time.Duration{msd(7)}, Summary{N: 1, P50: 7, P90: 7, P99: 7, Max: 7, Mean: 7}},
		{"two", []time.Duration{msd(9), msd(1)}, Summary{N: 2, P50: 1, P90: 9, P99: 9, Max: 9, Mean: 5}},
		{"1..10", ramp(10), Summary{N: 10, P50: 5, P90: 9, P99: 10, Max: 10, Mean: 5.5}},
		{"1..100", ramp(100), Summary{N: 100, P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50.5}},
		{"1..1000", ramp(1000), Summary{N: 1000, P50: 500, P90: 900, P99: 990, Max: 1000, Mean: 500.5}},
		// One slow outlier in 100 shows at max, not at p99 (nearest rank).
		{"outlier", append(repeat(msd(2), 99), msd(500)), Summary{N: 100, P50: 2, P90: 2, P99: 2, Max: 500, Mean: 6.98}},
		// Two in 100 do reach p99.
		{"two outliers", append(repeat(msd(2), 98), msd(400), msd(500)), Summary{N: 100, P50: 2, P90: 2, P99: 400, Max: 500, Mean: 10.96}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tt.samples...)
			got := Summarize(tt.samples)
			if !close(got, tt.want) {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
			for i := range in {
				if in[i] != tt.samples[i] {
					t.Fatalf("Summarize reordered its input")
				}
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d
	}
	return s
}

func close(a, b Summary) bool {
	eq := func(x, y float64) bool { return x-y < 1e-6 && y-x < 1e-6 }
	return a.N == b.N && eq(a.P50, b.P50) && eq(a.P90, b.P90) && eq(a.P99, b.P99) && eq(a.Max, b.Max) && eq(a.Mean, b.Mean)
}

func TestPercentile(t *testing.T) {
	s := []time.Duration{msd(10), msd(20), msd(30), msd(40)}
	tests := []struct {
		p    float64
		want time.Duration
	}{
		{0, msd(10)}, {1, msd(10)}, {25, msd(10)}, {26, msd(20)}, {50, msd(20)},
		{51, msd(30)}, {75, msd(30)}, {76, msd(40)}, {100, msd(40)}, {150, msd(40)},
	}
	for _, tt := range tests {
		if got := Percentile(s, tt.p); got != tt.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", s, tt.p, got, tt.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
}

func TestMeminfoBytes(t *testing.T) {
	text := "Rss:                8040 kB\nPss:                2193 kB\nPss_Anon:  1000 kB\nVmRSS:\t   12 kB\nbare: 77\n"
	tests := []struct {
		key  string
		want int64
	}{
		{"Pss", 2193 << 10}, {"Rss", 8040 << 10}, {"VmRSS", 12 << 10}, {"bare", 77}, {"Missing", 0},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := meminfoBytes(text, tt.key); got != tt.want {
				t.Errorf("meminfoBytes(%q) = %d, want %d", tt.key, got, tt.want)
			}
		})
	}
}

// TestJudge feeds a synthetic report through the budget and the table.
func TestJudge(t *testing.T) {
	r := &Report{
		Results: []Result{
			{Name: "baseline/fork-exec", Group: GroupBaseline, Summary: Summary{N: 10, P50: 2}},
			{Name: "baseline/namespaces", Group: GroupBaseline, Summary: Summary{N: 10, P50: 5}},
			{Name: "create/busybox", Group: GroupLifecycle, Summary: Summary{N: 10, P50: 25, P99: 40}, Floor: "baseline/namespaces"},
			{Name: "exec/true", Group: GroupExec, Summary: Summary{N: 10, P50: 3.5}, Floor: "baseline/fork-exec"},
			{Name: "throughput/creates", Group: GroupThroughput, Summary: Summary{N: 500}, Rate: 50, RateUnit: "creates/s"},
		},
		Density: &Density{Sandboxes: 50, HostPer: 6 << 20, UsagePer: 6 << 20},
	}
	got := map[string]bool{}
	r.Budgets = judge(r)
	for _, b := range r.Budgets {
		got[b.Source+": "+b.What] = b.Pass
	}
	want := map[string]bool{
		"issue: create p50 (busybox)":                   true,
		"ARCHITECTURE: create p50 (busybox)":            false,
		"ARCHITECTURE: create p99 (busybox)":            false,
		"issue: exec p50 (buffered true)":               false,
		"ARCHITECTURE: exec p50 within 1.5x fork+exec":  false,
		"issue: host memory per idle sandbox (50 idle)": true,
		"ARCHITECTURE: sustained creates/s":             false,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("budget %q: got pass=%v (present %v), want pass=%v", k, g, ok, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d budget lines, want %d: %v", len(got), len(want), got)
	}
	if ratio := r.Find("create/busybox").Ratio; ratio != 5 {
		t.Errorf("create ratio to namespaces = %v, want 5", ratio)
	}
	var sb strings.Builder
	r.WriteTable(&sb)
	for _, s := range []string{"FAIL", "PASS", "5.0x namespaces", "50.0 creates/s", "6.00 MiB"} {
		if !strings.Contains(sb.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, sb.String())
		}
	}
}

func TestWriteScale(t *testing.T) {
	r := &Report{Scale: []ScalePoint{
		{Live: 0, Create: Summary{N: 5, P50: 20, P99: 40}, Exec: Summary{N: 5, P50: 2, P99: 4}, Destroy: Summary{N: 5, P50: 10, P99: 20}, ListPage: Summary{N: 5, P50: 1, P99: 2}},
		{Live: 2000, Create: Summary{N: 5, P50: 30, P99: 80}, Exec: Summary{N: 5, P50: 2, P99: 5}, Destroy: Summary{N: 5, P50: 12, P99: 30}, ListPage: Summary{N: 5, P50: 1.5, P99: 3}},
	}}
	var b strings.Builder
	r.writeScale(&b)
	for _, want := range []string{"== cost curves", "2000", "30.00 / 80.00 (1.50x)", "1.50 / 3.00 (1.50x)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestJudgeClientsAndStream: the clients lines are judged against the API
// lines they wrap, and the stream's rate against the 500 MB/s.
func TestJudgeClientsAndStream(t *testing.T) {
	r := &Report{
		Results: []Result{
			{Name: "baseline/fork-exec", Group: GroupBaseline, Summary: Summary{N: 10, P50: 1}},
			{Name: "create/busybox", Group: GroupLifecycle, Summary: Summary{N: 10, P50: 9}},
			{Name: "exec/true", Group: GroupExec, Summary: Summary{N: 10, P50: 2}},
			{Name: lineCLIHelp, Group: GroupClients, Summary: Summary{N: 20, P50: 12}, Floor: "baseline/fork-exec"},
			{Name: lineCLIExec, Group: GroupClients, Summary: Summary{N: 20, P50: 14}, Floor: "exec/true"},
			{Name: linePyCreate + " (busybox)", Group: GroupClients, Summary: Summary{N: 20, P50: 11.5}, Floor: "create/busybox"},
			{Name: linePyExec, Group: GroupClients, Summary: Summary{N: 20, P50: 2.7}, Floor: "exec/true"},
			{Name: lineStreamFloor + " (200 MiB, base)", Group: GroupExec, Summary: Summary{N: 3, P50: 150}, Rate: 1400, RateUnit: "MB/s"},
			{Name: "exec-stream/stdout (200 MiB, base)", Group: GroupExec, Summary: Summary{N: 3, P50: 300}, Rate: 700, RateUnit: "MB/s", Floor: lineStreamFloor + " (200 MiB, base)"},
			{Name: "exec-stream/stdout (200 MiB, base, ndjson)", Group: GroupExec, Summary: Summary{N: 3, P50: 700}, Rate: 290, RateUnit: "MB/s", Floor: lineStreamFloor + " (200 MiB, base)"},
		},
	}
	got := map[string]Budget{}
	for _, b := range judge(r) {
		got[b.What] = b
	}
	for what, pass := range map[string]bool{
		"CLI `agentbox --help` p50":                                              false,
		"CLI `agentbox exec ID -- true` p50":                                     true,
		"Python SDK create p50 within +3 ms of the Go client's (create/busybox)": true,
		"Python SDK exec p50 within +0.5 ms of the Go client's (exec/true)":      false,
		"exec-stream/stdout (200 MiB, base) MB/s":                                true,
	} {
		b, ok := got[what]
		if !ok || b.Pass != pass {
			t.Errorf("budget %q: got %+v (present %v), want pass=%v", what, b, ok, pass)
		}
	}
	if b := got["exec-stream/stdout (200 MiB, base) MB/s"]; b.Floors != "2.0x "+lineStreamFloor+" (200 MiB, base)" {
		t.Errorf("the stream's budget line says %q of its floor", b.Floors)
	}
	if _, ok := got["exec-stream/stdout (200 MiB, base, ndjson) MB/s"]; ok {
		t.Error("the NDJSON stream is judged against 500 MB/s; only frames are")
	}
}
