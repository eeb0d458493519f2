package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/version"
)

// infoOutput is `agentbox info --json`: the daemon's info and its pools.
type infoOutput struct {
	Client string           `json:"client_version"`
	Host   string           `json:"host"`
	Daemon *api.Info        `json:"daemon"`
	Pools  []api.PoolStatus `json:"pools"`
}

func newInfoCommand(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "info [--json]",
		Short: "Show the daemon: its isolation tiers and whether each works, defaults, limits, pools, where its data and logs are",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			info, err := cl.Info(c.Context())
			if err != nil {
				return err
			}
			var pools []api.PoolStatus
			if info.Role != "gateway" { // a gateway has no pool (docs/cluster.md)
				if pools, err = cl.Pools(c.Context()); err != nil {
					return err
				}
			}
			out := infoOutput{Client: version.Version, Host: cl.Host(), Daemon: info, Pools: pools}
			if out.Pools == nil {
				out.Pools = []api.PoolStatus{}
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), out)
			}
			return printInfo(c.OutOrStdout(), out)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the info as JSON")
	return c
}

func printInfo(w io.Writer, o infoOutput) error {
	d := o.Daemon
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Client:\t%s\n", o.Client)
	fmt.Fprintf(tw, "Daemon:\t%s at %s\n", d.Version, o.Host)
	if d.Role == "gateway" && d.Nodes != nil {
		fmt.Fprintf(tw, "Role:\tfleet gateway, %d of %d nodes available (agentbox fleet nodes)\n", d.Nodes.Available, d.Nodes.Total)
	} else if d.NodeID != "" {
		fmt.Fprintf(tw, "Node:\t%s (docs/cluster.md)\n", d.NodeID)
	}
	fmt.Fprintf(tw, "Tiers:\t\n")
	for _, t := range d.Tiers {
		state := "available"
		if !t.Available {
			state = "unavailable: " + t.Error
		}
		if t.Default {
			state += " (default)"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", t.Name, state)
	}
	fmt.Fprintf(tw, "Default template:\t%s\n", d.DefaultTemplate)
	fmt.Fprintf(tw, "Defaults:\t%s\n", formatLimits(d.Defaults))
	fmt.Fprintf(tw, "Limits:\t%s\n", formatLimits(d.Limits))
	fmt.Fprintf(tw, "Sandboxes:\t%d running\n", d.Sandboxes)
	if d.Role == "gateway" {
		// A gateway has no pools; each node has its own.
	} else if len(o.Pools) == 0 {
		fmt.Fprintf(tw, "Pools:\tnone (add [[pool]] entries to the daemon's config)\n")
	} else {
		fmt.Fprintf(tw, "Pools:\t\n")
		for _, p := range o.Pools {
			fmt.Fprintf(tw, "  %s/%s\t%d/%d ready, %d served, %d missed\n", p.Template, p.Isolation, p.Ready, p.Size, p.Served, p.Misses)
		}
	}
	if d.DataDir != "" {
		fmt.Fprintf(tw, "Data:\t%s (state.db, admin.key, templates, storage)\n", d.DataDir)
		if d.RunDir != "" {
			fmt.Fprintf(tw, "Runtime:\t%s\n", d.RunDir)
		}
		listen := d.Socket
		if d.Listen != "" {
			listen += ", " + d.Listen
		}
		fmt.Fprintf(tw, "Listening:\t%s\n", listen)
		fmt.Fprintf(tw, "Log:\t%s\n", d.Log)
	}
	return tw.Flush()
}

// formatLimits writes defaults or limits as "ttl 10m, cpu 1, memory 512M, ...".
func formatLimits(l api.InfoLimits) string {
	ttl := "none"
	if l.TTLSeconds > 0 {
		ttl = formatDuration(time.Duration(l.TTLSeconds) * time.Second)
	}
	return strings.Join([]string{
		"ttl " + ttl,
		fmt.Sprintf("cpu %g", l.CPU),
		fmt.Sprintf("memory %dM", l.MemoryMB),
		fmt.Sprintf("disk %dM", l.DiskMB),
		fmt.Sprintf("pids %d", l.Pids),
	}, ", ")
}

// formatDuration writes d the way durations are given on the command
// line: 30s, 10m, 24h, 1h30m, 3d12h.
func formatDuration(d time.Duration) string {
	s := ""
	if d >= 48*time.Hour {
		days := d / (24 * time.Hour)
		s, d = fmt.Sprintf("%dd", days), d-days*24*time.Hour
		if d == 0 {
			return s
		}
	}
	r := d.String()
	if strings.HasSuffix(r, "m0s") {
		r = strings.TrimSuffix(r, "0s")
	}
	if strings.HasSuffix(r, "h0m") {
		r = strings.TrimSuffix(r, "0m")
	}
	return s + r
}
