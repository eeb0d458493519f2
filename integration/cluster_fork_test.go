package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// TestClusterFork moves templates and snapshots between the nodes of a
// real fleet through a real registry (Debian's docker-registry on the
// host, reached by the nodes at the fleet's SUBNET.1): a template on node A only is
// created on node B (pulled on first use); a sandbox on A that wrote
// 100 MB is forked with spread to 2 children, at least one on B, that
// see its files (the cross-host fork's p50 is logged); a snapshot is
// created on B while A holds it, and, pushed, while A is killed; A's
// sandboxes are then reported lost.
func TestClusterFork(t *testing.T) {
	regAddr := startRegistryAt(t, "0.0.0.0")
	_, port, _ := net.SplitHostPort(regAddr)
	f := newFleetWith(t, 2, fleetOptions{registryPort: port})
	reg := f.registry
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := f.client
	a, b := f.nodes[0], f.nodes[1]

	t.Run("template pulled on first use", func(t *testing.T) {
		name := "onlya-" + randHex(3)
		dir := "/var/lib/agentbox/build/busybox"
		if _, err := os.Stat(filepath.Join(dir, "rootfs", "bin")); err == nil {
			dir = filepath.Join(dir, "rootfs")
		}
		if _, err := a.client.ImportTemplate(ctx, api.ImportTemplateRequest{Name: name, Rootfs: dir, User: "root", Workdir: "/root",
			Env: map[string]string{"FROM_A": "yes"}}); err != nil {
			t.Fatal(err)
		}
		f.waitNodes(func(n api.FleetNode) bool {
			return n.ID != a.id || (n.Status != nil && slices.Contains(n.Status.Templates, name))
		})
		start := time.Now()
		// Three creates at once on B: one pull.
		errs := make(chan error, 3)
		for range 3 {
			go func() {
				sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: name, Node: b.id})
				if err == nil && sb.Node != b.id {
					err = fmt.Errorf("created on %s, want %s", sb.Node, b.id)
				}
				if err == nil {
					var res *api.ExecResult
					res, err = c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo $FROM_A"})
					if err == nil && res.Stdout != "yes\n" {
						err = fmt.Errorf("the pulled template's env: %q", res.Stdout)
					}
					_ = c.DestroySandbox(ctx, sb.ID) // the fork below places on equal nodes
				}
				errs <- err
			}()
		}
		for range 3 {
			if err := <-errs; err != nil {
				t.Fatalf("create of a template on node A only, on node B: %v", err)
			}
		}
		t.Logf("template on first use: 3 creates on node B in %v (one push from A, one pull on B)", time.Since(start).Round(time.Millisecond))
		tpls, err := b.client.ListTemplates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		versions := 0
		for _, tp := range tpls {
			if tp.Name == name {
				versions++
			}
		}
		if versions != 1 {
			t.Errorf("node B lists template %s %d times, want 1 (one pull)", name, versions)
		}
	})

	parent, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Node: a.id, Metadata: map[string]string{"role": "parent"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, parent.ID, api.ExecRequest{Shell: "head -c 104857600 /dev/urandom > /root/big && echo marker-" + parent.ID + " > /root/marker && sha256sum /root/big | cut -d' ' -f1"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("writing 100 MB in the parent: %+v, %v", res, err)
	}
	sum := strings.TrimSpace(res.Stdout)

	t.Run("spread fork", func(t *testing.T) {
		before := f.snapshotsLeft(ctx)
		var took []time.Duration // the rounds with a child on the other node
		var steps []string       // their Server-Timing
		var forkSnaps []string   // each fork's snapshot on A
		onB := 0
		for round := 0; round < 5; round++ {
			start := time.Now()
			var out api.ForkResponse
			hdr, err := f.gatewayJSONHeader(ctx, "POST", "/v1/sandboxes/"+parent.ID+"/fork", api.ForkRequest{Count: 2, Spread: true}, &out)
			if err != nil {
				t.Fatalf("spread fork: %v", err)
			}
			d := time.Since(start)
			if len(out.Sandboxes) != 2 {
				t.Fatalf("spread fork gave %d children", len(out.Sandboxes))
			}
			if out.Sandboxes[0].Node == b.id || out.Sandboxes[1].Node == b.id {
				took = append(took, d)
				steps = append(steps, hdr.Get("Server-Timing"))
			}
			// A keeps the fork's snapshot until it is pushed: it is there now.
			snaps, err := a.client.ListSnapshots(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range snaps {
				if s.SandboxID == parent.ID && !slices.Contains(forkSnaps, s.ID) && !before[a.id]["api "+s.ID] {
					forkSnaps = append(forkSnaps, s.ID)
				}
			}
			for _, ch := range out.Sandboxes {
				if ch.Node == b.id {
					onB++
				}
				if ch.Metadata["role"] != "parent" {
					t.Errorf("child %s metadata %v, want the parent's", ch.ID, ch.Metadata)
				}
				res, err := c.Exec(ctx, ch.ID, api.ExecRequest{Shell: "cat /root/marker; sha256sum /root/big | cut -d' ' -f1"})
				if err != nil || res.Stdout != "marker-"+parent.ID+"\n"+sum+"\n" {
					t.Fatalf("child %s on %s sees %+v, %v; want the marker and sum %s", ch.ID, ch.Node, res, err, sum)
				}
				if err := c.DestroySandbox(ctx, ch.ID); err != nil {
					t.Errorf("destroying child %s: %v", ch.ID, err)
				}
			}
		}
		if onB == 0 {
			t.Fatalf("no child of 10 landed on node %s", b.id)
		}
		for i, st := range steps {
			t.Logf("fork with a child on the other node, %v: %s", took[i].Round(time.Millisecond), st)
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		t.Logf("cross-host fork of a sandbox that wrote 100 MB, 2 children (%d of 10 on the other node), the rounds with a child there: p50 %v, all %v (PandaStack publishes 1.2-3.5 s)",
			onB, took[len(took)/2].Round(time.Millisecond), took)

		// Lifetime: with the children gone and the background pushes
		// done, no snapshot of the forks is left on either node (in the
		// API, internal ones too, and in storage), and the registry has
		// each fork's snapshot.
		if len(forkSnaps) != 5 {
			t.Errorf("node A showed %d fork snapshots after 5 forks: %v", len(forkSnaps), forkSnaps)
		}
		var left map[string]map[string]bool
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			left = f.snapshotsLeft(ctx)
			if maps.EqualFunc(left, before, maps.Equal) || time.Now().After(deadline) {
				break
			}
		}
		if !maps.EqualFunc(left, before, maps.Equal) {
			t.Errorf("snapshots on the nodes (API and storage) after the children were destroyed: %v, want those before the forks: %v", left, before)
		}
		for _, id := range forkSnaps {
			if !registryHas(t, regAddr, "agentbox/snapshots/"+id, "t-default") {
				t.Errorf("fork snapshot %s is not in the fleet registry", id)
			}
		}
		// The background pushes, from the gateway's log: how long after
		// its fork each was done, and how often it gave way to a fork.
		gwLog, _ := os.ReadFile(f.gw.cfgPath + ".log")
		for _, line := range strings.Split(string(gwLog), "\n") {
			if strings.Contains(line, "pushed in the background") || strings.Contains(line, `msg="snapshot pushed"`) {
				t.Logf("gateway: %s", line[strings.Index(line, "msg="):])
			}
		}
	})

	t.Run("restore elsewhere", func(t *testing.T) {
		snap, err := c.CreateSnapshot(ctx, parent.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: snap.ID, Node: b.id})
		if err != nil || sb.Node != b.id {
			t.Fatalf("create on B from a snapshot on A: %+v, %v", sb, err)
		}
		// A second snapshot, pushed through the gateway where a create
		// elsewhere looks for it, then A dies: B restores it.
		snap2, err := c.CreateSnapshot(ctx, parent.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := f.gatewayJSON(ctx, "POST", "/v1/snapshots/"+snap2.ID+"/push", api.PushRequest{Ref: reg + "/agentbox/snapshots/" + snap2.ID + ":t-default"}, nil); err != nil {
			t.Fatalf("pushing: %v", err)
		}
		a.kill(syscall.SIGKILL)
		nodes := f.waitNodes(func(n api.FleetNode) bool { return n.ID != a.id || !n.Available })
		for _, n := range nodes {
			if n.ID == a.id && n.LostSandboxes < 1 {
				t.Errorf("node %s is down with the parent on it; lost_sandboxes = %d", a.id, n.LostSandboxes)
			}
		}
		if _, err := c.GetSandbox(ctx, parent.ID); err == nil || !strings.Contains(err.Error(), "node_unavailable") && !strings.Contains(err.Error(), "unavailable") {
			t.Errorf("GET of a lost sandbox: %v, want node_unavailable", err)
		}
		start := time.Now()
		sb2, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: snap2.ID})
		if err != nil || sb2.Node != b.id {
			t.Fatalf("create from a pushed snapshot of a dead node: %+v, %v", sb2, err)
		}
		t.Logf("restore elsewhere (pull of a 100 MB snapshot on B, A dead, and the create): %v", time.Since(start).Round(time.Millisecond))
		for _, id := range []string{sb.ID, sb2.ID} {
			res, err := c.Exec(ctx, id, api.ExecRequest{Shell: "cat /root/marker"})
			if err != nil || res.Stdout != "marker-"+parent.ID+"\n" {
				t.Errorf("restored %s: %+v, %v", id, res, err)
			}
		}
		// A snapshot never pushed, of a dead node: out of reach, said so.
		if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: a.id + "aaaaaaaaaaaa"}); err == nil || !strings.Contains(err.Error(), "never pushed") {
			t.Errorf("create from an unpushed snapshot of a dead node: %v", err)
		}
	})
}

