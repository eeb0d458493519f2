package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

// Checkpoints (driver.Checkpointer: pause to disk, snapshots with memory,
// fork with memory). A checkpoint directory holds
//
//   - state: the VM's device state (vCPUs, devices) as QEMU's migration
//     stream, written by QEMU into a file the driver opened and passed
//     over QMP (its sandbox lets it neither spawn a helper nor open a
//     path);
//   - ram: the guest's RAM, copied by the driver from the memfd the VM
//     maps (ram_linux.go), its holes kept. A VM whose RAM is a
//     checkpoint's image mapped copy-on-write (a fork's child, a create
//     from a snapshot) has no file of its own: its state file carries
//     the RAM as well, and there is no ram (savedVM.RAM says which);
//   - disk.img: the writable disk at the same instant, a reflink clone
//     where the file system has them (btrfs, XFS), a sparse copy
//     elsewhere;
//   - microvm.json: the VM's shape (savedVM), which a restore repeats:
//     QEMU loads a state only into the identical device model.
//
// Checkpoints of layout 1 (before RAM files) have a file memory, the
// whole VM's stream; they restore as a state with the RAM in it does.
//
// The VM is stopped (QMP stop: vCPUs halted, disk requests drained) while
// the disk is copied, its state saved and its RAM copied, so files and
// memory are of one instant; left running it goes on (cont), its agent
// session untouched. A restore starts QEMU with the same devices and
// `-incoming defer`, on a clone of the saved disk in the new sandbox's
// work directory, and with its RAM as ram_linux.go tells; it loads the
// state (migrate-incoming, x-ignore-shared when the RAM is in the image),
// then says hello to the agent with the new sandbox's identity and
// network (vminit takes them on a later hello).

var (
	_ driver.Checkpointer      = (*Driver)(nil)
	_ driver.CheckpointChecker = (*Driver)(nil)
)

// savedVMVersion is the layout of microvm.json and the files beside it;
// a checkpoint of layout 1 (legacyVMVersion) restores too.
const (
	savedVMVersion  = 2
	legacyVMVersion = 1
)

// Where a checkpoint keeps the guest's RAM (savedVM.RAM).
const (
	ramInStream = "stream" // in the state file (and layout 1's)
	ramInImage  = "ram"    // in the file ram beside it
)

// savedVM is a checkpoint's description (microvm.json).
type savedVM struct {
	Version int `json:"version"`
	// Accel is the accelerator the state was saved under: QEMU cannot
	// load a KVM guest's state under TCG, nor the reverse (the vCPU
	// models differ), so a restore under the other is refused.
	Accel    string   `json:"accel"`
	CPUs     int      `json:"cpus"`
	MemoryMB int64    `json:"memory_mb"`
	Layers   []string `json:"layers"`
	Net      bool     `json:"net"`
	Kernel   string   `json:"kernel"`
	// RAM is where the guest's RAM is: ramInImage or ramInStream.
	RAM string `json:"ram,omitempty"`
	// Stopped: the checkpoint stopped its VM (a pause to disk), so it is
	// restored once: into RAM of the VM's own, not a shared image.
	Stopped bool `json:"stopped,omitempty"`

	dir string
}

func (s *savedVM) state() string {
	if s.Version == legacyVMVersion {
		return filepath.Join(s.dir, "memory")
	}
	return filepath.Join(s.dir, "state")
}
func (s *savedVM) ram() string  { return filepath.Join(s.dir, "ram") }
func (s *savedVM) disk() string { return filepath.Join(s.dir, "disk.img") }

// readSaved reads the checkpoint in dir and checks that this driver can
// restore it.
func (d *Driver) readSaved(dir string) (*savedVM, error) {
	b, err := os.ReadFile(filepath.Join(dir, "microvm.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errdefs.Precondition("microvm: %s holds no microvm checkpoint (a checkpoint of another tier restores only on its own)", dir)
		}
		return nil, fmt.Errorf("microvm: checkpoint: %w", err)
	}
	s := &savedVM{dir: dir}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("microvm: checkpoint %s: %w", dir, err)
	}
	switch {
	case s.Version != savedVMVersion && s.Version != legacyVMVersion:
		return nil, errdefs.Precondition("microvm: the checkpoint in %s has layout %d; this agentbox reads %d and %d", dir, s.Version, legacyVMVersion, savedVMVersion)
	case s.Version == legacyVMVersion && s.RAM != "":
		return nil, fmt.Errorf("microvm: checkpoint %s: layout 1 with RAM %q", dir, s.RAM)
	case s.Version == savedVMVersion && s.RAM != ramInStream && s.RAM != ramInImage:
		return nil, fmt.Errorf("microvm: checkpoint %s: RAM kept %q, not %s or %s", dir, s.RAM, ramInStream, ramInImage)
	case s.Accel != d.Accel:
		return nil, errdefs.Precondition("microvm: the checkpoint was saved under %s and this host runs VMs under %s: QEMU cannot restore a VM's state under another accelerator", s.Accel, d.Accel)
	case s.Kernel != KernelRelease:
		return nil, errdefs.Precondition("microvm: the checkpoint's guest kernel is %s, this agentbox boots %s", s.Kernel, KernelRelease)
	case s.CPUs < 1 || s.MemoryMB < 1:
		return nil, fmt.Errorf("microvm: checkpoint %s: no VM shape", dir)
	}
	return s, nil
}

