package gvisor

// Memory snapshots: runsc checkpoint and restore.
//
// What this runsc version needs, found by experiment (docs/gvisor.md):
//
//   - runsc cannot save a sandbox holding a host unix socket ("Cannot save
//     endpoint with bound host socket"), and the guest channel is one
//     (--host-uds=create). So Checkpoint first asks the agent to close it
//     (POST proto.Checkpoint.Path on the channel), and checkpoints with
//     --save-restore-exec-argv "<agent> hook": runsc runs the hook inside
//     the sandbox after a restore and after the saved sandbox resumes, and
//     the hook makes the agent listen again (internal/guest/gvisorserve/checkpoint.go).
//   - The hook can be configured once per gVisor kernel: a second
//     checkpoint with the flag fails "save/restore binary is already set"
//     (the setting is saved with the kernel, so a restored sandbox has it
//     too). Checkpoint retries without the flag then; the hook still runs.
//   - A restore takes the new bundle's hostname and, for the hook, its
//     environment: a restored sandbox gets its own identity. Its files
//     are re-opened by path, so its root must show the same files.
//   - runsc restore replaces create+start; it returns before the hook has
//     run, so Restore waits for the agent as Create does.
//   - A checkpoint of a paused sandbox (runsc pause) leaves it paused;
//     runsc resume then runs the hook (mode resume). But runsc runs the
//     hook before the save too (mode save), and in a paused kernel that
//     never finishes: the checkpoint hangs. So before a checkpoint of a
//     frozen sandbox whose kernel has no hook yet, Checkpoint configures
//     it with a throwaway checkpoint of the running sandbox (one more
//     save, once per sandbox).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guestclient"
)

var (
	_ driver.Checkpointer      = (*Driver)(nil) // memory snapshots, pause to disk, fork with memory
	_ driver.CheckpointChecker = (*Driver)(nil) // memory snapshots from other nodes
)

// hooked: sandboxes whose gVisor kernel has the hook configured (by a
// checkpoint of this daemon, or restored from one), by id.
var hooked sync.Map

// hookArgv is the agent's save/restore hook, as runsc wants it (split by
// spaces).
const hookArgv = guestPath + " hook"

// Restore implements driver.Checkpointer.
func (d *Driver) Restore(ctx context.Context, spec *driver.Spec, dir string) (*driver.Handle, error) {
	if err := d.CheckCheckpoint(dir); err != nil {
		return nil, err
	}
	h, err := d.create(ctx, spec, dir)
	if err == nil {
		hooked.Store(spec.ID, true) // saved with the kernel
	}
	return h, err
}

