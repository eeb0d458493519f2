package sandbox

import (
	"context"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
)

// Memory snapshots between nodes: a snapshot with memory leaves its node
// (export, push) with its checkpoint's files (storage/snapshot_files.go)
// after its layers, listed in its config (SnapshotMemory), and lands on
// another node (import, pull) into <data_dir>/checkpoints/snapshots/<new
// id>, where a create from it restores it as from one taken there. On
// landing: the snapshot's tier must be one of this node's that restores
// memory; the file list must be valid (names, count) and its sum fit
// what the tenant's disk quota leaves once the layers landed; each file
// is written through an os.Root, at most its listed size, and checked
// against its sha256; then the tier's driver checks that this host
// restores what the checkpoint recorded of its own (CheckpointChecker:
// gvisor's runsc version and architecture; microvm's accelerator, guest
// kernel and layout), a mismatch refused with a failed_precondition that
// names it. The memory's bytes count in the imported snapshot's size.

// SnapshotMemory is the memory of a snapshot in its config: the tier
// whose checkpoint it is and the checkpoint's files.
type SnapshotMemory struct {
	Isolation string                 `json:"isolation"`
	Files     []storage.SnapshotFile `json:"files"`
}

// reservedCheckpointFiles are the names of a checkpoint directory that
// the service keeps for itself.
var reservedCheckpointFiles = []string{completeMarker}

// exportMemory describes snapshot rec's memory for its config (digests
// with withDigests: an OCI artifact's config carries them) and returns
// its directory; nil when it has none.
func (s *Service) exportMemory(rec *store.SnapshotRecord, withDigests bool) (*SnapshotMemory, string, error) {
	if !s.ckpt.hasMemory(rec.ID) {
		return nil, "", nil
	}
	drv := s.drivers[rec.Isolation]
	if drv == nil || rec.Isolation == "" {
		return nil, "", errdefs.Precondition("snapshot %s holds memory of isolation %q, which this node no longer has", rec.ID, rec.Isolation)
	}
	if !driver.Has[driver.CheckpointChecker](drv) {
		return nil, "", errdefs.Precondition("snapshot %s holds memory of isolation %s, whose checkpoints cannot be checked on another node: it cannot leave this node with its memory", rec.ID, rec.Isolation)
	}
	if rec.Isolation == "microvm" {
		// Its saved VM (microvm.json) names this node's template layer
		// directories, which another node's differ from.
		return nil, "", errdefs.Precondition("snapshot %s holds a microvm's memory: moving microvm memory snapshots between nodes is not supported yet (their saved VM names this node's template layers); gvisor memory snapshots move, and a microvm's files move as a files snapshot", rec.ID)
	}
	dir := s.ckpt.snapshotDir(rec.ID)
	files, err := storage.SnapshotFilesOf(dir, withDigests, reservedCheckpointFiles...)
	if err != nil {
		return nil, "", fmt.Errorf("memory of snapshot %s: %w", rec.ID, err)
	}
	return &SnapshotMemory{Isolation: rec.Isolation, Files: files}, dir, nil
}

// memoryTier checks, before anything lands, that this node can take the
// memory m of a snapshot (nil: none) and returns the tier's driver.
func (s *Service) memoryTier(m *SnapshotMemory, isolation string) (driver.Driver, error) {
	if m == nil {
		return nil, nil
	}
	if m.Isolation != isolation || m.Isolation == "" {
		return nil, errdefs.Invalid("the snapshot's memory is of isolation %q and the snapshot of %q", m.Isolation, isolation)
	}
	drv, ok := s.drivers[m.Isolation]
	if !ok {
		return nil, errdefs.Precondition("the snapshot holds memory (a checkpoint of its processes) of isolation %s, which this node does not have: it restores only on a node with that tier (or take a snapshot without memory)", m.Isolation)
	}
	if !driver.Has[driver.Checkpointer](drv) || !driver.Has[driver.CheckpointChecker](drv) {
		return nil, errdefs.Precondition("the snapshot holds memory of isolation %s, whose memory this node cannot restore", m.Isolation)
	}
	if err := storage.CheckSnapshotFiles(m.Files, reservedCheckpointFiles, 0); err != nil {
		return nil, err
	}
	return drv, nil
}

// landMemory writes the memory m of new snapshot snapID, whose layers
// took layerBytes, with receive (which writes m.Files into the directory
// it is given), checks it with drv and marks it whole; it returns its
// bytes. ctx carries what the tenant's quota left before the layers
// (storage.WithMaxBytes). On error nothing of it is left.
func (s *Service) landMemory(ctx context.Context, snapID string, m *SnapshotMemory, drv driver.Driver, layerBytes int64, receive func(dir string) error) (n int64, err error) {
	if limit := storage.MaxBytesFrom(ctx); limit > 0 {
		if limit -= layerBytes; limit <= 0 {
			return 0, errdefs.Exhausted("the snapshot's memory does not fit in what the tenant's disk_mb quota leaves once its files landed")
		}
		if err := storage.CheckSnapshotFiles(m.Files, reservedCheckpointFiles, limit); err != nil {
			return 0, err
		}
	}
	dir := s.ckpt.snapshotDir(snapID)
	if err := newCheckpointDir(dir); err != nil {
		return 0, fmt.Errorf("checkpoint directory: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := receive(dir); err != nil {
		return 0, fmt.Errorf("the snapshot's memory: %w", err)
	}
	cc, _ := driver.As[driver.CheckpointChecker](drv)
	if err := cc.CheckCheckpoint(dir); err != nil {
		return 0, fmt.Errorf("the snapshot's memory cannot be restored on this node: %w", err)
	}
	if err := markComplete(dir); err != nil {
		return 0, err
	}
	for _, f := range m.Files {
		n += f.Size
	}
	return n, nil
}
