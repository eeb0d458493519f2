package integration

// Battery items 14-27: the kernel surface, probed from inside, judged by
// errnos and by host state read before and after.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

func itemUnixSockets(t *testing.T, b *battery) {
	id := b.shared(t)
	// Host listeners a sandbox must not reach: a path and an abstract name.
	path := "/var/tmp/agentbox-battery-" + randHex(6) + ".sock"
	abstract := "@agentbox-battery-" + randHex(6)
	var accepted atomic.Int64
	for _, addr := range []string{path, abstract} {
		ln, err := net.Listen("unix", addr)
		if err != nil {
			t.Fatalf("host listener %s: %v", addr, err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Close()
			}
		}()
	}
	defer os.Remove(path)
	found := b.hostile(t, id, api.ExecRequest{Shell: "find / -type s 2>/dev/null; true", TimeoutMs: 30000})
	targets := []string{env.cfg.Socket, "/run/agentbox/agentbox.sock", "/var/run/docker.sock", "/run/docker.sock",
		"/run/containerd/containerd.sock", "/run/systemd/private", "/run/dbus/system_bus_socket",
		"/var/run/dbus/system_bus_socket", path, abstract, "@/containerd-shim/battery.sock",
		// The guest agent's own channel on gvisor (its directory belongs
		// to a uid no sandbox process has; absent on the container tier).
		"/.agentbox/sock/guest.sock"}
	got, _ := b.probe(t, id, "", append([]string{"connect"}, targets...)...)
	var names []string
	for i := range targets {
		names = append(names, "connect_"+strconv.Itoa(i))
	}
	evidence(t, "sockets found inside: %q; host listeners accepted %d", strings.TrimSpace(found.Stdout), accepted.Load())
	expectErrno(t, got, names, "ENOENT", "ECONNREFUSED", "EACCES", "EPERM")
	if s := strings.TrimSpace(found.Stdout); s != "" {
		t.Errorf("unix sockets visible inside the sandbox: %s", s)
	}
	if accepted.Load() != 0 {
		t.Errorf("a host unix socket accepted %d connections from the sandbox", accepted.Load())
	}
}

func itemMount(t *testing.T, b *battery) {
	id := b.shared(t)
	got, _ := b.probe(t, id, "", "mount")
	expectErrno(t, got, []string{"mount_proc", "mount_sysfs", "mount_tmpfs", "mount_bind", "mount_cgroup", "umount_proc",
		"fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "move_mount", "mount_setattr"}, "EPERM")
}

func itemNamespaces(t *testing.T, b *battery) {
	id := b.shared(t)
	got, _ := b.probe(t, id, "", "ns")
	var names []string
	for _, ns := range []string{"user", "mnt", "cgroup", "pid", "net", "uts", "ipc"} {
		names = append(names, "unshare_"+ns, "clone_"+ns)
	}
	expectErrno(t, got, names, "EPERM")
	expectErrno(t, got, []string{"clone3_user"}, "ENOSYS", "EPERM")
	for _, ns := range []string{"self_ns_user", "1_ns_mnt", "self_ns_net", "self_ns_cgroup"} {
		if v, ok := got["setns_open_"+ns]; ok {
			allowed := []string{"EACCES", "EPERM"}
			if b.tier == "gvisor" && ns == "self_ns_cgroup" {
				// gVisor's /proc has no ns/cgroup: nothing to join.
				allowed = append(allowed, "ENOENT")
			}
			expectErrno(t, got, []string{"setns_open_" + ns}, allowed...)
			_ = v
			continue
		}
		expectErrno(t, got, []string{"setns_" + ns}, "EPERM")
	}
}

func itemModulesSockets(t *testing.T, b *battery) {
	id := b.shared(t)
	before := hostModules(t)
	got, _ := b.probe(t, id, "", "sockets")
	expectErrno(t, got, []string{"socket_AF_ALG", "socket_AF_VSOCK", "socket_AF_RDS", "socket_AF_TIPC", "socket_AF_PACKET",
		"socket_AF_KEY", "socket_AF_NETLINK_AUDIT", "socket_AF_NETLINK_KOBJECT_UEVENT", "socket_AF_BLUETOOTH", "socket_AF_XDP"}, "EPERM")
	got, _ = b.probe(t, id, "", "modules")
	expectErrno(t, got, []string{"init_module", "finit_module", "delete_module"}, "EPERM")
	after := hostModules(t)
	note := ""
	if _, err := os.Stat("/proc/modules"); err != nil {
		note = " (no /proc/modules: the host kernel has no module support)"
	}
	evidence(t, "host modules: %d before, %d after%s", len(before), len(after), note)
	for m := range after {
		if !before[m] {
			t.Errorf("module %s appeared on the host during the probe", m)
		}
	}
	for m := range before {
		if !after[m] {
			t.Errorf("module %s disappeared from the host during the probe", m)
		}
	}
}

// hostModules lists the host's loaded modules; a kernel built without
// module support has no /proc/modules, which reads as an empty list.
func hostModules(t testing.TB) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/modules")
	if errors.Is(err, os.ErrNotExist) {
		return map[string]bool{}
	}
	if err != nil {
		t.Fatalf("reading /proc/modules: %v", err)
	}
	m := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			m[f[0]] = true
		}
	}
	return m
}