// Checkpoint implements driver.Checkpointer.
func (d *Driver) Checkpoint(ctx context.Context, h *driver.Handle, dir string, opts driver.CheckpointOptions) (err error) {
	root := priv(h).Root
	if err := closeChannel(ctx, h); err != nil {
		return fmt.Errorf("gvisor: asking the guest agent to close its channel for a checkpoint: %w", err)
	}
	paused := false
	defer func() {
		if err == nil {
			return
		}
		// The sandbox goes on as before: thawed, its channel open again.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if paused {
			_, _ = runsc(rctx, root, "resume", h.ID)
		}
		if rerr := reopenChannel(rctx, h); rerr != nil {
			d.log.Warn("gvisor: reopening the guest channel after a failed checkpoint", "sandbox", h.ID, "err", rerr)
		}
	}()
	if _, ok := hooked.Load(h.ID); !ok && opts.Frozen != nil {
		if err := configureHook(ctx, h, dir); err != nil {
			return err
		}
	}
	if opts.Frozen != nil {
		if _, err := runsc(ctx, root, "pause", h.ID); err != nil {
			return fmt.Errorf("gvisor: %w", err)
		}
		paused = true
		if err := opts.Frozen(); err != nil {
			return err
		}
	}
	args := []string{"checkpoint", "--image-path", dir}
	if opts.LeaveRunning {
		args = append(args, "--leave-running")
	}
	if _, ok := hooked.Load(h.ID); ok {
		_, err = runsc(ctx, root, append(args, h.ID)...)
	} else {
		_, err = runsc(ctx, root, append(args, "--save-restore-exec-argv", hookArgv, h.ID)...)
		if err == nil || strings.Contains(err.Error(), "already set") {
			hooked.Store(h.ID, true)
		}
	}
	if err != nil && strings.Contains(err.Error(), "already set") {
		// The failed try left an empty state file behind.
		if ents, rerr := os.ReadDir(dir); rerr == nil {
			for _, e := range ents {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
		_, err = runsc(ctx, root, append(args, h.ID)...)
	}
	if err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	if err := saveShmMB(root, dir); err != nil {
		return err
	}
	if err := saveHost(dir); err != nil {
		return err
	}
	if !opts.LeaveRunning {
		return nil
	}
	if paused {
		if _, err := runsc(ctx, root, "resume", h.ID); err != nil {
			return fmt.Errorf("gvisor: %w", err)
		}
		paused = false
	}
	exited, _ := d.exits.Get(h.ID)
	if err := waitReady(ctx, h, exited); err != nil {
		return fmt.Errorf("gvisor: after the checkpoint: %w", err)
	}
	return nil
}

// configureHook sets the save/restore hook in h's kernel with a throwaway
// checkpoint of the running sandbox (left running), its channel closed
// already; the hook's resume opens the channel again, so it is closed
// once more after.
func configureHook(ctx context.Context, h *driver.Handle, dir string) error {
	tmp := dir + ".hook"
	_ = os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	defer os.RemoveAll(tmp)
	_, err := runsc(ctx, priv(h).Root, "checkpoint", "--image-path", tmp, "--leave-running", "--save-restore-exec-argv", hookArgv, h.ID)
	if err != nil && !strings.Contains(err.Error(), "already set") {
		return fmt.Errorf("gvisor: configuring the checkpoint hook: %w", err)
	}
	hooked.Store(h.ID, true)
	if err != nil {
		return nil // it was; the channel is still closed
	}
	if err := waitReady(ctx, h, nil); err != nil {
		return fmt.Errorf("gvisor: after configuring the checkpoint hook: %w", err)
	}
	return closeChannel(ctx, h)
}

// closeChannel asks the agent to close its channel (it answers first).
func closeChannel(ctx context.Context, h *driver.Handle) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := guestclient.Unix(h.Socket).Checkpoint(ctx); err != nil {
		return fmt.Errorf("%w (an agent older than checkpoint support?)", err)
	}
	// The agent closes right after answering; wait until it has, so that
	// runsc does not find the socket still bound.
	for range 200 {
		if err := dialOnce(ctx, h.Socket); err != nil {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return errors.New("the agent did not close its channel")
}

func dialOnce(ctx context.Context, sock string) error {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", sock)
	if err == nil {
		c.Close()
	}
	return err
}

// reopenChannel runs the agent's hook (mode resume) through runsc exec,
// after a checkpoint that failed once the channel was closed.
func reopenChannel(ctx context.Context, h *driver.Handle) error {
	cmd := exec.CommandContext(ctx, runscPath(), append(globalFlags(priv(h).Root),
		"exec", "--env", "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE=resume", h.ID, guestPath, "hook")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// shmFile, in a checkpoint's directory, holds the checkpointed sandbox's
// /dev/shm size in MiB: a restore must mount the same (runsc compares
// the mounts), whatever memory the restored sandbox is given.
const shmFile = "agentbox-shm-mb"

// saveShmMB records in dir the /dev/shm size of the sandbox whose runsc
// root is root, read from its bundle (<run dir>/bundle/config.json).
func saveShmMB(root, dir string) error {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(root), "bundle", "config.json"))
	if err != nil {
		return fmt.Errorf("gvisor: reading the bundle of the checkpointed sandbox: %w", err)
	}
	var spec ociSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("gvisor: the bundle of the checkpointed sandbox: %w", err)
	}
	for _, m := range spec.Mounts {
		if m.Destination != "/dev/shm" {
			continue
		}
		for _, o := range m.Options {
			if v, ok := strings.CutPrefix(o, "size="); ok {
				mb, err := strconv.ParseInt(strings.TrimSuffix(v, "m"), 10, 64)
				if err != nil || !strings.HasSuffix(v, "m") {
					return fmt.Errorf("gvisor: /dev/shm size %q in the bundle is not in MiB", v)
				}
				return os.WriteFile(filepath.Join(dir, shmFile), []byte(strconv.FormatInt(mb, 10)+"\n"), 0o600)
			}
		}
	}
	return fmt.Errorf("gvisor: the bundle of the checkpointed sandbox has no /dev/shm size")
}

// checkpointShmMB is the /dev/shm size the checkpoint in dir was taken
// with; def for a checkpoint without the record (taken by an earlier
// agentbox, when the size followed the memory: restore with the same).
func checkpointShmMB(dir string, def int64) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, shmFile))
	if errors.Is(err, fs.ErrNotExist) {
		return def, nil
	}
	if err != nil {
		return 0, fmt.Errorf("gvisor: reading the checkpoint's /dev/shm size: %w", err)
	}
	mb, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || mb <= 0 {
		return 0, fmt.Errorf("gvisor: the checkpoint's /dev/shm size %q is not a size in MiB", b)
	}
	return mb, nil
}

