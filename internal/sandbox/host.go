package sandbox

import (
	"context"

	"github.com/agentbox/agentbox/internal/storage"
)

// layerStore is what the service needs of the storage pool: templates,
// the sandboxes' writable layers and snapshots. *storage.Pool is the one
// the daemon uses; the lifecycle unit tests use an in-memory one
// (fake_test.go), so that they run without root.
type layerStore interface {
	// Templates.
	Template(name string) (*storage.Template, error)
	TemplateFor(ctx context.Context, name string) (*storage.Template, error)
	TemplateVersion(name, version string) (*storage.Template, error)

	// A sandbox's writable layer, named by its id (or a standby's name).
	CreateLayer(ctx context.Context, id string, diskMB int64, lowers []string) (upper, work string, err error)
	LayerPaths(id string) (upper, work string, err error)
	RemoveLayer(ctx context.Context, id string) error
	ListLayers() ([]string, error)
	ExchangeLayers(a, b string) error

	// Snapshots of writable layers, and the build layers nothing uses.
	SnapshotUpper(snapID string) string
	SnapshotLayer(ctx context.Context, id, snapID string) (int64, error)
	RemoveSnapshot(ctx context.Context, snapID string) error
	ListSnapshots() ([]string, error)
	GCLayers(ctx context.Context, inUse map[string]bool) ([]string, error)
}

var _ layerStore = (*storage.Pool)(nil)