// gatewayJSON sends a JSON request to the gateway with its admin key and
// decodes the answer into out.
func (f *fleet) gatewayJSON(ctx context.Context, method, path string, in, out any) error {
	_, err := f.gatewayJSONHeader(ctx, method, path, in, out)
	return err
}

// gatewayJSONHeader is gatewayJSON, and returns the answer's header.
func (f *fleet) gatewayJSONHeader(ctx context.Context, method, path string, in, out any) (http.Header, error) {
	b, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, method, "http://"+f.gwAddr+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+f.gw.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return resp.Header, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, body)
	}
	if out != nil {
		return resp.Header, json.Unmarshal(body, out)
	}
	return resp.Header, nil
}

// snapshotsLeft reads, on every node, the snapshots its API lists
// (internal ones too: the admin sees every tenant's) and the snapshot
// directories of its storage, as "api ID" and "dir ID" per node id.
func (f *fleet) snapshotsLeft(ctx context.Context) map[string]map[string]bool {
	f.t.Helper()
	out := map[string]map[string]bool{}
	for _, nd := range f.nodes {
		m := map[string]bool{}
		snaps, err := nd.client.ListSnapshots(ctx)
		if err != nil {
			f.t.Fatalf("listing node %s's snapshots: %v", nd.id, err)
		}
		for _, s := range snaps {
			m["api "+s.ID] = true
		}
		dir := filepath.Join(nd.dataDir, "storage", "snapshots")
		entries, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			f.t.Fatalf("reading node %s's %s: %v", nd.id, dir, err)
		}
		for _, e := range entries {
			m["dir "+e.Name()] = true
		}
		out[nd.id] = m
	}
	return out
}

// registryHas reports whether the registry at addr has repo:tag.
func registryHas(t *testing.T, addr, repo, tag string) bool {
	t.Helper()
	req, _ := http.NewRequest("HEAD", "http://"+addr+"/v2/"+repo+"/manifests/"+tag, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
