package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

// memLoop is a busybox shell loop that holds a random value, a counter
// and 32 MiB of random base64 only in its memory: asked (a file /root/ask
// appears), it writes the value with the big string's length, and the
// count, to /root/answer.
const memLoop = `sh -c 'v=$(head -c 6 /dev/urandom | od -An -tx1 | tr -d " \n"); big=$(head -c 25165824 /dev/urandom | base64); i=0; ` +
	`while :; do i=$((i+1)); if [ -e /root/ask ]; then rm -f /root/ask; echo "$v-${#big} $i" > /root/answer.tmp; mv /root/answer.tmp /root/answer; fi; sleep 0.1; done' </dev/null >/dev/null 2>&1 &`

// askLoop asks sandbox id's memLoop (through c) for its value and count.
// A running loop answers within its 0.1 s sleep; a loop just started
// answers once it has read and encoded its 24 MiB, which under gVisor on
// a loaded host took over 10 s (seen under stress-ng): the wait is for
// the answer, up to a ceiling that only a broken loop reaches.
func askLoop(t *testing.T, c *client.Client, id string) (string, int) {
	t.Helper()
	out := mustShVia(t, c, id, `rm -f /root/answer; touch /root/ask; for i in $(seq 1800); do [ -e /root/answer ] && break; sleep 0.1; done; cat /root/answer`)
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("sandbox %s: the loop answered %q", id, out)
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("sandbox %s: the loop answered %q", id, out)
	}
	return f[0], n
}

// nodeHTTP is an HTTP client to node nd's unix socket.
func nodeHTTP(nd *fleetNode) *http.Client {
	sock := filepath.Join(nd.runDir, "agentbox.sock")
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// streamSnapshotNodes pipes node src's export of snapshot id into node
// dst's import (both as their admin) and returns the copy on dst.
func streamSnapshotNodes(ctx context.Context, src, dst *fleetNode, id string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://node/v1/snapshots/"+id+"/export", nil)
	req.Header.Set("Authorization", "Bearer "+src.key)
	resp, err := nodeHTTP(src).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("export: %s %s", resp.Status, b)
	}
	imp, _ := http.NewRequestWithContext(ctx, "POST", "http://node/v1/snapshots/import", resp.Body)
	imp.Header.Set("Authorization", "Bearer "+dst.key)
	imp.Header.Set("Content-Type", resp.Header.Get("Content-Type"))
	iresp, err := nodeHTTP(dst).Do(imp)
	if err != nil {
		return "", err
	}
	defer iresp.Body.Close()
	b, _ := io.ReadAll(iresp.Body)
	if iresp.StatusCode != 201 {
		return "", fmt.Errorf("import: %s %s", iresp.Status, b)
	}
	var s api.Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return "", err
	}
	if !s.Memory {
		return "", fmt.Errorf("the imported snapshot %+v does not say memory", s)
	}
	return s.ID, nil
}

