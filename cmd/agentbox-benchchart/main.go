// Command agentbox-benchchart draws the cost curves of a bench report
// (`agentbox bench --scale 0,500,1000,2000 --json FILE`) as a PNG:
//
//	agentbox-benchchart -json report.json -o docs/images/scale.png
//
// `make bench-scale` runs both.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/bench/chart"
)

func main() {
	in := flag.String("json", "", "a bench report written with --json, holding cost curves (--scale)")
	out := flag.String("o", "scale.png", "the PNG to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "agentbox-benchchart:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	if in == "" {
		return fmt.Errorf("-json FILE is required: a report of `agentbox bench --scale ... --json FILE`")
	}
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s is not a bench report: %w", in, err)
	}
	if len(rep.Scale) == 0 {
		return fmt.Errorf("%s holds no cost curves: run the bench with --scale", in)
	}
	m := rep.Machine
	title := fmt.Sprintf("agentbox cost curves, %d CPUs, %.0f GiB, cgroup %s, %s", m.CPUs, float64(m.MemTotal)/(1<<30), m.Cgroup, m.Date.Format("2006-01-02"))
	return chart.Write(rep.Scale, title, out)
}
