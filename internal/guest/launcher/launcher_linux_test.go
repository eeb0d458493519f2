package launcher

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain makes the test binary a launcher when started as one
// (`<test binary> launcher`, as NewClient starts the guest binary).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "launcher" {
		if err := ServeInherited(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// inProcess returns a client whose launcher is Serve on a goroutine of
// this test (the protocol is the same as with a launcher process).
func inProcess(t *testing.T) *Client {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sp")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	ours, theirs := conn(fds[0]), conn(fds[1])
	done := make(chan error, 1)
	go func() { done <- Serve(theirs) }()
	t.Cleanup(func() {
		ours.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return when the client closed its end")
		}
	})
	return &Client{conn: ours}
}

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the launcher tests start processes in new user namespaces mapped to host uid 1000000 and need root")
	}
}

// A child started through the launcher gets its namespaces, id mapping,
// env and extra files, and its exit closes the channel.
func TestStart(t *testing.T) {
	requireRoot(t)
	c := inProcess(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", `echo "$X $$ $(cat /proc/self/uid_map)" >&3; read line < /proc/self/status`)
	cmd.Env = []string{"X=hello"}
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:      true,
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1000000, Size: 65536}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1000000, Size: 65536}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0},
	}
	pid, exited, err := c.Start(cmd)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if pid <= 0 {
		t.Fatalf("pid %d", pid)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	// $$ is 1: the child is init of its new pid namespace.
	if got := strings.Join(strings.Fields(line), " "); got != "hello 1 0 1000000 65536" {
		t.Errorf("child printed %q, want env X, pid 1 and the uid map", got)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("exit channel not closed after the child exited")
	}
}

// Exit is seen for a child killed from outside; an error in one request
// (a missing binary) does not break the next.
func TestExitAndErrors(t *testing.T) {
	requireRoot(t)
	c := inProcess(t)
	bad := exec.Command("/nonexistent/binary")
	bad.Env = []string{}
	if _, _, err := c.Start(bad); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("start of a missing binary: %v", err)
	}
	cmd := exec.Command("/bin/sleep", "60")
	cmd.Env = []string{}
	pid, exited, err := c.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Fatal("exit channel closed while the child runs")
	case <-time.After(100 * time.Millisecond):
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("exit channel not closed after SIGKILL")
	}
	// Reaped by the launcher: no zombie is left.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + itoa(pid)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still in /proc: not reaped", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	noEnv := exec.Command("/bin/true")
	if _, _, err := c.Start(noEnv); err == nil {
		t.Error("a command without Env was accepted: it would start with the launcher's empty environment silently")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// Every child is reaped even though the client makes the pidfd it got
// non-blocking (watch polls it): the launcher's own wait must not share
// that open file, or its waitid answers EAGAIN and the child stays a
// zombie (a leak of one pid per sandbox, seen in the daemon).
//
// Both ways of reaping: a launcher in this test's process (pid by pid)
// and one in its own process, as the daemon runs it (wait4(-1)).
func TestReapsManyChildren(t *testing.T) {
	requireRoot(t)
	t.Run("in-process", func(t *testing.T) { reapsManyChildren(t, inProcess(t)) })
	t.Run("own-process", func(t *testing.T) {
		c := NewClient(os.Args[0]) // TestMain serves `launcher`
		t.Cleanup(c.Close)
		reapsManyChildren(t, c)
	})
}

func reapsManyChildren(t *testing.T, c *Client) {
	var pids []int
	for i := 0; i < 30; i++ {
		cmd := exec.Command("/bin/true")
		cmd.Env = []string{}
		pid, exited, err := c.Start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Fatalf("child %d: no exit seen", pid)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for {
			b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
			if os.IsNotExist(err) || (err == nil && !strings.Contains(string(b), ") Z ")) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pid %d is a zombie 10 s after it exited: the launcher did not reap it", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestStartOwned: a user namespace made through the launcher for owner
// is owner's (NS_GET_OWNER_UID), its 65,536 ids map where asked, the
// child runs as the namespace's root, and the launcher's own threads keep
// their credentials.
func TestStartOwned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: an id map of 65,536 (make test runs as root)")
	}
	const owner = 1234567
	c := inProcess(t)
	for i := range 3 { // the same launcher again: its credentials are its own
		cmd := exec.Command("/bin/sleep", "30")
		cmd.Env = []string{}
		m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: owner, Size: 65536}}
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: m, GidMappings: m,
			Credential: &syscall.Credential{Uid: 0, Gid: 0}}
		pid, exited, err := c.StartOwned(cmd, owner)
		if err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := unix.IoctlGetUint32(fd, unix.NS_GET_OWNER_UID)
		unix.Close(fd)
		um, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/uid_map")
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		_ = unix.Kill(pid, unix.SIGKILL)
		<-exited
		if err != nil || got != owner {
			t.Fatalf("start %d: the namespace's owner is %d (%v), want %d", i, got, err, owner)
		}
		if f := strings.Fields(string(um)); len(f) != 3 || f[1] != strconv.Itoa(owner) || f[2] != "65536" {
			t.Errorf("uid map %q", um)
		}
		if !strings.Contains(string(st), "\nUid:\t"+strconv.Itoa(owner)+"\t"+strconv.Itoa(owner)+"\t"+strconv.Itoa(owner)+"\t") {
			t.Errorf("the child's host uids are not all %d:\n%s", owner, st)
		}
	}
	if os.Geteuid() != 0 {
		t.Error("the test's own credentials changed")
	}
}