func itemKernelInterfaces(t *testing.T, b *battery) {
	id := b.shared(t)
	got, _ := b.probe(t, id, "", "kernel")
	expectErrno(t, got, []string{"bpf", "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd",
		"io_uring_setup", "io_uring_enter", "kexec_load", "open_by_handle_at"}, "EPERM")
	expectErrno(t, got, []string{"unknown_syscall"}, "ENOSYS", "EPERM")
}

func itemPtrace(t *testing.T, b *battery) {
	id := b.shared(t)
	me, sib := strconv.Itoa(os.Getpid()), strconv.Itoa(b.sibPid)
	got, res := b.probe(t, id, "", "ptrace", me, sib)
	for _, target := range []string{"1", me, sib} {
		if target != "1" && strings.Contains(res.Stdout, "ptrace_attach_"+target+" ") && strings.Contains(res.Stdout, "present") {
			t.Logf("host pid %s happens to exist inside the sandbox's pid namespace too", target)
		}
		names := []string{"ptrace_attach_" + target, "ptrace_seize_" + target, "process_vm_readv_" + target, "process_vm_writev_" + target}
		if target != "1" {
			names = append(names, "kill0_"+target, "pidfd_open_"+target)
		}
		expectErrno(t, got, names, "EPERM", "ESRCH")
	}
}

func itemHostProc(t *testing.T, b *battery) {
	id := b.shared(t)
	res := b.hostile(t, id, api.ExecRequest{Shell: `for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug /proc/kallsyms /proc/sysrq-trigger; do
  printf '%s %s\n' "$f" "$(head -c 4096 $f 2>/dev/null | wc -c)"; done
echo pids $(ls /proc | grep -E '^[0-9]+$')
echo init "$(tr '\0' ' ' </proc/1/cmdline)"
echo upids $(for p in /proc/[0-9]*; do [ -n "$(tr -d '\0' <$p/cmdline 2>/dev/null | head -c1)" ] && echo ${p#/proc/}; done)`})
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	var pidsInside []string
	for _, line := range lines {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && strings.HasPrefix(f[0], "/proc/"):
			if f[1] != "0" {
				t.Errorf("%s: %s bytes readable inside the sandbox", f[0], f[1])
			}
		case len(f) > 0 && f[0] == "pids" && b.tier != "microvm":
			pidsInside = f[1:]
		case len(f) > 0 && f[0] == "upids" && b.tier == "microvm":
			// A VM's /proc lists its own kernel's threads too, all
			// the sandbox's own: its processes are those with a
			// command line.
			pidsInside = f[1:]
		}
	}
	evidence(t, "%s", strings.ReplaceAll(strings.TrimSpace(res.Stdout), "\n", "; "))
	for _, p := range pidsInside {
		if p == strconv.Itoa(os.Getpid()) || p == strconv.Itoa(b.sibPid) {
			t.Errorf("host pid %s (this test or the sibling's init) is visible in the sandbox's /proc", p)
		}
	}
	if len(pidsInside) == 0 || len(pidsInside) > 10 {
		t.Errorf("the sandbox's /proc lists %d pids: %v; it should see only its own few", len(pidsInside), pidsInside)
	}
	wantInit := "init agentbox-guest"
	if b.tier == "microvm" {
		// The agent is the guest kernel's init, from the initramfs.
		wantInit = "init /init vm"
		_, _, ev := qemuPosture(t, id)
		evidence(t, "%s", ev)
	}
	if b.tier == "gvisor" {
		// runsc starts the agent by its path inside the sandbox.
		wantInit = "init /.agentbox/agentbox-guest serve"
		evidence(t, "%d host processes of the sandbox (gVisor's): host uids of the sandbox's range, NoNewPrivs 1, Seccomp 2", hostConfined(t, id))
	}
	if !strings.Contains(res.Stdout, wantInit) {
		t.Errorf("pid 1 inside is not the guest agent: %q", res.Stdout)
	}
}

