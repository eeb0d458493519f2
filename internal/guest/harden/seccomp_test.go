package harden

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest/harden/filter"
)

func init() {
	children["seccomp"] = func() error { return childProbes(true) }
	children["control"] = func() error { return childProbes(false) }
}

// result names the outcome of a probe: "ok" or the errno's name.
func result(err error) string {
	if err == nil {
		return "ok"
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return "error: " + err.Error()
}

func errno(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func rawProbe(trap uintptr, args ...uintptr) error {
	var a [6]uintptr
	copy(a[:], args)
	r, _, e := unix.Syscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
	if e == 0 && int(r) >= 0 && trap != unix.SYS_CLONE {
		unix.Close(int(r)) // fds from bpf, userfaultfd, io_uring, ...
	}
	return errno(e)
}

func socketProbe(family, typ, proto int) error {
	fd, err := unix.Socket(family, typ, proto)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// cloneProbe calls clone(2) directly. Should the filter let it through, the
// new child exits at once.
func cloneProbe(flags uintptr) error {
	pid, _, e := unix.RawSyscall6(unix.SYS_CLONE, flags|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if e == 0 && pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	if e == 0 {
		var ws unix.WaitStatus
		unix.Wait4(int(pid), &ws, 0, nil)
	}
	return errno(e)
}

func probes() map[string]func() error {
	dir, _ := os.MkdirTemp("", "harden-probe")
	ts := unix.Timespec{}
	return map[string]func() error{
		"mount": func() error {
			err := unix.Mount("none", dir, "tmpfs", 0, "")
			if err == nil {
				unix.Unmount(dir, unix.MNT_DETACH)
			}
			return err
		},
		"fsopen": func() error {
			return rawProbe(unix.SYS_FSOPEN, uintptr(unsafe.Pointer(&[]byte("tmpfs\x00")[0])), 0)
		},
		"unshare_newuser": func() error { return unix.Unshare(unix.CLONE_NEWUSER) },
		"unshare_newns":   func() error { return unix.Unshare(unix.CLONE_NEWNS) },
		"setns": func() error {
			fd, err := unix.Open("/proc/self/ns/uts", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Setns(fd, 0)
		},
		"clone_newuser": func() error { return cloneProbe(unix.CLONE_NEWUSER) },
		"clone_newpid":  func() error { return cloneProbe(unix.CLONE_NEWPID) },
		"clone_newnet":  func() error { return cloneProbe(unix.CLONE_NEWNET) },
		"clone_plain":   func() error { return cloneProbe(0) },
		"clone3":        func() error { return rawProbe(unix.SYS_CLONE3, 0, 0) },
		"keyctl": func() error {
			return rawProbe(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(0) /* thread keyring */, 0)
		},
		"add_key":         func() error { return rawProbe(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0) },
		"bpf":             func() error { return rawProbe(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0) },
		"perf_event_open": func() error { return rawProbe(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0) },
		"userfaultfd":     func() error { return rawProbe(unix.SYS_USERFAULTFD, unix.O_CLOEXEC) },
		"io_uring_setup": func() error {
			var params [120]byte
			return rawProbe(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])))
		},
		"socket_alg":           func() error { return socketProbe(unix.AF_ALG, unix.SOCK_SEQPACKET, 0) },
		"socket_packet":        func() error { return socketProbe(unix.AF_PACKET, unix.SOCK_RAW, 0) },
		"socket_vsock":         func() error { return socketProbe(unix.AF_VSOCK, unix.SOCK_STREAM, 0) },
		"socket_netlink_audit": func() error { return socketProbe(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT) },
		"socket_netlink_route": func() error { return socketProbe(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE) },
		"socket_inet":          func() error { return socketProbe(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0) },
		"socket_inet6":         func() error { return socketProbe(unix.AF_INET6, unix.SOCK_DGRAM, 0) },
		"socket_unix":          func() error { return socketProbe(unix.AF_UNIX, unix.SOCK_STREAM, 0) },
		"clock_settime": func() error {
			unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
			return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
		},
		"settimeofday": func() error {
			var tv unix.Timeval
			unix.Gettimeofday(&tv)
			return unix.Settimeofday(&tv)
		},
		"adjtimex":          func() error { var tx unix.Timex; _, err := unix.Adjtimex(&tx); return err },
		"init_module":       func() error { return rawProbe(unix.SYS_INIT_MODULE, 0, 0, 0) },
		"finit_module":      func() error { return rawProbe(unix.SYS_FINIT_MODULE, ^uintptr(0), 0, 0) },
		"syslog":            func() error { return rawProbe(unix.SYS_SYSLOG, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, 0, 0) },
		"pivot_root":        func() error { return rawProbe(unix.SYS_PIVOT_ROOT, 0, 0) },
		"personality_query": func() error { return rawProbe(unix.SYS_PERSONALITY, 0xffffffff) },
		"personality_norandom": func() error {
			return rawProbe(unix.SYS_PERSONALITY, 0x0040000 /* ADDR_NO_RANDOMIZE */)
		},
		"unknown_new_syscall": func() error { return rawProbe(1000) },
		"exec_sh": func() error {
			out, err := exec.Command("/bin/sh", "-c", "echo ok").Output()
			if err == nil && string(out) != "ok\n" {
				return fmt.Errorf("sh said %q", out)
			}
			return err
		},
		"threads": func() error {
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() { defer wg.Done(); runtime.LockOSThread() }() // thread is discarded: a new one each time
			}
			wg.Wait()
			return nil
		},
		"files": func() error {
			p := filepath.Join(dir, "f")
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				return err
			}
			if err := os.Chmod(p, 0o644); err != nil {
				return err
			}
			_, err := os.ReadFile(p)
			return err
		},
		"pipe": func() error {
			r, w, err := os.Pipe()
			if err != nil {
				return err
			}
			defer r.Close()
			w.Write([]byte("x"))
			w.Close()
			b := make([]byte, 1)
			_, err = r.Read(b)
			return err
		},
	}
}

