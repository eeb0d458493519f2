package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

func newStatsCommand(g *globals) *cobra.Command {
	var (
		noStream bool
		asJSON   bool
	)
	c := &cobra.Command{
		Use:   "stats [ID...]",
		Short: "Show sandboxes' live resource use",
		Long: `Show each sandbox's CPU, memory, disk, network and pids, refreshed as
the daemon samples them (every metrics.usage_interval, 5 s by default),
like docker stats. CPU % is of one core (200% = two cores busy), LIMIT
the sandbox's cpu limit in the same unit. Without IDs: every running
sandbox the key can see. --no-stream prints once and exits.`,
		Example: `  agentbox stats
  agentbox stats "$id" --no-stream
  agentbox stats "$id" --json --no-stream`,
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			tty := false
			if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				tty = true
			}
			for {
				rows, interval, err := statsRows(c.Context(), cl, args)
				if err != nil {
					return err
				}
				switch {
				case asJSON:
					if err := printJSON(out, rows); err != nil {
						return err
					}
				default:
					if tty && !noStream {
						fmt.Fprint(out, "\x1b[H\x1b[2J") // home, clear
					}
					printStats(out, rows)
				}
				if noStream {
					return nil
				}
				if interval <= 0 {
					interval = 5 * time.Second
				}
				select {
				case <-c.Context().Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	c.Flags().BoolVar(&noStream, "no-stream", false, "print once and exit")
	c.Flags().BoolVar(&asJSON, "json", false, "print each round as JSON (the latest sample of each sandbox)")
	return c
}

// statsRow is one sandbox's latest sample.
type statsRow struct {
	Sandbox string          `json:"sandbox"`
	Limits  api.Resources   `json:"limits"`
	Sample  api.UsageSample `json:"sample"`
}

func statsRows(ctx context.Context, cl *client.Client, ids []string) ([]statsRow, time.Duration, error) {
	if len(ids) == 0 {
		list, err := cl.ListSandboxes(ctx, client.ListOptions{State: api.StateRunning})
		if err != nil {
			return nil, 0, err
		}
		for _, sb := range list {
			ids = append(ids, sb.ID)
		}
	}
	var (
		rows     []statsRow
		interval time.Duration
	)
	for _, id := range ids {
		m, err := cl.SandboxMetrics(ctx, id)
		if err != nil {
			if len(ids) == 1 || ctx.Err() != nil {
				return nil, 0, err
			}
			continue // destroyed meanwhile
		}
		interval = time.Duration(m.IntervalSeconds * float64(time.Second))
		r := statsRow{Sandbox: m.Sandbox, Limits: m.Limits}
		if n := len(m.Samples); n > 0 {
			r.Sample = m.Samples[n-1]
		}
		rows = append(rows, r)
	}
	return rows, interval, nil
}

func printStats(w io.Writer, rows []statsRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tCPU %\tLIMIT\tMEM USAGE / LIMIT\tMEM %\tDISK\tNET RX / TX\tPIDS")
	for _, r := range rows {
		s := r.Sample
		if s.Time.IsZero() {
			fmt.Fprintf(tw, "%s\t-\t%.0f%%\t-\t-\t-\t-\t-\n", r.Sandbox, r.Limits.CPU*100)
			continue
		}
		memLimit := r.Limits.MemoryMB << 20
		memPct := 0.0
		if memLimit > 0 {
			memPct = float64(s.MemoryBytes) / float64(memLimit) * 100
		}
		fmt.Fprintf(tw, "%s\t%.1f%%\t%.0f%%\t%s / %s\t%.1f%%\t%s\t%s / %s\t%d\n", r.Sandbox, s.CPUPercent, r.Limits.CPU*100,
			formatBytes(s.MemoryBytes), formatBytes(memLimit), memPct, formatBytes(s.DiskBytes),
			formatBytes(s.RxBytes), formatBytes(s.TxBytes), s.Pids)
	}
	tw.Flush()
}

func newEventsCommand(g *globals) *cobra.Command {
	var (
		types   []string
		sandbox string
		tenant  string
		asJSON  bool
	)
	c := &cobra.Command{
		Use:   "events",
		Short: "Follow sandboxes' lifecycle events",
		Long: `Print lifecycle events as they happen, until interrupted: created,
forked, paused, resumed, stopped, snapshotted, reset, expired, destroyed,
oom, failed and quota_rejected. A tenant's key sees its own tenant's
events only; an admin key every tenant's (or one with --tenant).`,
		Example: `  agentbox events
  agentbox events --type created,destroyed
  agentbox events --sandbox "$id" --json`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			var ts []string
			for _, t := range types {
				ts = append(ts, strings.Split(t, ",")...)
			}
			st, err := cl.Events(c.Context(), client.EventFilter{Types: ts, Sandbox: sandbox, Tenant: tenant})
			if err != nil {
				return err
			}
			defer st.Close()
			// Subscribed: nothing that happens from now on is missed.
			// On stderr, so that stdout stays the events alone.
			fmt.Fprintln(c.ErrOrStderr(), "following events; interrupt to stop")
			out := c.OutOrStdout()
			for {
				e, err := st.Next()
				if err != nil {
					if c.Context().Err() != nil || errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if asJSON {
					if err := json.NewEncoder(out).Encode(e); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(out, "%s  %-14s %-12s tenant=%s", e.Time.Local().Format("15:04:05.000"), e.Type, orDash(e.Sandbox), orDash(e.Tenant))
				if e.Detail != "" {
					fmt.Fprintf(out, "  %s", e.Detail)
				}
				fmt.Fprintln(out)
			}
		},
	}
	c.Flags().StringSliceVar(&types, "type", nil, "only these event types (comma-separated or repeated)")
	c.Flags().StringVar(&sandbox, "sandbox", "", "only this sandbox's events")
	c.Flags().StringVar(&tenant, "tenant", "", "only this tenant's events (admin keys)")
	c.Flags().BoolVar(&asJSON, "json", false, "print each event as a JSON line")
	return c
}