func itemProcWrites(t *testing.T, b *battery) {
	id := b.shared(t)
	watched := []string{"/proc/sys/kernel/core_pattern", "/sys/kernel/uevent_helper", "/proc/sys/kernel/hostname",
		"/proc/sys/kernel/modprobe", "/sys/fs/cgroup/pids/release_agent", "/sys/fs/cgroup/memory/release_agent",
		"/sys/fs/cgroup/cpu/release_agent"}
	before := readHostFiles(watched)
	sysrqBefore := dmesgCount("sysrq")
	cases := []struct{ name, path, data string }{
		{"sysrq", "/proc/sysrq-trigger", "h"},
		{"core_pattern", "/proc/sys/kernel/core_pattern", "|/tmp/evil"},
		{"drop_caches", "/proc/sys/vm/drop_caches", "3"},
		{"modprobe", "/proc/sys/kernel/modprobe", "/tmp/evil"},
		{"uevent_helper", "/sys/kernel/uevent_helper", "/tmp/evil"},
		{"release_agent_pids", "/sys/fs/cgroup/pids/release_agent", "/tmp/evil"},
		{"release_agent", "/sys/fs/cgroup/release_agent", "/tmp/evil"},
		{"hostname", "/proc/sys/kernel/hostname", "pwned"},
	}
	var seen []string
	for _, c := range cases {
		got, _ := b.probe(t, id, "", "write", c.path, c.data)
		v := got["write"]
		seen = append(seen, c.name+"="+v)
		if v == "OK" && c.name != "sysrq" {
			t.Errorf("writing %s inside the sandbox succeeded", c.path)
		}
	}
	// /proc/sysrq-trigger may be masked with /dev/null: a write then
	// succeeds and does nothing. It must be that null device.
	st := b.hostile(t, id, api.ExecRequest{Shell: "stat -c '%F %t:%T' /proc/sysrq-trigger"})
	after := readHostFiles(watched)
	sysrqAfter := dmesgCount("sysrq")
	evidence(t, "%s; sysrq-trigger inside: %q; host sysrq log lines %d -> %d", strings.Join(seen, " "), strings.TrimSpace(st.Stdout), sysrqBefore, sysrqAfter)
	if strings.HasPrefix(seen[0], "sysrq=OK") && strings.TrimSpace(st.Stdout) != "character special file 1:3" {
		t.Errorf("a write to /proc/sysrq-trigger succeeded and it is not /dev/null: %q", st.Stdout)
	}
	if sysrqAfter > sysrqBefore {
		t.Errorf("the host kernel logged a sysrq during the probe")
	}
	for _, p := range watched {
		if before[p] != after[p] {
			t.Errorf("host %s changed: %q -> %q", p, before[p], after[p])
		}
	}
}

func readHostFiles(paths []string) map[string]string {
	m := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			m[p] = "error: " + err.Error()
			continue
		}
		m[p] = string(b)
	}
	return m
}

// dmesgCount counts kernel log lines mentioning word (-1 if unreadable).
func dmesgCount(word string) int {
	out, err := exec.Command("dmesg").Output()
	if err != nil {
		return -1
	}
	return strings.Count(strings.ToLower(string(out)), word)
}

