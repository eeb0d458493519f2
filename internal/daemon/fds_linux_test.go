package daemon

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestCloseInheritedOnExec: a descriptor opened without O_CLOEXEC (as one
// inherited from the daemon's parent is) is close-on-exec afterwards, and
// still open.
func TestCloseInheritedOnExec(t *testing.T) {
	fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC != 0 {
		t.Fatal("the test's descriptor is close-on-exec already")
	}
	closeInheritedOnExec()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		t.Fatalf("the descriptor was closed: %v", err)
	}
	if flags&unix.FD_CLOEXEC == 0 {
		t.Fatal("the descriptor is not close-on-exec")
	}
}
