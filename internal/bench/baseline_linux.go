package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/drivers/gvisor"
)

// baselines measures what starting a process costs on this machine
// without agentbox: the floors our figures are judged against.
func (r *runner) baselines(ctx context.Context) {
	n := max(r.opts.N*2, 10)
	run := func(name string, n int, mk func() *exec.Cmd) {
		if !r.want(name) {
			return
		}
		r.add(r.sample(ctx, name, GroupBaseline, n, true, func(ctx context.Context) (time.Duration, error) {
			cmd := mk()
			return timed(func() error {
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("%s: %w: %s", cmd, err, out)
				}
				return nil
			})
		}))
	}
	run("baseline/fork-exec", n, func() *exec.Cmd { return exec.Command("/bin/true") })
	run("baseline/namespaces", n, func() *exec.Cmd {
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
				syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET | syscall.CLONE_NEWCGROUP,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		}
		return cmd
	})
	if _, err := exec.LookPath("unshare"); err != nil {
		r.note("baseline/unshare: skipped, unshare(1) is not installed (util-linux)")
	} else {
		run("baseline/unshare", n, func() *exec.Cmd {
			return exec.Command("unshare", "-Upmuin", "--map-root-user", "true")
		})
	}
	if r.want("baseline/runc") {
		r.runcBaseline(ctx, max(r.opts.N, 5))
	}
	if r.want("baseline/runsc") {
		r.runscBaseline(ctx, max(min(r.opts.N, 20), 5))
	}
	if r.want("baseline/bwrap") {
		r.bwrapBaseline(ctx, max(r.opts.N, 5))
	}
	if r.want("baseline/docker") {
		r.dockerBaseline(ctx, max(min(r.opts.N, 20), 5))
	}
}

// bwrapBaseline measures bubblewrap (what Flatpak and several agent
// sandboxes use) running `true` in the busybox root filesystem with
// every namespace of its own: a peer a user could pick instead.
func (r *runner) bwrapBaseline(ctx context.Context, n int) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		r.note("baseline/bwrap: skipped, bubblewrap is not installed (apt-get install bubblewrap; make bench does it)")
		return
	}
	if _, err := os.Stat(filepath.Join(r.opts.RuncRootfs, "bin", "true")); err != nil {
		r.note("baseline/bwrap: skipped, no busybox root filesystem at %s (scripts/build-template.sh busybox builds it)", r.opts.RuncRootfs)
		return
	}
	r.add(r.sample(ctx, "baseline/bwrap", GroupBaseline, n, true, func(ctx context.Context) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", r.opts.RuncRootfs, "/",
			"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true")
		return timed(func() error {
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("bwrap: %w: %s", err, out)
			}
			return nil
		})
	}))
}

// dockerBaseline measures `docker run --rm --network none` of `true` in
// the busybox root filesystem (imported once as an image), where a
// Docker daemon answers; it is not installed for the bench, since a
// Docker daemon rewrites the host's firewall.
func (r *runner) dockerBaseline(ctx context.Context, n int) {
	docker, err := exec.LookPath("docker")
	if err != nil || exec.CommandContext(ctx, docker, "info").Run() != nil {
		r.note("baseline/docker: skipped, no Docker daemon answers here (Debian's docker.io; not installed by make bench, as it rewrites the host's firewall)")
		return
	}
	const image = "agentbox-bench-busybox:latest"
	if exec.CommandContext(ctx, docker, "image", "inspect", image).Run() != nil {
		imp := exec.CommandContext(ctx, "sh", "-c", `tar -C "$1" -c . | "$2" import - "$3"`, "sh", r.opts.RuncRootfs, docker, image)
		if out, err := imp.CombinedOutput(); err != nil {
			r.note("baseline/docker: skipped, importing the busybox root filesystem: %v: %s", err, out)
			return
		}
	}
	r.add(r.sample(ctx, "baseline/docker", GroupBaseline, n, true, func(ctx context.Context) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, docker, "run", "--rm", "--network", "none", image, "/bin/true")
		return timed(func() error {
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("docker run: %w: %s", err, out)
			}
			return nil
		})
	}))
}

