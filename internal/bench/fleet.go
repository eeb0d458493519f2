package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/gateway"
	"github.com/agentbox/agentbox/internal/store"
)

// GroupFleet holds issue 21's lines: the cost of a fleet gateway in front
// of the daemon under test.
const GroupFleet = "fleet"

// The fleet lines, each pair measured in the same loop (a sample of one,
// then of the other), so that the machine's drift hits both alike.
const (
	lineFleetCreateDirect = "fleet/create direct"
	lineFleetCreateGW     = "fleet/create via gateway"
	lineFleetExecDirect   = "fleet/exec true direct"
	lineFleetExecGW       = "fleet/exec true via gateway"
)

// The design's budget for what a gateway adds (issue 21).
const (
	fleetCreateBudgetMS = 1.0
	fleetExecBudgetMS   = 0.5
)

// FleetOptions says how the fleet lines reach the daemon as a fleet node:
// its TCP address (a gateway reaches nodes over HTTP only) and the fleet
// secret of its fleet.gateway_key_file.
type FleetOptions struct {
	// URL is the node's HTTP address; the direct lines use it too, so
	// that both sides pay the same loopback TCP.
	URL string
	// Key is an admin API key of the node, for the direct lines.
	Key string
	// KeyFile holds the fleet secret (the node's fleet.gateway_key_file);
	// "" or unreadable: the lines are skipped with a note.
	KeyFile string
}

// fleet measures create and exec `true` on the daemon directly and through
// an in-process gateway (internal/gateway, wired as a gateway daemon wires
// it) in front of it, the daemon being the gateway's only node. Needs a
// daemon with node_id and fleet.gateway_key_file (docs/cluster.md).
func (r *runner) fleet(ctx context.Context) {
	if !r.want(lineFleetCreateDirect) && !r.want(lineFleetCreateGW) && !r.want(lineFleetExecDirect) && !r.want(lineFleetExecGW) {
		return
	}
	o := r.opts.Fleet
	skip := func(why string, args ...any) {
		r.note("fleet lines skipped: "+why, args...)
	}
	st, err := r.c.NodeStatus(ctx)
	if err != nil {
		skip("GET /v1/node: %v", err)
		return
	}
	if st.NodeID == "" {
		skip("the daemon has no node_id; give it node_id and fleet.gateway_key_file and a TCP listen address (docs/cluster.md, docs/PERFORMANCE.md \"Fleet\")")
		return
	}
	if o.URL == "" || o.Key == "" {
		skip("no TCP address or API key for the daemon (--e2b-url, AGENTBOX_API_KEY or the admin key file)")
		return
	}
	secret, err := config.ReadFleetKey("--fleet-key-file", o.KeyFile)
	if err != nil {
		skip("%v", err)
		return
	}
	direct, err := client.New(client.WithHost(o.URL), client.WithAPIKey(o.Key), client.WithoutEnvironment())
	if err != nil {
		skip("%v", err)
		return
	}
	via, stop, err := startBenchGateway(ctx, st.NodeID, o.URL, secret)
	if err != nil {
		skip("starting the gateway: %v", err)
		return
	}
	defer stop()

	tpl := r.templates[0]
	n := r.opts.N
	clients := [2]*client.Client{direct, via}
	req := createReq(tpl)
	// create: one sample direct, one through the gateway, n times, in
	// turns (pairOrder); each sandbox destroyed untimed.
	var cd, cg []time.Duration
	var cErr [2]int
	var cFirst [2]error
	createOne := func(c *client.Client) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
		defer cancel()
		var sb *api.Sandbox
		d, err := timed(func() (err error) { sb, err = c.CreateSandbox(ctx, req); return err })
		if sb != nil {
			_ = r.destroy(ctx, sb.ID)
		}
		return d, err
	}
	for i := -1; i < n && ctx.Err() == nil; i++ { // i = -1: an untimed warm-up of each
		for _, k := range pairOrder(i) {
			d, err := createOne(clients[k])
			if i < 0 {
				continue
			}
			if err != nil {
				cErr[k]++
				if cFirst[k] == nil {
					cFirst[k] = err
				}
				continue
			}
			if k == 0 {
				cd = append(cd, d)
			} else {
				cg = append(cg, d)
			}
		}
		if i >= 0 && len(cd)+len(cg) == 0 && cErr[0]+cErr[1] >= 2*giveUpAfter {
			break
		}
	}
	r.addFleet(lineFleetCreateDirect, cd, cErr[0], cFirst[0], "")
	r.addFleet(lineFleetCreateGW, cg, cErr[1], cFirst[1], lineFleetCreateDirect)

	// exec `true`: one sandbox, on the node, reached both ways.
	sb, err := via.CreateSandbox(ctx, req)
	if err != nil {
		r.note("fleet exec lines skipped: create through the gateway: %v", err)
		return
	}
	defer r.destroy(ctx, sb.ID)
	var ed, eg []time.Duration
	var eErr [2]int
	var eFirst [2]error
	exec := api.ExecRequest{Cmd: []string{"true"}}
	for i := -1; i < n && ctx.Err() == nil; i++ {
		for _, k := range pairOrder(i) {
			sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
			d, err := timed(func() error {
				res, err := clients[k].Exec(sctx, sb.ID, exec)
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("true exited %d", res.ExitCode)
				}
				return err
			})
			cancel()
			if i < 0 {
				continue
			}
			if err != nil {
				eErr[k]++
				if eFirst[k] == nil {
					eFirst[k] = err
				}
				continue
			}
			if k == 0 {
				ed = append(ed, d)
			} else {
				eg = append(eg, d)
			}
		}
	}
	r.addFleet(lineFleetExecDirect, ed, eErr[0], eFirst[0], "")
	r.addFleet(lineFleetExecGW, eg, eErr[1], eFirst[1], lineFleetExecDirect)
}

