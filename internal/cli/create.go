package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// createFlags are the flags of create, shared by run.
type createFlags struct {
	template  string
	name      string
	ttl       string
	cpu       float64
	memory    string
	disk      string
	pids      int64
	isolation string
	env       []string
	meta      []string
	// State (docs/state.md).
	snapshot   string
	onTimeout  string
	autoResume bool
	idle       string
	userLimits []string
	// Network (docs/network.md, network.go).
	net netFlags
}

func (f *createFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.template, "template", "", "template to start from (default: the daemon's, \"base\")")
	fs.StringVar(&f.name, "name", "", "a name to use wherever the sandbox's id goes (kept as metadata name=NAME; unique among your sandboxes)")
	fs.StringVar(&f.ttl, "ttl", "", "destroy the sandbox after this long, e.g. 30m, 2h, 1d; \"none\" for no TTL (default: the daemon's)")
	fs.Float64Var(&f.cpu, "cpu", 0, "CPU cores, e.g. 0.5 or 2")
	fs.StringVar(&f.memory, "memory", "", "memory limit, e.g. 512M, 2G, 1GiB (plain numbers are MiB)")
	fs.StringVar(&f.disk, "disk", "", "disk limit, e.g. 1G, 10GiB (plain numbers are MiB)")
	fs.Int64Var(&f.pids, "pids", 0, "most processes at once")
	fs.StringVar(&f.isolation, "isolation", "", "isolation tier: container, gvisor, ... (default: the daemon's)")
	fs.StringArrayVar(&f.env, "env", nil, "environment variable KEY=VALUE of every process (repeatable)")
	fs.StringArrayVar(&f.meta, "meta", nil, "metadata KEY=VALUE to find the sandbox by (repeatable)")
	fs.StringVar(&f.snapshot, "snapshot", "", "start from this snapshot (id or name) instead of a template")
	fs.StringVar(&f.onTimeout, "on-timeout", "", "what the TTL does: destroy (default) or pause (keeps the sandbox and its files)")
	fs.BoolVar(&f.autoResume, "auto-resume", false, "let exec and file requests resume the sandbox when it is paused")
	fs.StringVar(&f.idle, "idle-timeout", "", "apply --on-timeout after this long without exec, file, PTY or preview use, e.g. 90s, 15m (default: none)")
	fs.StringArrayVar(&f.userLimits, "user-limit", nil, "a per-user kernel count NAME=N: inotify_instances, inotify_watches, msgqueue_bytes or sigpending (repeatable; default: the template's)")
	f.net.register(fs)
}

// request turns the flags into a create request, checking each.
func (f *createFlags) request() (api.CreateSandboxRequest, error) {
	req := api.CreateSandboxRequest{
		Template:  f.template,
		Isolation: f.isolation,
		CPU:       f.cpu,
		Pids:      f.pids,
	}
	req.Snapshot, req.OnTimeout, req.AutoResume = f.snapshot, f.onTimeout, f.autoResume
	var err error
	if f.ttl != "" {
		if req.TTLSeconds, err = parseTTLSeconds("ttl", f.ttl); err != nil {
			return req, err
		}
	}
	if f.idle != "" {
		d, err := parseDuration("idle-timeout", f.idle)
		if err != nil || d <= 0 {
			return req, usageErrorf("--idle-timeout wants a positive duration like 90s, 15m or 2h, got %q", f.idle)
		}
		req.IdleTimeoutSeconds = int64((d + time.Second - 1) / time.Second)
	}
	if f.cpu < 0 {
		return req, usageErrorf("--cpu must be a positive number of cores, got %v", f.cpu)
	}
	if f.pids < 0 {
		return req, usageErrorf("--pids must be positive, got %d", f.pids)
	}
	if f.memory != "" {
		if req.MemoryMB, err = parseSizeMB("memory", f.memory); err != nil {
			return req, err
		}
	}
	if f.disk != "" {
		if req.DiskMB, err = parseSizeMB("disk", f.disk); err != nil {
			return req, err
		}
	}
	if req.Env, err = parseKV("env", f.env); err != nil {
		return req, err
	}
	if req.Metadata, err = parseKV("meta", f.meta); err != nil {
		return req, err
	}
	if f.name != "" {
		if fullID.MatchString(f.name) || strings.ContainsAny(f.name, ": /") {
			return req, usageErrorf("--name %q could be taken for an id or a path; pick a name with a dash, a dot or a capital, without ':', '/' or spaces", f.name)
		}
		if req.Metadata == nil {
			req.Metadata = map[string]string{}
		}
		req.Metadata[NameKey] = f.name
	}
	if req.UserLimits, err = parseUserLimits(f.userLimits); err != nil {
		return req, err
	}
	req.Network = f.net.request()
	return req, nil
}

// parseUserLimits reads --user-limit NAME=N flags (nil for none).
func parseUserLimits(flags []string) (*api.UserLimits, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	l := &api.UserLimits{}
	for _, f := range flags {
		name, v, ok := strings.Cut(f, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n <= 0 {
			return nil, usageErrorf("--user-limit wants NAME=N with N a positive whole number, e.g. inotify_watches=524288, got %q", f)
		}
		if err := l.SetUserLimit(name, n); err != nil {
			return nil, usageErrorf("--user-limit: %v", err)
		}
	}
	if err := l.Check("--user-limit"); err != nil {
		return nil, usageErrorf("%v", err)
	}
	return l, nil
}

func newCreateCommand(g *globals) *cobra.Command {
	var f createFlags
	c := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a sandbox and print its id",
		Example: `  id=$(agentbox create --template base --ttl 1h --memory 1G)
  agentbox exec "$id" -- uname -a`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			req, err := f.request()
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			if err := checkNameFree(c.Context(), cl, f.name); err != nil {
				return err
			}
			sb, err := cl.CreateSandbox(c.Context(), req)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), sb.ID)
			return nil
		},
	}
	f.register(c.Flags())
	return c
}

// checkNameFree refuses a name one of the caller's sandboxes has already.
func checkNameFree(ctx context.Context, cl *client.Client, name string) error {
	if name == "" {
		return nil
	}
	taken, err := cl.ListSandboxes(ctx, client.ListOptions{Metadata: map[string]string{NameKey: name}})
	if err != nil {
		return err
	}
	if len(taken) > 0 {
		return fmt.Errorf("sandbox %s is already named %q; remove it (agentbox rm %s) or pick another name", taken[0].ID, name, name)
	}
	return nil
}
