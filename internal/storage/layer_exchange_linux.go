package storage

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ExchangeLayers swaps the layers of ids a and b in one atomic rename
// (RENAME_EXCHANGE): what was a's is b's and the other way round. Both
// must exist. Mounted overlays keep using the directories they were
// mounted on, whatever their names become; a reset in place uses this to
// make a standby init's layer the sandbox's.
func (p *Pool) ExchangeLayers(a, b string) error {
	for _, id := range []string{a, b} {
		if err := validLayerID(id); err != nil {
			return err
		}
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p.layerDir(a), unix.AT_FDCWD, p.layerDir(b), unix.RENAME_EXCHANGE); err != nil {
		return fmt.Errorf("exchanging the layers of %s and %s: %w", a, b, err)
	}
	return nil
}