// hostFile records, in a checkpoint, what of its host a restore needs
// the same (savedHost): runsc restores only its own version's kernel
// state, on the same CPU architecture.
const hostFile = "agentbox-host.json"

// savedHost is a checkpoint's hostFile.
type savedHost struct {
	Runsc string `json:"runsc"` // the first line of `runsc --version`
	Arch  string `json:"arch"`  // GOARCH
}

var runscVersion = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, runscPath(), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("gvisor: runsc --version: %w", err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line, nil
})

func thisHost() (savedHost, error) {
	v, err := runscVersion()
	return savedHost{Runsc: v, Arch: runtime.GOARCH}, err
}

// saveHost writes this host's savedHost into dir.
func saveHost(dir string) error {
	h, err := thisHost()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(h)
	return os.WriteFile(filepath.Join(dir, hostFile), b, 0o600)
}

// CheckCheckpoint implements driver.CheckpointChecker: dir holds a runsc
// checkpoint, taken by this runsc version on this architecture (a
// checkpoint without the record was taken on this node by an earlier
// agentbox, and is left to runsc).
func (d *Driver) CheckCheckpoint(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		if _, merr := os.Stat(filepath.Join(dir, "microvm.json")); merr == nil {
			return errdefs.Precondition("gvisor: the checkpoint is a microvm's: it restores only on the microvm tier")
		}
		return fmt.Errorf("gvisor: no checkpoint in %s: %w", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, hostFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gvisor: the checkpoint's host record: %w", err)
	}
	var saved savedHost
	if err := json.Unmarshal(b, &saved); err != nil {
		return errdefs.Invalid("gvisor: the checkpoint's host record %s is not valid: %v", hostFile, err)
	}
	here, err := thisHost()
	if err != nil {
		return err
	}
	switch {
	case saved.Arch != here.Arch:
		return errdefs.Precondition("gvisor: the checkpoint was taken on %s and this host is %s: runsc restores only on the same architecture", saved.Arch, here.Arch)
	case saved.Runsc != here.Runsc:
		return errdefs.Precondition("gvisor: the checkpoint was taken by %q and this host runs %q: runsc restores only its own version's checkpoints (install the same runsc on both nodes: scripts/install-runsc.sh)", saved.Runsc, here.Runsc)
	}
	return nil
}