// TestClusterMemorySnapshot moves a gvisor snapshot with memory between
// the nodes of a real fleet: a busybox shell loop holding a random value
// and a counter only in memory runs on node A; its snapshot with memory
// is streamed to node B (export piped into import) and pushed to and
// pulled from the fleet's registry, and a sandbox created from each copy
// on B answers with the same value, its counter going on from the
// snapshot's (the p50 of export+import, pull, and create of each is
// logged); a create through the gateway on B, a spread fork with memory
// and, once A is killed, a create from the snapshot through the gateway
// restore it too. A copy whose checkpoint names another runsc version is
// refused with failed_precondition naming it.
func TestClusterMemorySnapshot(t *testing.T) {
	needGvisor(t)
	regAddr := startRegistryAt(t, "0.0.0.0")
	_, port, _ := net.SplitHostPort(regAddr)
	f := newFleetWith(t, 2, fleetOptions{registryPort: port})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := f.client
	a, b := f.nodes[0], f.nodes[1]

	src, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Node: a.id, Isolation: "gvisor"})
	if err != nil {
		t.Fatal(err)
	}
	mustShVia(t, c, src.ID, memLoop)
	v0, i0 := askLoop(t, c, src.ID)
	if _, l, _ := strings.Cut(v0, "-"); len(l) < 8 {
		t.Fatalf("the loop answers %q: not holding its 32 MiB", v0)
	}
	snap, err := c.CreateMemorySnapshot(ctx, src.ID, "")
	if err != nil {
		t.Fatalf("snapshot with memory on A: %v", err)
	}
	if !snap.Memory {
		t.Fatalf("snapshot %+v does not say memory", snap)
	}
	// The source goes on; its value stays.
	if v, _ := askLoop(t, c, src.ID); v != v0 {
		t.Fatalf("the source's value changed: %q, was %q", v, v0)
	}
	// restored checks that sandbox id (on node nd) runs the loop with
	// the snapshot's value, counting from the snapshot's count.
	restored := func(t *testing.T, cl *client.Client, id, what string) {
		t.Helper()
		v, i := askLoop(t, cl, id)
		if v != v0 || i < i0 {
			t.Errorf("%s: the loop answers %q %d; the snapshot's value is %q at count >= %d", what, v, i, v0, i0)
		}
	}

	t.Run("export and import", func(t *testing.T) {
		var moved, created []time.Duration
		for round := range 3 {
			start := time.Now()
			id, err := streamSnapshotNodes(ctx, a, b, snap.ID)
			if err != nil {
				t.Fatalf("streaming the memory snapshot from A to B: %v", err)
			}
			moved = append(moved, time.Since(start))
			start = time.Now()
			sb, err := b.client.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: id})
			if err != nil {
				t.Fatalf("create on B from the imported memory snapshot: %v", err)
			}
			created = append(created, time.Since(start))
			if sb.Isolation != "gvisor" {
				t.Errorf("restored on %q", sb.Isolation)
			}
			restored(t, b.client, sb.ID, fmt.Sprintf("round %d, on B from the stream", round))
			if round == 0 {
				// The copy's checkpoint, as if taken by another runsc.
				host := filepath.Join(b.dataDir, "checkpoints", "snapshots", id, "agentbox-host.json")
				if err := os.WriteFile(host, []byte(`{"runsc":"runsc version release-20200101.0","arch":"amd64"}`), 0o600); err != nil {
					t.Fatal(err)
				}
				_, err := b.client.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: id})
				if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "release-20200101.0") {
					t.Errorf("create from a checkpoint of another runsc: %v; want failed_precondition naming the version", err)
				}
			}
			_ = b.client.DestroySandbox(ctx, sb.ID)
		}
		fi, _ := dirBytes(filepath.Join(a.dataDir, "checkpoints", "snapshots", snap.ID))
		t.Logf("memory snapshot (checkpoint %d bytes) A to B: export+import p50 %v (all %v), create (restore) on B p50 %v (all %v)",
			fi, p50(moved).Round(time.Millisecond), moved, p50(created).Round(time.Millisecond), created)
	})

	t.Run("push and pull", func(t *testing.T) {
		ref := f.registry + "/agentbox/memsnap:" + randHex(3)
		start := time.Now()
		if _, err := a.client.PushSnapshot(ctx, snap.ID, ref); err != nil {
			t.Fatalf("pushing the memory snapshot: %v", err)
		}
		push := time.Since(start)
		var pulled, created []time.Duration
		for round := range 3 {
			start := time.Now()
			s, err := b.client.PullSnapshot(ctx, ref, "")
			if err != nil {
				t.Fatalf("pulling the memory snapshot on B: %v", err)
			}
			pulled = append(pulled, time.Since(start))
			if !s.Memory {
				t.Errorf("the pulled snapshot %+v does not say memory", s)
			}
			start = time.Now()
			sb, err := b.client.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: s.ID})
			if err != nil {
				t.Fatalf("create on B from the pulled memory snapshot: %v", err)
			}
			created = append(created, time.Since(start))
			restored(t, b.client, sb.ID, fmt.Sprintf("round %d, on B from the registry", round))
			_ = b.client.DestroySandbox(ctx, sb.ID)
		}
		t.Logf("memory snapshot through the registry: push %v, pull p50 %v (all %v), create (restore) p50 %v (all %v)",
			push.Round(time.Millisecond), p50(pulled).Round(time.Millisecond), pulled, p50(created).Round(time.Millisecond), created)
	})

	t.Run("through the gateway", func(t *testing.T) {
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: snap.ID, Node: b.id})
		if err != nil || sb.Node != b.id {
			t.Fatalf("create on B from a memory snapshot on A: %+v, %v", sb, err)
		}
		t.Logf("create on B through the gateway (push from A, pull on B, restore): %v", time.Since(start).Round(time.Millisecond))
		restored(t, c, sb.ID, "on B through the gateway")
		kids, err := c.ForkSandboxWith(ctx, src.ID, api.ForkRequest{Count: 2, Spread: true, Memory: true})
		if err != nil {
			t.Fatalf("spread fork with memory: %v", err)
		}
		var nodes []string
		for _, k := range kids {
			// The fork's snapshot is newer: its count is higher.
			restored(t, c, k.ID, "a spread fork's child on "+k.Node)
			nodes = append(nodes, k.Node)
		}
		t.Logf("spread fork with memory: children on %v", nodes)
	})

	t.Run("after A is killed", func(t *testing.T) {
		a.kill(syscall.SIGKILL)
		f.waitNodes(func(n api.FleetNode) bool { return n.ID != a.id || !n.Available })
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: snap.ID})
		if err != nil || sb.Node != b.id {
			t.Fatalf("create from the pushed memory snapshot of a dead node: %+v, %v", sb, err)
		}
		restored(t, c, sb.ID, "on B with A dead")
	})
}

// dirBytes is the sum of the sizes of dir's files.
func dirBytes(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n, err
}
