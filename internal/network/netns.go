package network

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NewNetNS makes a network namespace with only loopback, pinned by a bind
// mount at path (a file, made here; an earlier namespace pinned there is
// released first), and calls fn with the id of a thread inside it, which
// Attach takes as the pid whose namespace gets the veth. The thread ends
// when fn returns: the daemon's other goroutines never run in the
// namespace, and fn itself runs in the host's (netlink and nftables
// sockets are opened in the caller's namespace). It is for tiers whose
// network must be in place before the sandbox starts (the gvisor tier,
// driver.Spec.NetNS). On error nothing is left at path.
func NewNetNS(path string, fn func(pid int) error) (err error) {
	if err := RemoveNetNS(path); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("creating the network namespace's mount point: %w", err)
	}
	f.Close()
	defer func() {
		if err != nil {
			_ = RemoveNetNS(path)
		}
	}()
	ready := make(chan int, 1) // the thread's id, or -1
	done := make(chan struct{})
	var nsErr error
	go func() {
		// Never unlocked: the runtime ends the thread with the goroutine,
		// so no other goroutine is ever scheduled in the namespace.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			nsErr = fmt.Errorf("creating a network namespace: %w", err)
			ready <- -1
			return
		}
		// Loopback up: runsc --network=sandbox copies only the
		// interfaces that are up into gVisor's netstack.
		if lo, err := netlink.LinkByName("lo"); err == nil {
			_ = netlink.LinkSetUp(lo)
		}
		tid := unix.Gettid()
		if err := unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", tid), path, "", unix.MS_BIND, ""); err != nil {
			nsErr = fmt.Errorf("pinning the network namespace at %s: %w", path, err)
			ready <- -1
			return
		}
		ready <- tid
		<-done
	}()
	tid := <-ready
	if tid < 0 {
		return nsErr
	}
	defer close(done)
	return fn(tid)
}

// RemoveNetNS releases the network namespace pinned at path (its veth
// goes with it once nothing else holds it) and removes the file. A
// missing path is not an error.
func RemoveNetNS(path string) error {
	for range 16 {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		if err != nil {
			return fmt.Errorf("releasing the network namespace at %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return nil
}