// runscBaseline measures `runsc run` of `true` in a busybox bundle: what a
// platform built on gVisor pays per start. The flags are the gvisor
// tier's (this host needs --ignore-cgroups; no network).
func (r *runner) runscBaseline(ctx context.Context, n int) {
	runsc := os.Getenv("AGENTBOX_RUNSC")
	if runsc == "" {
		runsc = gvisor.DefaultRunsc
	}
	if _, err := os.Stat(runsc); err != nil {
		r.note("baseline/runsc: skipped, runsc is not installed at %s (scripts/install-runsc.sh)", runsc)
		return
	}
	if _, err := os.Stat(filepath.Join(r.opts.RuncRootfs, "bin", "true")); err != nil {
		r.note("baseline/runsc: skipped, no busybox root filesystem at %s (scripts/build-template.sh busybox builds it)", r.opts.RuncRootfs)
		return
	}
	dir, err := os.MkdirTemp("", "agentbox-bench-runsc-")
	if err != nil {
		r.note("baseline/runsc: skipped: %v", err)
		return
	}
	bundle, state := filepath.Join(dir, "bundle"), filepath.Join(dir, "state")
	defer func() {
		// runsc --network=none bind-mounts an empty network namespace
		// into its root directory and leaves it there.
		_ = syscall.Unmount(filepath.Join(state, "null-netns"), syscall.MNT_DETACH)
		_ = os.RemoveAll(dir)
	}()
	if err := writeRuncBundle(ctx, runsc, bundle, r.opts.RuncRootfs); err != nil {
		r.note("baseline/runsc: skipped: %v", err)
		return
	}
	i := 0
	r.add(r.sample(ctx, "baseline/runsc", GroupBaseline, n, true, func(ctx context.Context) (time.Duration, error) {
		i++
		id := "agentbox-bench-runsc-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
		cmd := exec.CommandContext(ctx, runsc, "--root", state, "--ignore-cgroups", "--network=none", "run", "--bundle", bundle, id)
		cmd.Dir = bundle
		return timed(func() error {
			if out, err := cmd.CombinedOutput(); err != nil {
				_ = exec.Command(runsc, "--root", state, "delete", "--force", id).Run()
				return fmt.Errorf("runsc run: %w: %s", err, out)
			}
			return nil
		})
	}))
}

// runcBaseline measures `runc run` of `true` in a busybox bundle: what a
// platform built on an OCI runtime pays per start.
func (r *runner) runcBaseline(ctx context.Context, n int) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		r.note("baseline/runc: skipped, runc is not installed (apt-get install runc; make bench does it)")
		return
	}
	if _, err := os.Stat(filepath.Join(r.opts.RuncRootfs, "bin", "true")); err != nil {
		r.note("baseline/runc: skipped, no busybox root filesystem at %s (scripts/build-template.sh busybox builds it)", r.opts.RuncRootfs)
		return
	}
	dir, err := os.MkdirTemp("", "agentbox-bench-runc-")
	if err != nil {
		r.note("baseline/runc: skipped: %v", err)
		return
	}
	defer os.RemoveAll(dir)
	bundle, state := filepath.Join(dir, "bundle"), filepath.Join(dir, "state")
	if err := writeRuncBundle(ctx, runc, bundle, r.opts.RuncRootfs); err != nil {
		r.note("baseline/runc: skipped: %v", err)
		return
	}
	i := 0
	r.add(r.sample(ctx, "baseline/runc", GroupBaseline, n, true, func(ctx context.Context) (time.Duration, error) {
		i++
		id := "agentbox-bench-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
		cmd := exec.CommandContext(ctx, runc, "--root", state, "run", "--bundle", bundle, id)
		return timed(func() error {
			if out, err := cmd.CombinedOutput(); err != nil {
				_ = exec.Command(runc, "--root", state, "delete", "--force", id).Run()
				return fmt.Errorf("runc run: %w: %s", err, out)
			}
			return nil
		})
	}))
}

// writeRuncBundle makes an OCI bundle whose process is `true`, from the
// default spec `runc spec` (or `runsc spec`) writes.
func writeRuncBundle(ctx context.Context, runc, bundle, rootfs string) error {
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, runc, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		return fmt.Errorf("runc spec: %w: %s", err, out)
	}
	path := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("reading runc's spec: %w", err)
	}
	proc, _ := spec["process"].(map[string]any)
	root, _ := spec["root"].(map[string]any)
	if proc == nil || root == nil {
		return fmt.Errorf("runc's spec has no process or root")
	}
	proc["args"] = []string{"true"}
	proc["terminal"] = false
	abs, err := filepath.Abs(rootfs)
	if err != nil {
		return err
	}
	root["path"] = abs
	root["readonly"] = true
	b, err = json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
