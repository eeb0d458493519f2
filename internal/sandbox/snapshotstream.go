package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// Snapshots from node to node without a registry: GET
// /v1/snapshots/{ref}/export writes a snapshot as one uncompressed
// snapshot stream (storage/snapshot_stream.go: the config an OCI push
// writes, with the layer count, then each layer's overlay tar, bottom
// first), then a memory snapshot's checkpoint files (memmove.go), read
// straight from the snapshot's read-only layers; POST
// /v1/snapshots/import reads one into a new snapshot as a pull does
// (the template found by digest or version, or a 412; the tenant's disk
// quota; every check of an image import). A fleet gateway pipes one
// node's export into another's import for a cross-host fork.

// streamPool is the service's real storage pool (streams need no
// registry).
func (s *Service) streamPool() (*storage.Pool, error) {
	p, ok := s.pool.(*storage.Pool)
	if !ok {
		return nil, errdefs.Unavailable("this daemon cannot move snapshots between nodes")
	}
	return p, nil
}

// ExportSnapshot checks that a tenant's snapshot (id or name) can leave
// this node and returns the function that writes it to w as a snapshot
// stream; an error from it comes after bytes were written (the stream
// is then cut short, which its reader notices).
func (s *Service) ExportSnapshot(ctx context.Context, scope tenancy.Scope, ref string) (func(w io.Writer) error, error) {
	pool, err := s.streamPool()
	if err != nil {
		return nil, err
	}
	rec, err := s.st.GetSnapshot(ctx, scope, ref)
	if err != nil {
		return nil, err
	}
	dirs, cfg, err := s.exportable(ctx, pool, rec, ref)
	if err != nil {
		return nil, err
	}
	mem, memDir, err := s.exportMemory(rec, false)
	if err != nil {
		return nil, err
	}
	var memFiles []storage.SnapshotFile
	if mem != nil {
		cfg.Memory, memFiles = mem, mem.Files
	}
	cfg.Layers = len(dirs)
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return func(w io.Writer) error {
		start := time.Now()
		if _, err := pool.ExportSnapshot(ctx, dirs, raw, memDir, memFiles, w); err != nil {
			s.log.Warn("exporting snapshot", "snapshot", rec.ID, "err", err)
			return err
		}
		s.log.Info("exported snapshot", "snapshot", rec.ID, "layers", len(dirs), "memory", mem != nil, "took", time.Since(start).Round(time.Millisecond))
		return nil
	}, nil
}

// ImportSnapshot reads a snapshot stream from r into a new snapshot of
// tenant named name ("" for none). Its template is found as a pull finds
// it (PullSnapshot), pulled with pullTemplate from the ref the config
// names when this node lacks it.
func (s *Service) ImportSnapshot(ctx context.Context, tenant, name string, r io.Reader, pullTemplate PullTemplateFunc) (*api.Snapshot, error) {
	pool, err := s.streamPool()
	if err != nil {
		return nil, err
	}
	if name != "" && !snapNameRE.MatchString(name) {
		return nil, errdefs.Invalid("snapshot name %q is not valid: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	start := time.Now()
	sr, err := storage.NewSnapshotStreamReader(r)
	if err != nil {
		return nil, err
	}
	var cfg SnapshotConfig
	if err := json.Unmarshal(sr.Config, &cfg); err != nil {
		return nil, errdefs.Invalid("the snapshot stream's config is not valid: %v", err)
	}
	if cfg.Layers < 1 || cfg.Layers > maxLowers {
		return nil, errdefs.Invalid("the snapshot stream's config names %d layers; 1 to %d", cfg.Layers, maxLowers)
	}
	memDrv, err := s.memoryTier(cfg.Memory, cfg.Isolation)
	if err != nil {
		return nil, err
	}
	if s.reg == nil {
		pullTemplate = nil // no registry here: the template must be
	}
	rec, tpl, err := s.landSnapshot(ctx, pool, tenant, name, &cfg, cfg.Layers, pullTemplate, func(ctx context.Context, snapID string) (int64, error) {
		n, err := pool.ImportSnapshotStream(ctx, snapID, sr, cfg.Layers)
		if err != nil {
			return 0, fmt.Errorf("importing snapshot %s from a stream: %w", cfg.ID, err)
		}
		var m int64
		if cfg.Memory == nil {
			// The stream must end after the layers: no files.
			err = storage.ReceiveSnapshotStreamFiles(sr, "", nil)
		} else {
			m, err = s.landMemory(ctx, snapID, cfg.Memory, memDrv, n, func(dir string) error {
				return storage.ReceiveSnapshotStreamFiles(sr, dir, cfg.Memory.Files)
			})
		}
		if err != nil {
			_ = pool.RemoveSnapshot(context.WithoutCancel(ctx), snapID)
			return 0, fmt.Errorf("importing snapshot %s from a stream: %w", cfg.ID, err)
		}
		return m, nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("imported snapshot", "snapshot", rec.ID, "from", cfg.ID, "template", tpl.Name+"@"+tpl.Version,
		"layers", cfg.Layers, "memory", cfg.Memory != nil, "size", rec.SizeBytes, "took", time.Since(start).Round(time.Millisecond))
	out := s.snapshotOut(rec)
	return &out, nil
}
