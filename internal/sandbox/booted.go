package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/driver"
)

// booted is a sandbox init that runs and that no live entry owns yet:
// what every way of booting hands back (boot: a create, a cold start, a
// fork child, a reset, a resume from disk, a warm pool member, a build
// box; standbys.prepare: a standby init). Release undoes all of it, so a
// half-made sandbox has one cleanup path; once the sandbox is recorded
// and live, its entry's teardown owns it instead.
type booted struct {
	// s detaches the network (only with net); pool holds the layer.
	s    *Service
	pool layerStore
	id   string // the sandbox's id
	drv  driver.Driver
	h    *driver.Handle
	// layer is the writable layer it made in the storage pool; "" when
	// it runs on one it does not own (a cold start, a resume from disk).
	layer  string
	runDir string
	// net: its network is attached under id (or may be): Release
	// detaches it. A sandbox that keeps its layer keeps its address too.
	net bool
	// standby: a standby init (driver.Standby), which is discarded
	// rather than destroyed.
	standby bool
}

// Release stops the init and removes what it was booted on: its
// network, its layer, its run dir. It goes on past errors and returns
// them all.
func (b *booted) Release(ctx context.Context) error {
	var errs []error
	if b.standby {
		if sb, ok := driver.As[driver.Standby](b.drv); ok && b.h != nil {
			if err := sb.Discard(ctx, b.h); err != nil {
				errs = append(errs, fmt.Errorf("discarding the standby init: %w", err))
			}
		}
	} else if b.drv != nil && b.h != nil {
		if err := b.drv.Destroy(ctx, b.h); err != nil {
			errs = append(errs, err)
		}
	}
	if b.net {
		if err := b.s.detachNet(b.id); err != nil {
			errs = append(errs, fmt.Errorf("removing network: %w", err))
		}
	}
	if b.layer != "" {
		if err := b.pool.RemoveLayer(ctx, b.layer); err != nil {
			errs = append(errs, fmt.Errorf("removing layer: %w", err))
		}
	}
	if b.runDir != "" {
		if err := os.RemoveAll(b.runDir); err != nil {
			errs = append(errs, fmt.Errorf("removing run dir: %w", err))
		}
	}
	return errors.Join(errs...)
}
