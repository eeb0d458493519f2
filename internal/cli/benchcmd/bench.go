// Package benchcmd is the bench verb (`agentbox bench`), kept out of
// package cli so that the CLI's own binary does not link the benchmark's
// dependencies (the gvisor driver's defaults, the MCP SDK); agentboxd
// links it, and agentbox hands `bench` to agentboxd.
package benchcmd

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/cli"
)

// New returns the bench verb; env gives the root command's --host.
func New(env cli.Env) *cobra.Command {
	var (
		opts     bench.Options
		only     string
		jsonPath string
		strict   bool
		e2bURL   string
		fleetKey string
	)
	c := &cobra.Command{
		Use:   "bench [--quick] [--n N] [--only REGEX] [--density N] [--scale N,N...] [--json FILE]",
		Short: "Measure a running daemon against the performance budget",
		Long: `bench drives the daemon through its HTTP API and prints, for create,
destroy, create-to-first-output, exec, streams, files, memory per idle
sandbox and sustained creates and execs per second, the n, p50, p90, p99
and max, next to floors measured in the same run (fork+exec, namespaces,
unshare, runc), and judges them against the budget (docs/PERFORMANCE.md).
It needs root on the daemon's host for the memory and baseline lines.`,
		Args: cli.ExactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			if only != "" {
				re, err := regexp.Compile(only)
				if err != nil {
					return cli.UsageErrorf("--only: %v", err)
				}
				opts.Only = re
			}
			cl, err := env.Client()
			if err != nil {
				return err
			}
			opts.Client = cl
			if opts.FreshClient, err = bench.FreshConnClient(env.Host()); err != nil {
				return err
			}
			opts.E2B = e2bBenchOptions(env.Host(), e2bURL)
			opts.Clients = clientBenchOptions(env.Host(), opts.E2B)
			opts.Fleet = bench.FleetOptions{URL: opts.E2B.URL, Key: opts.E2B.Key, KeyFile: fleetKey}
			opts.Progress = c.ErrOrStderr()
			opts.Log = slog.New(slog.NewTextHandler(c.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelError}))
			rep, err := bench.Run(c.Context(), opts)
			if err != nil && rep == nil {
				return err
			}
			rep.Command = "agentbox " + strings.Join(os.Args[1:], " ")
			rep.WriteTable(c.OutOrStdout())
			if jsonPath != "" {
				if jerr := rep.WriteJSON(jsonPath); jerr != nil {
					return jerr
				}
			}

			if err != nil {
				return err
			}
			if strict {
				for _, b := range rep.Budgets {
					if !b.Pass {
						return errors.New("some budget lines FAIL (see above)")
					}
				}
			}
			return nil
		},
	}
	f := c.Flags()
	f.BoolVar(&opts.Quick, "quick", false, "few samples and short load phases (a CI smoke run, about a minute)")
	f.IntVar(&opts.N, "n", 0, "samples per latency line (default 50, 5 with --quick)")
	f.StringVar(&only, "only", "", "run only the lines whose name matches this regular expression (e.g. 'create|baseline')")
	f.IntVar(&opts.Density, "density", 0, "idle sandboxes held at once for the memory line (default 50, 5 with --quick)")
	f.IntSliceVar(&opts.Scale, "scale", nil, "cost curves: time create, exec, destroy and a list page with this many idle sandboxes alive, at each level (e.g. 0,500,1000,2000)")
	f.IntVar(&opts.Concurrency, "concurrency", 16, "clients in the throughput lines")
	f.DurationVar(&opts.LoadDuration, "duration", 0, "how long each throughput line runs (default 10s, 2s with --quick)")
	f.StringSliceVar(&opts.Templates, "templates", []string{"busybox", "base"}, "templates create is measured on; the first serves the other lines")
	f.StringVar(&opts.CgroupParent, "cgroup-parent", "agentbox", "the daemon's cgroup_parent, where the sandboxes' memory cgroups are")
	f.IntVar(&opts.DaemonPID, "daemon-pid", 0, "the daemon's pid, for its RSS (default: /run/agentbox/agentbox.pid, else the one `agentbox serve`)")
	f.StringVar(&opts.RuncRootfs, "runc-rootfs", "/var/lib/agentbox/build/busybox", "busybox root filesystem for the runc baseline")
	f.StringVar(&jsonPath, "json", "", "also write the report as JSON to FILE")
	f.BoolVar(&strict, "strict", false, "exit 1 when a budget line FAILs")
	f.StringVar(&e2bURL, "e2b-url", "", "the daemon's HTTP address for the e2b lines, whose SDK speaks TCP only (default: --host when it is http(s)://, else http://127.0.0.1:7423)")
	f.StringVar(&fleetKey, "fleet-key-file", "/etc/agentbox/fleet.key", "the daemon's fleet.gateway_key_file, for the fleet lines' in-process gateway (a daemon with node_id only; its TCP address is --e2b-url's)")
	return c
}

// e2bBenchOptions finds what the e2b lines need (internal/bench/e2b.go):
// the scripts of integration/e2b under the working directory (make bench
// runs in the repository's root), the daemon's HTTP address and the key
// (AGENTBOX_API_KEY, else the admin key).
func e2bBenchOptions(host, url string) bench.E2BOptions {
	var o bench.E2BOptions
	if dir, err := filepath.Abs(filepath.Join("integration", "e2b")); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "bench.mjs")); err == nil {
			o.Dir = dir
			o.PythonSDK = filepath.Join(filepath.Dir(filepath.Dir(dir)), "sdk", "python")
		}
	}
	if host == "" {
		host = os.Getenv("AGENTBOX_HOST")
	}
	switch {
	case url != "":
		o.URL = strings.TrimSuffix(url, "/")
	case strings.HasPrefix(host, "http://") || strings.HasPrefix(host, "https://"):
		o.URL = strings.TrimSuffix(host, "/")
	default:
		o.URL = "http://127.0.0.1:7423"
	}
	o.Key = os.Getenv("AGENTBOX_API_KEY")
	if o.Key == "" {
		if b, err := os.ReadFile(client.DefaultAdminKeyPath); err == nil {
			o.Key = strings.TrimSpace(string(b))
		}
	}
	return o
}

// clientBenchOptions finds what the clients lines need: the agentbox
// binary beside this one (make install puts both in one directory), else
// on PATH, and sdk/python where the e2b lines found it.
func clientBenchOptions(host string, e bench.E2BOptions) bench.ClientOptions {
	o := bench.ClientOptions{PythonSDK: e.PythonSDK, Host: host, Key: e.Key}
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "agentbox"); p != self {
			if _, err := os.Stat(p); err == nil {
				o.CLI = p
			}
		}
	}
	if o.CLI == "" {
		o.CLI, _ = exec.LookPath("agentbox")
	}
	if o.Host == "" {
		o.Host = os.Getenv("AGENTBOX_HOST")
	}
	return o
}