// pairOrder is the order of the two sides (0 direct, 1 gateway) in the
// i-th round: each goes first in every other round, since the first create
// of a round finds the daemon's pre-spawned init ready and the second may
// not (docs/PERFORMANCE.md, "Pre-spawned inits").
func pairOrder(i int) [2]int {
	if i%2 == 0 {
		return [2]int{0, 1}
	}
	return [2]int{1, 0}
}

// addFleet records a fleet line; a gateway line's note says what it adds
// to the direct line's p50 and p99.
func (r *runner) addFleet(name string, ds []time.Duration, errs int, first error, directLine string) {
	res := Result{Name: name, Group: GroupFleet, Summary: Summarize(ds), Errors: errs}
	if first != nil {
		res.Note = "first error: " + first.Error()
		r.note("%s: %d samples failed; first error: %v", name, errs, first)
	}
	if d := r.report.Find(directLine); d != nil && d.N > 0 && res.N > 0 {
		add := fmt.Sprintf("adds %+.3f ms p50, %+.3f ms p99 to the node directly", res.P50-d.P50, res.P99-d.P99)
		if res.Note != "" {
			add += "; " + res.Note
		}
		res.Note = add
	}
	r.add(res)
}

// startBenchGateway runs an in-process gateway (internal/gateway, wired as
// internal/daemon/gateway.go wires a gateway daemon) with the one node
// nodeID at nodeURL, on a loopback port, with a store of its own holding
// one tenant and its key. It returns a client of that tenant and a stop
// function.
func startBenchGateway(ctx context.Context, nodeID, nodeURL, secret string) (*client.Client, func(), error) {
	dir, err := os.MkdirTemp("", "agentbox-bench-gateway-")
	if err != nil {
		return nil, nil, err
	}
	var closers []func()
	stop := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		os.RemoveAll(dir)
	}
	fail := func(err error) (*client.Client, func(), error) {
		stop()
		return nil, nil, err
	}
	st, err := store.Open(ctx, filepath.Join(dir, "state.db"))
	if err != nil {
		return fail(err)
	}
	closers = append(closers, func() { st.Close() })
	const tenant = "bench"
	if err := st.CreateTenant(ctx, &store.TenantRecord{Name: tenant}); err != nil {
		return fail(err)
	}
	key, _, err := auth.CreateKey(ctx, st, tenant, "bench", false)
	if err != nil {
		return fail(err)
	}
	log := slog.New(slog.DiscardHandler)
	gw, err := gateway.New(gateway.Options{Nodes: []config.FleetNode{{ID: nodeID, URL: nodeURL}}, Key: secret,
		Store: st, Auth: auth.New(st, filepath.Join(dir, "admin.key"), log), Logger: log})
	if err != nil {
		return fail(err)
	}
	gw.Start(ctx)
	closers = append(closers, gw.Close)
	if ns := gw.Nodes(); len(ns) != 1 || !ns[0].Available {
		why := "no answer"
		if len(ns) == 1 && ns[0].LastError != "" {
			why = ns[0].LastError
		}
		return fail(fmt.Errorf("node %s at %s is not available to the gateway: %s", nodeID, nodeURL, why))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("bench gateway", "err", err)
		}
	}()
	closers = append(closers, func() { srv.Close() })
	c, err := client.New(client.WithHost("http://"+ln.Addr().String()), client.WithAPIKey(key), client.WithoutEnvironment())
	if err != nil {
		return fail(err)
	}
	return c, stop, nil
}
