package integration

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage/ocitest"
)

type ociEntry = ocitest.Entry

// busyboxImage is a two-layer image made around the host's static
// busybox: the second (zstd) layer deletes, and empties with an opaque
// whiteout, what the first made.
func busyboxImage(t *testing.T) v1.Image {
	t.Helper()
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		bb, err = os.ReadFile("/bin/busybox")
	}
	if err != nil {
		t.Fatalf("the test needs a static busybox on the host (apt-get install busybox-static): %v", err)
	}
	l1 := []ociEntry{
		{Name: "bin/"}, {Name: "bin/busybox", Body: string(bb), Mode: 0o755},
		{Name: "etc/"}, {Name: "etc/gonefile", Body: "x"},
		{Name: "etc/passwd", Body: "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n"},
		{Name: "etc/group", Body: "root:x:0:\napp:x:1000:\n"},
		{Name: "home/"}, {Name: "home/app/", UID: 1000, GID: 1000},
		{Name: "root/", Mode: 0o700}, {Name: "tmp/", Mode: 0o1777},
		{Name: "proc/"}, {Name: "dev/"}, {Name: "sys/"},
		{Name: "dev/null", Type: tar.TypeChar}, // dropped: the guest provides /dev
		{Name: "opq/"}, {Name: "opq/old", Body: "old"},
	}
	for _, tool := range []string{"sh", "id", "pwd", "ls", "cat", "test", "echo", "env"} {
		l1 = append(l1, ociEntry{Name: "bin/" + tool, Type: tar.TypeSymlink, Link: "busybox"})
	}
	l2 := []ociEntry{
		{Name: "etc/.wh.gonefile"},
		{Name: "opq/"}, {Name: "opq/.wh..wh..opq"}, {Name: "opq/new", Body: "new"},
	}
	img, err := ocitest.Image(v1.Config{
		Env:        []string{"PATH=/bin", "GREETING=from-image"},
		WorkingDir: "/home/app",
		User:       "app",
		Cmd:        []string{"/bin/sh"},
	}, "", ocitest.Layer(l1, "gzip"), ocitest.Layer(l2, "zstd"))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestTemplateImageImport is issue 3's "done when": a docker save archive
// is uploaded with the CLI, and run --template works with the image's env,
// workdir and user; rm is refused while a sandbox uses the template.
func TestTemplateImageImport(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(dir, "app.tar")
	if err := ocitest.WriteDockerArchive(archive, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	name := "itest-img-" + randHex(3)
	out, errOut, code := cli(t, "", "template", "import", archive, "--name", name)
	if code != 0 || !strings.HasPrefix(out, name+" 1") {
		t.Fatalf("template import: code %d out %q err %q", code, out, errOut)
	}
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), name) })

	out, errOut, code = cli(t, "", "run", "--template", name, "--", "sh", "-c",
		`pwd; id -u; echo "$GREETING"; ls /opq; test -e /etc/gonefile || echo gone`)
	if want := "/home/app\n1000\nfrom-image\nnew\ngone\n"; code != 0 || out != want {
		t.Fatalf("run: code %d out %q (want %q) err %q", code, out, want, errOut)
	}

	out, _, code = cli(t, "", "template", "inspect", "--pretty", name)
	for _, want := range []string{"user:     app", "workdir:  /home/app", "GREETING=from-image", "cmd:      /bin/sh", "source:   image upload@sha256:"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("inspect lacks %q: %q", want, out)
		}
	}

	// A sandbox holds the template: rm is refused, naming it.
	ctx := context.Background()
	sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: name})
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code = cli(t, "", "template", "rm", name)
	if code == 0 || !strings.Contains(errOut, "in use by sandbox "+sb.ID) {
		t.Errorf("rm while in use: code %d err %q", code, errOut)
	}
	if err := env.client.DestroySandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code = cli(t, "", "template", "rm", name); code != 0 {
		t.Fatalf("rm: code %d err %q", code, errOut)
	}
	if _, err := env.client.GetTemplate(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("template after rm: %v", err)
	}
}

// TestTemplateImageHostPath imports an OCI layout directory through the
// image field (admin, a path on the daemon's host), and a bad archive
// through the upload route, which names the problem and leaves nothing.
func TestTemplateImageHostPath(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	lay := filepath.Join(dir, "layout")
	if err := ocitest.WriteLayout(lay, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	name := "itest-lay-" + randHex(3)
	tpl, err := env.client.ImportTemplate(ctx, api.ImportTemplateRequest{Name: name, Image: lay, Env: map[string]string{"GREETING": "override"}})
	if err != nil {
		t.Fatalf("import layout: %v", err)
	}
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), name) })
	if tpl.User != "app" || tpl.Env["GREETING"] != "override" {
		t.Errorf("template = %+v", tpl)
	}
	id := newSandbox(t, api.CreateSandboxRequest{Template: name})
	if got := mustSh(t, id, `echo "$(id -un) $GREETING $(pwd)"`); strings.TrimSpace(got) != "app override /home/app" {
		t.Errorf("sandbox sees %q", got)
	}

	bad := name + "-bad"
	_, err = env.client.UploadTemplate(ctx, api.ImportTemplateRequest{Name: bad}, strings.NewReader("not an archive at all"))
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a tar archive") {
		t.Errorf("bad upload: %v", err)
	}
	if _, err := env.client.GetTemplate(ctx, bad); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a failed upload left template %s: %v", bad, err)
	}
}

// TestTemplateDefaultMemory: a template imported with --memory gives its
// sandboxes that limit when they ask for none, and a request's own limit
// still wins (the desktop template is imported with 2G this way).
func TestTemplateDefaultMemory(t *testing.T) {
	name := "mem-" + randHex(3)
	if _, e, code := cli(t, "", "template", "import", name, "--rootfs", "/var/lib/agentbox/build/busybox", "--memory", "300M"); code != 0 {
		t.Fatalf("template import --memory: %s", e)
	}
	t.Cleanup(func() { cli(t, "", "template", "rm", name) })
	ctx := context.Background()
	tpl, err := env.client.GetTemplate(ctx, name)
	if err != nil || tpl.MemoryMB != 300 {
		t.Fatalf("template = %+v, %v; want memory_mb 300", tpl, err)
	}
	for _, c := range []struct {
		ask, want int64
	}{{0, 300}, {256, 256}} {
		sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: name, MemoryMB: c.ask, TTLSeconds: 120})
		if err != nil {
			t.Fatal(err)
		}
		_ = env.client.DestroySandbox(ctx, sb.ID)
		if sb.Resources.MemoryMB != c.want {
			t.Errorf("asking for %d MB gave %d, want %d", c.ask, sb.Resources.MemoryMB, c.want)
		}
	}
	if _, e, code := cli(t, "", "template", "import", name+"x", "--rootfs", "/var/lib/agentbox/build/busybox", "--memory", "lots"); code == 0 || !strings.Contains(e, "memory") {
		t.Errorf("--memory lots: exit %d, %q", code, e)
	}
}