// childProbes runs every probe, with or without the filter, and prints
// "name=outcome" lines plus the process's seccomp state.
func childProbes(withFilter bool) error {
	stop := startThreads(3) // threads that exist before the filter: TSYNC must reach them
	defer stop()
	if withFilter {
		prog, err := filter.Program()
		if err != nil {
			return err
		}
		if err := InstallFilter(prog); err != nil {
			return err
		}
	}
	ps := probes()
	names := make([]string, 0, len(ps))
	for n := range ps {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Printf("%s=%s\n", n, result(ps[n]()))
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	st := collect{}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "Seccomp" || k == "NoNewPrivs") {
				st.add("thread."+k, strings.TrimSpace(v))
			}
		}
	}
	for k, v := range st {
		fmt.Printf("%s=%s\n", k, v)
	}
	return nil
}

func TestInstallSeccomp(t *testing.T) {
	requiresRoot(t) // as root the denied calls would succeed without the filter
	control := parseResults(runChild(t, "control"))
	got := parseResults(runChild(t, "seccomp"))
	tests := []struct {
		probe string
		want  string
		// control: what the probe does without the filter, proving the
		// probe reaches the kernel; "" when it varies.
		control string
	}{
		{"mount", "EPERM", "ok"},
		{"fsopen", "EPERM", "ok"},
		{"unshare_newuser", "EPERM", "EINVAL"}, // EINVAL: the process has threads
		{"unshare_newns", "EPERM", "ok"},
		{"setns", "EPERM", "ok"},
		{"clone_newuser", "EPERM", "ok"},
		{"clone_newpid", "EPERM", "ok"},
		{"clone_newnet", "EPERM", "ok"},
		{"clone3", "ENOSYS", "EINVAL"},
		{"keyctl", "EPERM", ""},
		{"add_key", "EPERM", ""},
		{"bpf", "EPERM", ""},
		{"perf_event_open", "EPERM", ""},
		{"userfaultfd", "EPERM", ""},
		{"io_uring_setup", "EPERM", ""},
		{"socket_alg", "EPERM", ""},
		{"socket_packet", "EPERM", "ok"},
		{"socket_vsock", "EPERM", ""},
		{"socket_netlink_audit", "EPERM", "ok"},
		{"clock_settime", "EPERM", ""},
		{"settimeofday", "EPERM", ""},
		{"adjtimex", "EPERM", "ok"},
		{"init_module", "EPERM", ""},
		{"finit_module", "EPERM", ""},
		{"syslog", "EPERM", "ok"},
		{"pivot_root", "EPERM", ""},
		{"personality_norandom", "EPERM", "ok"},
		{"unknown_new_syscall", "ENOSYS", "ENOSYS"},
		// Ordinary work.
		{"clone_plain", "ok", "ok"},
		{"personality_query", "ok", "ok"},
		{"socket_netlink_route", "ok", "ok"},
		{"socket_inet", "ok", "ok"},
		{"socket_inet6", "ok", "ok"},
		{"socket_unix", "ok", "ok"},
		{"exec_sh", "ok", "ok"},
		{"threads", "ok", "ok"},
		{"files", "ok", "ok"},
		{"pipe", "ok", "ok"},
		// Every thread, including those started before the filter.
		{"thread.Seccomp", "2", "0"},
		{"thread.NoNewPrivs", "1", "0"},
	}
	for _, tt := range tests {
		t.Run(tt.probe, func(t *testing.T) {
			if got[tt.probe] != tt.want {
				t.Errorf("with filter: %s = %q, want %q", tt.probe, got[tt.probe], tt.want)
			}
			if tt.control != "" && control[tt.probe] != tt.control {
				t.Errorf("control without filter: %s = %q, want %q (the probe does not test what it claims)",
					tt.probe, control[tt.probe], tt.control)
			}
		})
	}
}

// The filter the daemon assembles once travels in the boot spec as bytes
// and comes back the same; malformed lengths are refused.
func TestFilterEncoding(t *testing.T) {
	prog, err := filter.Program()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFilter(EncodeFilter(prog))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, prog) {
		t.Fatalf("decoded filter differs from the assembled one (%d vs %d instructions)", len(got), len(prog))
	}
	for _, n := range []int{0, 7, 8*unix.BPF_MAXINSNS + 8} {
		if _, err := DecodeFilter(make([]byte, n)); err == nil {
			t.Errorf("DecodeFilter of %d bytes: no error", n)
		}
	}
}
