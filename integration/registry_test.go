package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// startRegistry starts Debian's docker-registry (the CNCF distribution
// server, installed by scripts/install-test-deps.sh) on a free port of
// 127.0.0.1 with a storage dir and config of its own, waits for GET /v2/
// to answer and stops it when the test ends. It returns HOST:PORT.
func startRegistry(t testing.TB) string {
	t.Helper()
	return startRegistryAt(t, "127.0.0.1")
}

// startRegistryAt is startRegistry listening on a free port of host (an
// address of this host's).
func startRegistryAt(t testing.TB, host string) string {
	t.Helper()
	const bin = "/usr/bin/docker-registry"
	if _, err := os.Stat(bin); err != nil {
		t.Fatal("docker-registry is not installed: run scripts/install-test-deps.sh (make test does)")
	}
	dir := t.TempDir()
	for attempt := 0; attempt < 5; attempt++ {
		ln, err := net.Listen("tcp4", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, fmt.Sprint("data", attempt)), addr)
		cfgFile := filepath.Join(dir, fmt.Sprint("config", attempt, ".yml"))
		if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := exec.Command(bin, "serve", cfgFile)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case err := <-exited:
				t.Logf("docker-registry exited (%v): %s", err, out.String())
				deadline = time.Time{}
				continue
			default:
			}
			if resp, err := http.Get("http://" + addr + "/v2/"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
					return addr
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !deadline.IsZero() {
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("docker-registry did not answer in 30 s: %s", out.String())
		}
	}
	t.Fatalf("docker-registry could not start on a free port of %s in 5 tries", host)
	return ""
}

// TestRegistryTemplate moves a template through a real registry: busybox
// imported with defaults of its own (env, workdir, memory) is pushed
// (twice: the same digest), pulled back under another name with the
// defaults restored, removed, pulled again with the CLI, and a sandbox
// made from the pulled template runs busybox.
func TestRegistryTemplate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg := startRegistry(t)
	src := "regsrc-" + randHex(3)
	dir := "/var/lib/agentbox/build/busybox"
	if _, err := env.client.ImportTemplate(ctx, api.ImportTemplateRequest{Name: src, Rootfs: dir, Workdir: "/tmp",
		Env: map[string]string{"GREETING": "from-the-registry"}, MemoryMB: 300}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), src) })

	ref := reg + "/agentbox/templates/" + src + ":1"
	start := time.Now()
	pushed, err := env.client.PushTemplate(ctx, src, ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pushed %s as %s in %s", ref, pushed.Digest, time.Since(start).Round(time.Millisecond))
	again, err := env.client.PushTemplate(ctx, src, ref)
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != pushed.Digest {
		t.Errorf("the same template pushed twice gave %s, then %s", pushed.Digest, again.Digest)
	}

	pulledName := "regpull-" + randHex(3)
	start = time.Now()
	tpl, err := env.client.PullTemplate(ctx, ref, pulledName)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pulled in %s", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), pulledName) })
	if tpl.Name != pulledName || tpl.Workdir != "/tmp" || tpl.Env["GREETING"] != "from-the-registry" || tpl.MemoryMB != 300 ||
		!strings.HasPrefix(tpl.Source, "registry "+ref+"@"+pushed.Digest) {
		t.Errorf("pulled template lost its defaults: %+v", tpl)
	}
	check := func(name string) {
		t.Helper()
		id := newSandbox(t, api.CreateSandboxRequest{Template: name})
		got := mustSh(t, id, `pwd; echo $GREETING; busybox echo ok; stat -c %u:%g /bin/busybox`)
		if got != "/tmp\nfrom-the-registry\nok\n0:0" {
			t.Errorf("sandbox of %s: %q", name, got)
		}
		_ = env.client.DestroySandbox(ctx, id)
	}
	check(pulledName)

	// Remove it and pull it back with the CLI, by digest.
	if err := env.client.RemoveTemplate(ctx, pulledName); err != nil {
		t.Fatal(err)
	}
	byDigest := reg + "/agentbox/templates/" + src + "@" + pushed.Digest
	if stdout, stderr, code := cli(t, "", "template", "pull", byDigest, "--name", pulledName); code != 0 || !strings.HasPrefix(stdout, pulledName+" ") {
		t.Fatalf("agentbox template pull: %d %s %s", code, stdout, stderr)
	}
	check(pulledName)
	if stdout, stderr, code := cli(t, "", "template", "push", pulledName, reg+"/agentbox/again:latest"); code != 0 || !strings.HasPrefix(stdout, "sha256:") {
		t.Fatalf("agentbox template push: %d %s %s", code, stdout, stderr)
	}

	// Refused: no registry host, a name that is taken, a missing tag.
	if _, err := env.client.PullTemplate(ctx, "agentbox/templates/x:1", "x"); err == nil || !strings.Contains(err.Error(), "registry's host") {
		t.Errorf("a ref without a host: %v", err)
	}
	if _, err := env.client.PullTemplate(ctx, reg+"/agentbox/templates/"+src+":nope", "nope-"+randHex(3)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a missing tag: %v", err)
	}
}

