package integration

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/agentbox/agentbox/api"
)

// TestNodeImage builds agentbox's own image as a user would for deploy/
// (scripts/build-image.sh: the node userland, this build's binaries,
// imported and pushed by the daemon), pulls it back from the registry
// with another OCI client, and runs its binaries in a sandbox of it:
// the daemon and CLI of this build, runsc, and the host tools a node
// calls (nft, ip, btrfs, lxcfs).
func TestNodeImage(t *testing.T) {
	reg := startRegistry(t)
	ref := reg + "/agentbox/agentbox-node:test"
	tpl := "abimg-" + randHex(3)
	root, _ := filepath.Abs("..")
	cmd := exec.Command(filepath.Join(root, "scripts", "build-image.sh"), ref, "--name", tpl)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "AGENTBOX="+env.cliBin, "AGENTBOX_BIN_DIR="+filepath.Dir(env.cliBin),
		"AGENTBOX_HOST=unix://"+env.cfg.Socket, "AGENTBOX_API_KEY="+env.key)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/build-image.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), tpl) })
	t.Logf("built and pushed in %s", time.Since(start).Round(time.Millisecond))

	// Another OCI client finds the binaries in the pushed image.
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"usr/local/bin/agentbox": false, "usr/local/bin/agentboxd": false,
		"usr/local/lib/agentbox/agentbox-guest": false, "usr/local/lib/agentbox/runsc": false, "usr/sbin/nft": false}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if _, ok := want[strings.TrimPrefix(h.Name, "./")]; ok {
			want[strings.TrimPrefix(h.Name, "./")] = true
		}
	}
	for f, ok := range want {
		if !ok {
			t.Errorf("the pushed image lacks %s", f)
		}
	}

	// Its userland runs this build's binaries and the node's host tools.
	ctx := context.Background()
	sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: tpl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), sb.ID) })
	res, err := env.client.Exec(ctx, sb.ID, api.ExecRequest{Shell: "agentbox version && agentboxd --help >/dev/null && " +
		"/usr/local/lib/agentbox/runsc --version | head -1 && command -v nft && ip -V && btrfs --version && lxcfs --version && debootstrap --version"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the image's tools: %+v, %v", res, err)
	}
	vout, _ := exec.Command(env.cliBin, "version").Output()
	if first := strings.SplitN(string(vout), "\n", 2)[0]; !strings.Contains(res.Stdout, strings.TrimSpace(first)) {
		t.Errorf("the image's agentbox says %q; this build's says %q", res.Stdout, first)
	}
}