func itemDevices(t *testing.T, b *battery) {
	id := b.shared(t)
	got, _ := b.probe(t, id, "", "mknod")
	if b.tier == "gvisor" {
		// gVisor answers syslog(2) itself, with a made-up boot log: the
		// call succeeds and what must hold is that no line of the host's
		// kernel log is in what the sandbox reads.
		expectErrno(t, got, []string{"mknod_block", "mknod_char_mem", "mknod_char_kmsg"}, "EPERM")
		syslogNotHost(t, b, id)
	} else {
		expectErrno(t, got, []string{"mknod_block", "mknod_char_mem", "mknod_char_kmsg", "syslog_read_all", "syslog_size"}, "EPERM")
	}
	expectErrno(t, got, []string{"open_dev_kmsg"}, "ENOENT", "EPERM", "EACCES")
}

// syslogNotHost reads the kernel log inside sandbox id (dmesg, syslog(2))
// and the host's, and fails if any host line shows up inside.
func syslogNotHost(t *testing.T, b *battery, id string) {
	inside := b.hostile(t, id, api.ExecRequest{Shell: "dmesg 2>&1"}).Stdout
	out, err := exec.Command("dmesg").Output()
	if err != nil {
		t.Fatalf("reading the host's kernel log: %v", err)
	}
	var host []string
	for _, line := range strings.Split(string(out), "\n") {
		if _, msg, ok := strings.Cut(line, "] "); ok && len(msg) >= 16 {
			host = append(host, msg)
		}
	}
	var leaked []string
	for _, msg := range host {
		if strings.Contains(inside, msg) {
			leaked = append(leaked, msg)
		}
	}
	evidence(t, "syslog(2) inside reads gVisor's own log (%d lines, %q...); none of the host's %d kernel log lines in it",
		strings.Count(inside, "\n"), firstLine(inside), len(host))
	if !strings.Contains(inside, "gVisor") {
		t.Errorf("the kernel log inside is not gVisor's: %.200q", inside)
	}
	if len(host) == 0 {
		t.Errorf("the host's kernel log is empty: nothing to compare with")
	}
	if len(leaked) > 0 {
		t.Errorf("%d lines of the host's kernel log are readable inside, e.g. %q", len(leaked), leaked[0])
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

func itemClock(t *testing.T, b *battery) {
	id := b.shared(t)
	t0 := time.Now()
	got, _ := b.probe(t, id, "", "clock")
	t1 := time.Now()
	expectErrno(t, got, []string{"clock_settime", "settimeofday", "adjtimex", "clock_adjtime"}, "EPERM")
	// Wall clock against the monotonic clock across the probe.
	drift := t1.Round(0).Sub(t0.Round(0)) - t1.Sub(t0)
	evidence(t, "host wall clock drift across the probe: %v", drift)
	if drift > time.Second || drift < -time.Second {
		t.Errorf("the host's wall clock jumped by %v during the probe", drift)
	}
}

func itemChroot(t *testing.T, b *battery) {
	id := b.shared(t)
	paths := []string{b.hostFlag, "../../../../../../../.." + b.hostFlag,
		fmt.Sprintf("/proc/%d/root%s", b.sibPid, b.sibFlag), "/proc/1/root" + b.hostFlag}
	got, res := b.probe(t, id, "", append([]string{"chroot"}, paths...)...)
	expectErrno(t, got, []string{"chroot", "chroot_dot", "pivot_root", "pivot_root_dot"}, "EPERM")
	var names []string
	for i := range paths {
		names = append(names, "read_"+strconv.Itoa(i))
	}
	expectErrno(t, got, names, "ENOENT", "EACCES", "EPERM")
	b.noSecrets(t, res.Stdout)
}

func itemSetuid(t *testing.T, b *battery) {
	switch b.tier {
	case "gvisor":
		itemSetuidGvisor(t, b)
		return
	case "microvm":
		itemSetuidMicrovm(t, b)
		return
	}
	id := b.hostileSandbox(t, api.CreateSandboxRequest{})
	mustSh(t, id, "cp /tmp/probe /tmp/suid && chown 0:0 /tmp/suid && chmod 4755 /tmp/suid")
	ch := goExec(id, api.ExecRequest{Cmd: []string{"/tmp/suid", "ids", "3"}, User: "user", TimeoutMs: 10000})
	pid := findSandboxProc(t, id, "/tmp/suid ids 3")
	st, err := procStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	out := <-ch
	if out.err != nil {
		t.Fatal(out.err)
	}
	want := strconv.Itoa(sandboxUIDBase(t, id) + 1000)
	evidence(t, "inside: %q; host Uid of the setuid process: %s; NoNewPrivs %s", strings.TrimSpace(out.res.Stdout), st["Uid"], st["NoNewPrivs"])
	for _, u := range strings.Fields(st["Uid"]) {
		if u != want {
			t.Errorf("the setuid binary run by user 1000 has host uids %q; want all %s", st["Uid"], want)
			break
		}
	}
	if st["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs is %q", st["NoNewPrivs"])
	}
	if !strings.HasPrefix(out.res.Stdout, "ids 1000 1000 1000 nnp=1") {
		t.Errorf("inside the sandbox the setuid binary reports %q", out.res.Stdout)
	}
}

func itemFDsCwd(t *testing.T, b *battery) {
	switch b.tier {
	case "gvisor":
		itemFDsCwdGvisor(t, b)
		return
	case "microvm":
		itemFDsCwdMicrovm(t, b)
		return
	}
	id := b.sandbox(t, api.CreateSandboxRequest{})
	ch := goExec(id, api.ExecRequest{Cmd: []string{"sleep", "2"}})
	pid := findSandboxProc(t, id, "sleep 2")
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		fds = append(fds, e.Name())
	}
	<-ch
	// Evidence only: busybox runs ls inside the shell, so the listing
	// shows ls's own directory fd as well.
	inside := strings.Join(strings.Fields(mustSh(t, id, "ls /proc/$$/fd")), " ")
	evidence(t, "host sees fds %v of an exec'd process; a shell inside lists %q", fds, inside)
	if strings.Join(fds, " ") != "0 1 2" {
		t.Errorf("an exec'd process has fds %v; want only 0 1 2", fds)
	}
	checkCwdTricks(t, b, id)
}

