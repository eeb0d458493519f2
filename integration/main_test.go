// Package integration holds agentbox's end-to-end tests: a real daemon (in
// this process, listening on a real unix socket), real sandboxes of every
// installed tier, the real CLI binary, and verdicts read on the host. They
// need root, the packages of scripts/install-deps.sh and the rootfs cache
// of scripts/build-template.sh; `make test` provides all three.
package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
)

// env is the daemon under test, shared by every test in the package.
var env struct {
	cfg     config.Config
	client  *client.Client
	key     string
	cliBin  string
	repo    string
	hasBase bool
	// hasPython: the python template (scripts/build-template.sh python) was
	// in the build cache and is imported.
	hasPython bool
	// stop stops the running daemon and waits for it.
	stop func()
}

func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("AGENTBOX_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func clientListAll() client.ListOptions { return client.ListOptions{} }

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Descriptors this binary inherited (a `flock` around `go test`) are
	// made close-on-exec by daemon.Serve below, before the daemon starts
	// lxcfs, which outlives the tests.
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "integration tests create real sandboxes and must run as root (make test does)")
		return 1
	}
	repo, _ := filepath.Abs("..")
	env.repo = repo
	for _, d := range sweepDeadRuns("/run", "/var/tmp") {
		fmt.Fprintln(os.Stderr, "note: removed what a killed test run left:", d)
	}
	tmp, err := os.MkdirTemp("/var/tmp", "agentbox-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = os.Chmod(tmp, 0o711)
	suffix := randHex(4)
	bin := filepath.Join(tmp, "bin")
	if err := build(repo, bin); err != nil {
		fmt.Fprintln(os.Stderr, "building:", err)
		return 1
	}
	env.cliBin = filepath.Join(bin, "agentbox")
	cfg := config.Default()
	cfg.DataDir = filepath.Join(tmp, "data")
	cfg.RunDir = filepath.Join("/run", "agentbox-it-"+suffix)
	cfg.Socket = filepath.Join(cfg.RunDir, "agentbox.sock")
	cfg.Listen = ""
	cfg.GuestBinary = filepath.Join(bin, "agentbox-guest")
	cfg.CgroupParent = "agentbox-it-" + suffix
	// The next run's sweep (sweep_test.go) reads whose data this is.
	if err := os.WriteFile(filepath.Join(tmp, runDirFile), []byte(cfg.RunDir+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// A /24 of its own: test daemons on one host must not share addresses.
	cfg.Network.Pool = testPool()
	// Allowed names resolve through the test web's DNS server
	// (egress_domain_test.go), made by the first test that needs it.
	cfg.Network.DNSUpstream = config.Resolvers{testDNSUpstream()}
	cfg.StorageSizeGB = 16
	cfg.ReapInterval = 200 * time.Millisecond
	cfg.DefaultTemplate = "busybox"
	// The registry tests' docker-registry listens on a free loopback port
	// (registry_test.go): plain HTTP to any port of 127.0.0.1.
	cfg.Registry.Insecure = []string{"127.0.0.1"}
	cfg.Defaults.TTL = 10 * time.Minute
	env.cfg = cfg

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Serve(ctx, &env.cfg, testLogger()) }()
	env.stop = func() { cancel(); <-done }
	defer func() {
		env.stop()
		cleanupHost(tmp)
		cleanupTestWeb()
	}()
	if err := waitForDaemon(done); err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	if err := importTemplates(); err != nil {
		fmt.Fprintln(os.Stderr, "templates:", err)
		return 1
	}
	code := m.Run()
	// Nothing may outlive the tests' sandboxes.
	list, _ := env.client.ListSandboxes(context.Background(), client.ListOptions{})
	for _, sb := range list {
		_ = env.client.DestroySandbox(context.Background(), sb.ID)
	}
	return code
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func build(repo, bin string) error {
	for _, b := range []struct{ out, pkg, cgo string }{
		{"agentbox", "./cmd/agentbox", "1"},
		{"agentboxd", "./cmd/agentboxd", "1"},
		{"agentbox-guest", "./cmd/agentbox-guest", "0"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, b.out), b.pkg)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", b.pkg, err, out)
		}
	}
	return nil
}

func waitForDaemon(done <-chan error) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return fmt.Errorf("exited: %v", err)
		default:
		}
		key, err := os.ReadFile(filepath.Join(env.cfg.DataDir, "admin.key"))
		if err == nil {
			if _, err := os.Stat(env.cfg.Socket); err == nil {
				env.key = strings.TrimSpace(string(key))
				c, err := client.New(client.WithHost("unix://"+env.cfg.Socket), client.WithAPIKey(env.key), client.WithoutEnvironment())
				if err != nil {
					return err
				}
				if _, err := c.Health(context.Background()); err == nil {
					env.client = c
					return nil
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no answer within 60 s")
}

// importTemplates builds (or takes from the build cache) the busybox and
// base root filesystems and imports them into the test daemon, and python
// and desktop when the build cache has them (scripts/test.sh builds them).
func importTemplates() error {
	ctx := context.Background()
	for _, name := range []string{"busybox", "base", "python", "desktop"} {
		if name == "busybox" {
			cmd := exec.Command(filepath.Join(env.repo, "scripts/build-template.sh"), "busybox", "--no-import")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("building busybox rootfs: %v\n%s", err, out)
			}
		}
		// build-template.sh builds into build/NAME; older layouts used
		// build/NAME/rootfs.
		dir := filepath.Join("/var/lib/agentbox/build", name)
		if _, err := os.Stat(filepath.Join(dir, "rootfs", "bin")); err == nil {
			dir = filepath.Join(dir, "rootfs")
		}
		if _, err := os.Stat(filepath.Join(dir, "bin")); err != nil {
			if name == "base" {
				fmt.Fprintln(os.Stderr, "note: no base rootfs in /var/lib/agentbox/build/base (run scripts/build-template.sh base --no-import); base-template tests will fail")
				continue
			}
			if name == "desktop" {
				fmt.Fprintln(os.Stderr, "note: no desktop rootfs in /var/lib/agentbox/build/desktop (run scripts/build-template.sh desktop --no-import); desktop tests will fail")
				continue
			}
			if name == "python" {
				fmt.Fprintln(os.Stderr, "note: no python rootfs in /var/lib/agentbox/build/python (run scripts/build-template.sh python --no-import); python-template tests will fail")
				continue
			}
			return err
		}
		user, workdir := "root", "/root"
		var memMB int64
		if name == "desktop" {
			memMB = 2048 // as scripts/build-template.sh imports it
		}
		if _, err := env.client.ImportTemplate(ctx, api.ImportTemplateRequest{Name: name, Rootfs: dir, User: user, Workdir: workdir,
			Env: builtinTemplateEnv(), MemoryMB: memMB}); err != nil {
			return fmt.Errorf("importing %s: %w", name, err)
		}
		if name == "base" {
			env.hasBase = true
		}
		if name == "python" {
			env.hasPython = true
		}
	}
	return nil
}

// cleanupHost removes what the test daemon kept on the host: its pool
// mount, cgroups and directories.
func cleanupHost(tmp string) {
	sweepRun(env.cfg.RunDir, env.cfg.CgroupParent) // what a killed run's successor would sweep
	unmountUnder(tmp)
	_ = os.RemoveAll(tmp)
}
