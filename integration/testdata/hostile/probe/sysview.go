package main

// The sysview subcommand (battery item 35): sysinfo, statfs and
// sched_getaffinity, which the container tier's agent answers itself
// (internal/guest/sysview), turned against it.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelAddr is an address no process may pass for its buffer.
const kernelAddr = 0xffffffffff600000

// probeSysview: bad pointers (the kernel's EFAULT), a path that runs to
// the end of its mapping, args[0] threads making args[1] calls each at
// once (every answer the same), 50 callers killed in the middle of their
// calls, then the answers the host checks: the root's size and the
// memory total.
func probeSysview(args []string) {
	threads, _ := strconv.Atoi(args[0])
	calls, _ := strconv.Atoi(args[1])
	root := []byte("/\x00")
	_, _, e := unix.Syscall(unix.SYS_STATFS, 0, 0, 0)
	report("statfs_null_path", errno(e))
	_, _, e = unix.Syscall(unix.SYS_STATFS, uintptr(unsafe.Pointer(&root[0])), 0, 0)
	report("statfs_null_buf", errno(e))
	_, _, e = unix.Syscall(unix.SYS_STATFS, uintptr(unsafe.Pointer(&root[0])), kernelAddr, 0)
	report("statfs_kernel_buf", errno(e))
	_, _, e = unix.Syscall(unix.SYS_FSTATFS, 0, kernelAddr, 0)
	report("fstatfs_kernel_buf", errno(e))
	_, _, e = unix.Syscall(unix.SYS_SYSINFO, 0, 0, 0)
	report("sysinfo_null", errno(e))
	_, _, e = unix.Syscall(unix.SYS_SYSINFO, kernelAddr, 0, 0)
	report("sysinfo_kernel_buf", errno(e))
	// A path of 'a's from 100 bytes into a page to its end, the next
	// page inaccessible: shorter than PATH_MAX, so the kernel faults.
	mem, err := unix.Mmap(-1, 0, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err == nil {
		for i := 100; i < 4096; i++ {
			mem[i] = 'a'
		}
		_ = unix.Mprotect(mem[4096:], unix.PROT_NONE)
		var st unix.Statfs_t
		_, _, e = unix.Syscall(unix.SYS_STATFS, uintptr(unsafe.Pointer(&mem[100])), uintptr(unsafe.Pointer(&st)), 0)
		err = errno(e)
	}
	report("statfs_unterminated", err)
	_, _, e = unix.Syscall(unix.SYS_SCHED_GETAFFINITY, 0, 1024, 0)
	report("getaffinity_null", errno(e))
	_, _, e = unix.Syscall(unix.SYS_SCHED_GETAFFINITY, 0, 1024, kernelAddr)
	report("getaffinity_kernel_buf", errno(e))
	var set unix.CPUSet
	_, _, e = unix.Syscall(unix.SYS_SCHED_GETAFFINITY, 0, 1, uintptr(unsafe.Pointer(&set)))
	report("getaffinity_short", errno(e))

	// The flood: every answer must be the first one.
	var want unix.Statfs_t
	var wantSet unix.CPUSet
	if err := unix.Statfs("/", &want); err != nil {
		report("flood", err)
		return
	}
	if err := unix.SchedGetaffinity(0, &wantSet); err != nil {
		report("flood", err)
		return
	}
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad error
	for i := 0; i < threads; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st unix.Statfs_t
			var si unix.Sysinfo_t
			for j := 0; j < calls; j++ {
				err := unix.Statfs("/", &st)
				if err == nil && st.Blocks != want.Blocks {
					err = fmt.Errorf("a statfs said %d blocks, the first %d", st.Blocks, want.Blocks)
				}
				if err == nil {
					err = unix.Sysinfo(&si)
				}
				var set unix.CPUSet
				if err == nil {
					err = unix.SchedGetaffinity(0, &set)
				}
				if err == nil && set != wantSet {
					err = fmt.Errorf("a sched_getaffinity said %v, the first %v", set, wantSet)
				}
				if err != nil {
					mu.Lock()
					bad = errors.Join(bad, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	report("flood", bad, threads*calls*3, " calls in ", time.Since(start).Round(time.Millisecond))

	// Callers killed mid-call.
	killed := 0
	for i := 0; i < 50; i++ {
		cmd := exec.Command("/proc/self/exe", "sysviewloop")
		if err := cmd.Start(); err != nil {
			report("killed_callers", err)
			return
		}
		time.Sleep(time.Duration(1+i%5) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		killed++
	}
	var st unix.Statfs_t
	err = unix.Statfs("/", &st)
	report("killed_callers", err, killed)

	report("root", err, st.Blocks*uint64(st.Bsize))
	var si unix.Sysinfo_t
	err = unix.Sysinfo(&si)
	report("memtotal", err, si.Totalram*uint64(si.Unit))
	// The Go runtime's count, from sched_getaffinity at its start.
	report("cpus", nil, runtime.NumCPU())
}

// probeSysviewLoop calls statfs and sysinfo until it is killed.
func probeSysviewLoop([]string) {
	var st unix.Statfs_t
	var si unix.Sysinfo_t
	var set unix.CPUSet
	for {
		_ = unix.Statfs("/", &st)
		_ = unix.Sysinfo(&si)
		_ = unix.SchedGetaffinity(0, &set)
		if st.Blocks == 0 && si.Totalram == 0 {
			os.Exit(1)
		}
	}
}