func TestV1Dirs(t *testing.T) {
	const mountinfo = `25 30 0:22 / /sys rw shared:7 - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw
34 25 0:29 / /sys/fs/cgroup/systemd rw shared:11 - cgroup cgroup rw,xattr,name=systemd
38 25 0:33 / /sys/fs/cgroup/cpu,cpuacct rw shared:15 - cgroup cgroup rw,cpu,cpuacct
39 25 0:34 / /sys/fs/cgroup/pids rw shared:16 - cgroup cgroup rw,pids
`
	const procCgroup = `4:pids:/system.slice/x.service
3:cpu,cpuacct:/
1:name=systemd:/system.slice/x.service
0::/system.slice/x.service
`
	got := v1Dirs(procCgroup, mountinfo)
	want := []string{"/sys/fs/cgroup/pids/system.slice/x.service", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/systemd/system.slice/x.service"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("v1Dirs = %q, want %q", got, want)
	}
}

// TestStartInCgroup: a child started with StartIn is born in the given
// v1 cgroup, with a cgroup namespace rooted there (it reads "/" for its
// own cgroup), and the launcher's starting thread is back in its own
// cgroups when the start is answered: no thread of the launcher, a host
// root process, is left in the sandbox's cgroup.
func TestStartInCgroup(t *testing.T) {
	requireRoot(t)
	dir := fmt.Sprintf("/sys/fs/cgroup/pids/agentbox-launchertest-%d", os.Getpid())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("a scratch pids cgroup (a cgroup v1 host): %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	c := NewClient(os.Args[0]) // a launcher of its own, as the daemon runs it
	t.Cleanup(c.Close)
	for i := 0; i < 20; i++ {
		tasks, err := os.OpenFile(dir+"/tasks", os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		hold, release, err := os.Pipe() // the child waits for release's close
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { release.Close() }) // a failed round's child too
		cmd := exec.Command("/bin/sh", "-c", `grep :pids: /proc/self/cgroup >&3; read line <&4`)
		cmd.Env = []string{}
		cmd.ExtraFiles = []*os.File{w, hold}
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWCGROUP,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1000000, Size: 65536}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1000000, Size: 65536}},
			Credential:  &syscall.Credential{Uid: 0, Gid: 0},
		}
		pid, exited, in, err := c.StartIn(cmd, 1000000, []*os.File{tasks})
		tasks.Close()
		w.Close()
		hold.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !in {
			t.Fatal("StartIn: the launcher says the child was not born in the cgroup")
		}
		tids, _ := os.ReadFile(dir + "/tasks")
		for _, tid := range strings.Fields(string(tids)) {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%s", c.proc.Pid, tid)); err == nil {
				t.Fatalf("thread %s of the launcher (pid %d) is in the cgroup after the start", tid, c.proc.Pid)
			}
		}
		if !strings.Contains(" "+strings.Join(strings.Fields(string(tids)), " ")+" ", " "+strconv.Itoa(pid)+" ") {
			t.Fatalf("the child %d is not in the cgroup: tasks %q", pid, tids)
		}
		line, err := bufio.NewReader(r).ReadString('\n')
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(strings.TrimSpace(line), ":pids:/") {
			t.Errorf("the child's own view of its pids cgroup: %q, want its namespace's root", line)
		}
		release.Close()
		<-exited
	}
}
