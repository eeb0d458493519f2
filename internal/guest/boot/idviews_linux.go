package boot

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// AttachViews attaches the uid range's views the daemon handed the init
// (detached mounts, as internal/idrange's Range.Views makes them, open
// as fds) at paths, in the calling thread's mount namespace: the init's,
// made private by Stage, never the host's. The pivot into the sandbox's
// root detaches them with the rest of the host's tree.
func AttachViews(fds []int, paths []string) error {
	if len(fds) != len(paths) {
		return fmt.Errorf("boot: %d uid range views for %d paths", len(fds), len(paths))
	}
	for i, fd := range fds {
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, paths[i], unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("boot: attaching a uid range's view at %s: %w", paths[i], err)
		}
	}
	return nil
}
