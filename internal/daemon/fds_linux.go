package daemon

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeInheritedOnExec marks every descriptor the daemon inherited beyond
// stdio close-on-exec. The daemon opens its own close-on-exec, but one
// handed down by whatever started it (a `flock` around it, a supervisor's
// socket) would otherwise reach every process it starts: lxcfs, which
// outlives the daemon, kept a flock's lock held for ever. The daemon
// itself keeps them open.
func closeInheritedOnExec() {
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
