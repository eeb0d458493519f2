package daemon

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/idrange"
)

// openIDRanges sets up the sandboxes' own uid ranges (uid_ranges) over
// the storage pool mounted at storageRoot, or returns nil: with
// uid_ranges = 0, or where the storage cannot be id-mapped (the daemon
// then runs every sandbox in the one range uid_base.., says so here, and
// `agentbox inspect --security` shows it).
func openIDRanges(cfg *config.Config, storageRoot string, log *slog.Logger) *idrange.Pool {
	if cfg.UIDRanges == 0 {
		return nil
	}
	p, err := idrange.New(idrange.Options{
		Base: cfg.UIDBase, Count: cfg.UIDCount, Ranges: cfg.UIDRanges,
		Roots: []string{storageRoot},
		// Next to the storage, not in the run directory: a view is the
		// storage itself, and a tree removed whole (rm -r) while views
		// are mounted (a daemon killed, not stopped) loses what it shows.
		Dir:    filepath.Join(cfg.DataDir, "idmap"),
		Logger: log,
	})
	if err != nil {
		log.Warn("sandboxes will share one uid range: the storage cannot be id-mapped", "err", err)
		return nil
	}
	return p
}

// reserveIDRanges holds the ranges of the sandboxes an earlier daemon
// left running for them, before the drivers start their waiting inits
// (which acquire ranges of their own); the drivers claim them as they
// adopt the sandboxes, and DropReserved, after that, frees the rest.
func reserveIDRanges(ctx context.Context, st *store.Store, ids *idrange.Pool, log *slog.Logger) error {
	recs, err := st.ListSandboxes(ctx, store.Filter{Scope: tenancy.AllTenants(), States: []string{
		api.StateCreating, api.StateRunning, api.StatePaused, api.StateDestroying,
	}})
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if rec.Handle == nil || rec.Handle.UIDBase == 0 {
			continue
		}
		if err := ids.Reserve(rec.Handle.UIDBase, rec.ID); err != nil {
			// Its adoption fails the same way, and says so.
			log.Warn("a sandbox's uid range cannot be reserved", "sandbox", rec.ID, "err", err)
		}
	}
	return nil
}