// TestRegistrySnapshot moves a snapshot through a real registry: a
// busybox sandbox writes a file, deletes one of the template's, makes a
// directory and replaces one with an opaque new one; its snapshot is
// pushed, deleted here, pulled back (with the CLI), and a sandbox made
// from the pulled snapshot sees every change, whiteouts included. A
// chain (a snapshot of a sandbox made from that one) travels too. Then
// 100 MB written: push and pull timed.
func TestRegistrySnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg := startRegistry(t)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	mustSh(t, id, `echo written > /root/new.txt && rm /bin/cat && mkdir -p /srv/dir/sub && echo deep > /srv/dir/sub/f &&
rm -rf /etc && mkdir /etc && echo only > /etc/only && ln /root/new.txt /root/hard && ln -s /root/new.txt /root/sym`)
	snap, err := env.client.CreateSnapshot(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	ref := reg + "/agentbox/snapshots/s1:1"
	pushed, err := env.client.PushSnapshot(ctx, snap.ID, ref)
	if err != nil {
		t.Fatal(err)
	}
	_ = env.client.DestroySandbox(ctx, id)
	if err := env.client.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	name := "pulled-" + randHex(3)
	stdout, stderr, code := cli(t, "", "snapshot", "pull", reg+"/agentbox/snapshots/s1@"+pushed.Digest, "--name", name)
	if code != 0 {
		t.Fatalf("agentbox snapshot pull: %d %s %s", code, stdout, stderr)
	}
	t.Cleanup(func() { _ = env.client.DeleteSnapshot(context.Background(), name) })
	const check = `cat /root/new.txt; test -e /bin/cat && echo cat-still-there; cat /srv/dir/sub/f; ls /etc; busybox stat -c %h /root/hard; readlink /root/sym; busybox ls /bin | busybox grep -c .`
	child := newSandbox(t, api.CreateSandboxRequest{Snapshot: name})
	got := mustSh(t, child, check)
	want := "written\ndeep\nonly\n2\n/root/new.txt"
	if !strings.HasPrefix(got, want+"\n") {
		t.Errorf("sandbox from the pulled snapshot:\n%s\nwant first\n%s", got, want)
	}

	// A chain: the child writes more, its snapshot stacks on the pulled one.
	mustSh(t, child, `echo second > /root/second && rm /root/new.txt`)
	snap2, err := env.client.CreateSnapshot(ctx, child, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.PushSnapshot(ctx, snap2.ID, reg+"/agentbox/snapshots/s2:1"); err != nil {
		t.Fatal(err)
	}
	pulled2, err := env.client.PullSnapshot(ctx, reg+"/agentbox/snapshots/s2:1", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.DeleteSnapshot(context.Background(), pulled2.ID) })
	c2 := newSandbox(t, api.CreateSandboxRequest{Snapshot: pulled2.ID})
	if got := mustSh(t, c2, `cat /root/second; test -e /root/new.txt && echo new-still-there; cat /root/hard /etc/only`); got != "second\nwritten\nonly" {
		t.Errorf("sandbox from the pulled chain: %q", got)
	}

	// Refused: an image pulled as a snapshot.
	tplRef := reg + "/agentbox/templates/bb:1"
	if _, err := env.client.PushTemplate(ctx, "busybox", tplRef); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.PullSnapshot(ctx, tplRef, ""); err == nil || !strings.Contains(err.Error(), "not an agentbox snapshot") {
		t.Errorf("an image pulled as a snapshot: %v", err)
	}

	// 100 MB written: push and pull timed.
	big := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", DiskMB: 512})
	mustSh(t, big, `head -c 104857600 /dev/urandom > /f`)
	bs, err := env.client.CreateSnapshot(ctx, big, "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := env.client.PushSnapshot(ctx, bs.ID, reg+"/agentbox/snapshots/big:1"); err != nil {
		t.Fatal(err)
	}
	pushTook := time.Since(start)
	start = time.Now()
	pb, err := env.client.PullSnapshot(ctx, reg+"/agentbox/snapshots/big:1", "")
	if err != nil {
		t.Fatal(err)
	}
	pullTook := time.Since(start)
	t.Cleanup(func() { _ = env.client.DeleteSnapshot(context.Background(), pb.ID) })
	start = time.Now()
	bc := newSandbox(t, api.CreateSandboxRequest{Snapshot: pb.ID, DiskMB: 512})
	createTook := time.Since(start)
	if got := mustSh(t, bc, `busybox stat -c %s /f`); got != "104857600" {
		t.Errorf("pulled 100 MB file: %q", got)
	}
	t.Logf("snapshot of 100 MB written: push %s, pull %s, create from it %s", pushTook.Round(time.Millisecond), pullTook.Round(time.Millisecond), createTook.Round(time.Millisecond))
	_ = env.client.DestroySandbox(ctx, big)
	_ = env.client.DeleteSnapshot(ctx, bs.ID)
}