// checkCwdTricks: exec with a cwd through /proc magic links (runc
// CVE-2024-21626 class) is refused with 400.
func checkCwdTricks(t *testing.T, b *battery, id string) {
	var rejected []string
	for _, cwd := range []string{"/proc/self/fd/3", "/proc/self/fd/4", "/proc/1/cwd", "/proc/self/cwd", "/proc/1/root", "/proc/self/root"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := env.client.Exec(ctx, id, api.ExecRequest{Cmd: []string{"ls", "-la", "."}, Cwd: cwd})
		cancel()
		if err == nil {
			b.noSecrets(t, res.Stdout)
			t.Errorf("exec with cwd %s was accepted: %q", cwd, res.Stdout)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("exec with cwd %s: %v; want an invalid-argument (400) error", cwd, err)
			continue
		}
		rejected = append(rejected, cwd)
	}
	evidence(t, "cwd rejected with 400: %v", rejected)
}

func fileSHA256(t testing.TB, path string) (string, time.Time) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), fi.ModTime()
}

func itemGuestBinary(t *testing.T, b *battery) {
	id := b.shared(t)
	sum0, mt0 := fileSHA256(t, env.cfg.GuestBinary)
	got, _ := b.probe(t, id, "", "exe")
	sh := b.hostile(t, id, api.ExecRequest{Shell: "cp /bin/busybox /proc/1/exe; echo cp=$?; echo x >> /proc/1/exe; echo append=$?"})
	sum1, mt1 := fileSHA256(t, env.cfg.GuestBinary)
	evidence(t, "sha256 %s -> %s; shell: %q", sum0[:16], sum1[:16], strings.ReplaceAll(strings.TrimSpace(sh.Stdout), "\n", " "))
	expectErrno(t, got, []string{"open_proc1_exe_wronly", "open_proc1_exe_trunc", "reopen_proc1_exe_wronly", "truncate_proc1_exe"},
		"EACCES", "EPERM", "ETXTBSY", "EROFS", "ENOENT")
	if sum0 != sum1 || !mt0.Equal(mt1) {
		t.Errorf("the guest agent binary on the host changed (sha256 %s -> %s, mtime %v -> %v)", sum0, sum1, mt0, mt1)
	}
	if strings.Contains(sh.Stdout, "cp=0") || strings.Contains(sh.Stdout, "append=0") {
		t.Errorf("a shell rewrote /proc/1/exe: %q", sh.Stdout)
	}
}
