package gvisor

// Memory snapshots: runsc checkpoint and restore.
//
// What this runsc version needs, found by experiment (docs/gvisor.md):
//
//   - runsc cannot save a sandbox holding a host unix socket ("Cannot save
//     endpoint with bound host socket"), and the guest channel is one
//     (--host-uds=create). So Checkpoint first asks the agent to close it
//     (POST api.GuestCheckpointPath on the channel), and checkpoints with
//     --save-restore-exec-argv "<agent> hook": runsc runs the hook inside
//     the sandbox after a restore and after the saved sandbox resumes, and
//     the hook makes the agent listen again (cmd/agentbox-guest/checkpoint.go).
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
//     runsc resume then runs the hook (mode resume).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
)

var _ driver.Checkpointer = (*Driver)(nil)

// hookArgv is the agent's save/restore hook, as runsc wants it (split by
// spaces).
const hookArgv = guestPath + " hook"

// Restore implements driver.Checkpointer.
func (d *Driver) Restore(ctx context.Context, spec *driver.Spec, dir string) (*driver.Handle, error) {
	if _, err := os.Stat(dir + "/checkpoint.img"); err != nil {
		return nil, fmt.Errorf("gvisor: no checkpoint in %s: %w", dir, err)
	}
	return d.create(ctx, spec, dir)
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
	_, err = runsc(ctx, root, append(args, "--save-restore-exec-argv", hookArgv, h.ID)...)
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
	if !opts.LeaveRunning {
		return nil
	}
	if paused {
		if _, err := runsc(ctx, root, "resume", h.ID); err != nil {
			return fmt.Errorf("gvisor: %w", err)
		}
		paused = false
	}
	d.mu.Lock()
	exited := d.exited[h.ID]
	d.mu.Unlock()
	if err := waitReady(ctx, h, exited); err != nil {
		return fmt.Errorf("gvisor: after the checkpoint: %w", err)
	}
	return nil
}

// closeChannel asks the agent to close its channel (it answers first).
func closeChannel(ctx context.Context, h *driver.Handle) error {
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", h.Socket)
		},
		DisableKeepAlives: true,
	}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://guest"+api.GuestCheckpointPath, nil)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("the agent answered %s (an agent older than checkpoint support?)", resp.Status)
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