// CheckCheckpoint implements driver.CheckpointChecker: the checkpoint's
// layout, accelerator and guest kernel are what this driver restores
// (readSaved), and its files are there.
func (d *Driver) CheckCheckpoint(dir string) error {
	s, err := d.readSaved(dir)
	if err != nil {
		return err
	}
	need := []string{s.state(), s.disk()}
	if s.Version == savedVMVersion && s.RAM == ramInImage {
		need = append(need, s.ram())
	}
	for _, f := range need {
		if _, err := os.Stat(f); err != nil {
			return errdefs.Invalid("microvm: the checkpoint lacks %s", filepath.Base(f))
		}
	}
	return nil
}

// Restore implements driver.Checkpointer.
func (d *Driver) Restore(ctx context.Context, spec *driver.Spec, dir string) (*driver.Handle, error) {
	saved, err := d.readSaved(dir)
	if err != nil {
		return nil, err
	}
	return d.start(ctx, spec, saved)
}

// Checkpoint implements driver.Checkpointer.
func (d *Driver) Checkpoint(ctx context.Context, h *driver.Handle, dir string, opts driver.CheckpointOptions) (err error) {
	p := priv(h)
	if p.CPUs == 0 {
		return errdefs.Precondition("microvm: sandbox %s was made by an agentbox without VM checkpoints; it cannot be saved", h.ID)
	}
	q, err := dialQMP(ctx, filepath.Join(p.RunDir, "qmp.sock"))
	if err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	defer q.Close()
	if _, err := q.exec(ctx, "stop", nil, nil); err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	defer func() {
		if err == nil && !opts.LeaveRunning {
			return
		}
		// Left running, or failed: the VM goes on where it stopped.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if _, cerr := q.exec(cctx, "cont", nil, nil); cerr != nil && err == nil {
			err = fmt.Errorf("microvm: after the checkpoint: %w", cerr)
		}
	}()
	if opts.Frozen != nil {
		if err := opts.Frozen(); err != nil {
			return err
		}
	}
	// RAM of the VM's own is copied to an image; RAM mapped from another
	// checkpoint's image goes in the state.
	saved := &savedVM{Version: savedVMVersion, Accel: h.Accelerator, CPUs: p.CPUs, MemoryMB: p.MemoryMB,
		Layers: p.Layers, Net: p.Net, Kernel: KernelRelease, RAM: ramInStream, Stopped: !opts.LeaveRunning, dir: dir}
	if p.RAMFD > 0 {
		saved.RAM = ramInImage
	}
	if saved.Accel == "" {
		saved.Accel = d.Accel
	}
	if err := cloneFile(ctx, p.Writable, saved.disk()); err != nil {
		return fmt.Errorf("microvm: saving the writable disk: %w", err)
	}
	f, err := os.OpenFile(saved.state(), os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	err = q.migrateTo(ctx, f, saved.RAM == ramInImage)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && saved.RAM == ramInImage {
		err = saveRAM(h.Pid, p.RAMFD, saved.ram())
	}
	if err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	b, _ := json.Marshal(saved)
	if err := os.WriteFile(filepath.Join(dir, "microvm.json"), b, 0o600); err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	if opts.LeaveRunning {
		return nil
	}
	// Saved and stopped: QEMU goes (the caller's Destroy would kill it).
	_, _ = q.exec(ctx, "quit", nil, nil)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if unix.Kill(h.Pid, 0) != nil {
			break
		}
		if ch, ok := d.exits.Get(h.ID); ok {
			select {
			case <-ch:
				return nil
			default:
			}
		}
	}
	return nil
}

// connectRestored waits until QEMU has loaded the saved state and runs
// the VM, then says hello to the restored agent. Its old host's session
// ended with the old QEMU (virtio-serial tells the guest the port has no
// host now), so it waits for a hello as after a daemon restart; a hello
// that reached its old session first goes unacked and is said again, and
// an ack of such a hello is not taken for a later one's (dialSession).
func (d *Driver) connectRestored(ctx context.Context, v *vm, hello *proto.VMHello) error {
	if err := startIncoming(ctx, v.qmp, v.incomingFD, v.ignoreShared); err != nil {
		return fmt.Errorf("loading the saved VM: %w", err)
	}
	if err := runIncoming(ctx, v.qmp, v.exited); err != nil {
		return fmt.Errorf("loading the saved VM: %w", err)
	}
	// The guest learns that its old host went only once it runs again,
	// so a hello sent at once often reaches the old session and is lost:
	// a short first wait for the ack (doubled on each try) makes that
	// cost a tenth of a second, not a second.
	hello.Time = time.Now().UnixNano()
	return d.open(ctx, v, hello, 100*time.Millisecond, "after the restore")
}

// cloneFile copies src to a new file dst: a reflink clone where the file
// system shares extents (btrfs, XFS: no data copied), else a sparse copy.
func cloneFile(ctx context.Context, src, dst string) error {
	out, err := exec.CommandContext(ctx, "cp", "--reflink=auto", "--sparse=always", "--", src, dst).CombinedOutput()
	if err != nil {
		_ = os.Remove(dst)
		return fmt.Errorf("cp %s: %v: %s", src, err, lastLines(out, 2))
	}
	return nil
}
