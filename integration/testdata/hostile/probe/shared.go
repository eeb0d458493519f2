package main

// Subcommands for the battery items on resources the host shares with
// every sandbox (items 39-44): each takes as much as the sandbox lets it
// and holds it, so that the host can read its counters meanwhile.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func unsafePtr[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }

func init() {
	sharedCmds = map[string]func([]string){
		"holdfiles": probeHoldFiles, "holdfiles1": probeHoldFiles1,
		"tcpfill": probeTCPFill, "loopback": probeLoopback,
		"udpflood": probeUDPFlood, "flows": probeFlows, "sparse": probeSparse,
		"peruser": probePerUser,
		"mqsig":   probeMqSig,
	}
}

// readyFile is created once a holding subcommand holds all it could take,
// for the host to poll: /tmp/ready-<name>.
func ready(name string) { _ = os.WriteFile("/tmp/ready-"+name, nil, 0o644) }

// probeSparse makes args[0] a sparse file of args[1] bytes.
func probeSparse(args []string) {
	size, _ := strconv.ParseInt(args[1], 10, 64)
	f, err := os.Create(args[0])
	if err == nil {
		err = f.Truncate(size)
		f.Close()
	}
	report("sparse", err, size)
}

// probeHoldFiles starts args[0] copies of itself that each open
// /dev/null until an error and hold the files for args[1] seconds.
func probeHoldFiles(args []string) {
	procs, _ := strconv.Atoi(args[0])
	var wg sync.WaitGroup
	var mu sync.Mutex
	total, started := 0, 0
	for i := 0; i < procs; i++ {
		cmd := exec.Command("/proc/self/exe", "holdfiles1", args[1])
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			report("start", err, i)
			break
		}
		started++
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 256)
			n, _ := out.Read(b)
			var errName string
			var held int
			fmt.Sscanf(string(b[:n]), "held %s %d", &errName, &held)
			mu.Lock()
			total += held
			mu.Unlock()
			os.Stdout.Write(b[:n])
		}()
	}
	wg.Wait()
	report("holdfiles", nil, started, " ", total)
	ready("holdfiles")
	secs, _ := strconv.Atoi(args[1])
	time.Sleep(time.Duration(secs) * time.Second)
}

func probeHoldFiles1(args []string) {
	secs, _ := strconv.Atoi(args[0])
	// At the memory limit the OOM killer takes a holder, not the parent
	// that reports.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0o644)
	var lim unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	lim.Cur = lim.Max
	_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	n := 0
	var err error
	for {
		if _, err = unix.Open("/dev/null", unix.O_RDONLY, 0); err != nil {
			break
		}
		n++
	}
	report("held", err, n)
	time.Sleep(time.Duration(secs) * time.Second)
}

// probeTCPFill makes args[0] loopback TCP pairs, fills each one's buffers
// (the largest the kernel grants) without reading, reports the bytes
// queued and holds them args[1] seconds.
func probeTCPFill(args []string) {
	pairs, _ := strconv.Atoi(args[0])
	secs, _ := strconv.Atoi(args[1])
	var keep []net.Conn
	var total int64
	buf := make([]byte, 64<<10)
	var err error
	for i := 0; i < pairs; i++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			break
		}
		var a net.Conn
		if a, err = net.Dial("tcp", ln.Addr().String()); err != nil {
			ln.Close()
			break
		}
		c, aerr := ln.Accept()
		ln.Close()
		if aerr != nil {
			err = aerr
			break
		}
		c.(*net.TCPConn).SetReadBuffer(1 << 30)
		a.(*net.TCPConn).SetWriteBuffer(1 << 30)
		keep = append(keep, a, c)
		// Write until the kernel would block (the fd is non-blocking
		// under Go's poller): both buffers full.
		rc, _ := a.(*net.TCPConn).SyscallConn()
		rc.Write(func(fd uintptr) bool {
			for {
				n, werr := unix.Write(int(fd), buf)
				if n > 0 {
					total += int64(n)
				}
				if werr != nil {
					return true
				}
			}
		})
	}
	report("tcpfill", err, len(keep)/2, " ", total>>20)
	ready("tcpfill")
	time.Sleep(time.Duration(secs) * time.Second)
}

// probeLoopback moves args[0] bytes over one loopback TCP connection and
// reports how long it took.
func probeLoopback(args []string) {
	n, _ := strconv.ParseInt(args[0], 10, 64)
	start := time.Now()
	err := loopbackTransfer(n, 60*time.Second)
	report("loopback", err, time.Since(start).Milliseconds(), "ms")
}

func loopbackTransfer(n int64, limit time.Duration) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(limit))
		var total int64
		b := make([]byte, 64<<10)
		for {
			m, err := c.Read(b)
			total += int64(m)
			if err != nil {
				break
			}
		}
		got <- total
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), limit)
	if err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(limit))
	b := make([]byte, 64<<10)
	for sent := int64(0); sent < n; {
		m, err := c.Write(b[:min(int64(len(b)), n-sent)])
		sent += int64(m)
		if err != nil {
			c.Close()
			return err
		}
	}
	c.Close()
	if total := <-got; total != n {
		return fmt.Errorf("received %d of %d bytes", total, n)
	}
	return nil
}

// probeUDPFlood sends UDP datagrams to args[0] (ip:port) as fast as it
// can for args[1] seconds, each from a new socket (a new flow), and
// reports how many it sent.
func probeUDPFlood(args []string) {
	secs, _ := strconv.Atoi(args[1])
	addr, err := net.ResolveUDPAddr("udp", args[0])
	if err != nil {
		report("udpflood", err)
		return
	}
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	sent := 0
	for time.Now().Before(deadline) {
		c, err := net.DialUDP("udp", nil, addr)
		if err != nil {
			continue
		}
		for i := 0; i < 16; i++ {
			if _, err := c.Write([]byte("x")); err == nil {
				sent++
			}
		}
		c.Close()
	}
	report("udpflood", nil, sent)
}

// probeFlows opens new flows to args[0] (ip:port) for args[1] seconds:
// UDP datagrams from fresh sockets (kept open, so each is a flow of its
// own) and TCP connects, and reports how many of each went out and how
// many connects were refused by the firewall.
func probeFlows(args []string) {
	secs, _ := strconv.Atoi(args[1])
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	udp, tcp, refused := 0, 0, 0
	var keep []net.Conn
	for time.Now().Before(deadline) && udp < 64000 {
		c, err := net.Dial("udp", args[0])
		if err != nil {
			break
		}
		if _, err := c.Write([]byte{0}); err == nil {
			udp++
		}
		keep = append(keep, c)
		if len(keep) > 2000 {
			keep[0].Close()
			keep = keep[1:]
		}
	}
	for _, c := range keep {
		c.Close()
	}
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", args[0], 2*time.Second)
		if err != nil {
			if errors.Is(err, unix.EHOSTUNREACH) {
				refused++
			}
			continue
		}
		tcp++
		c.Close()
	}
	report("flows", nil, "udp=", udp, " tcp=", tcp, " refused=", refused)
}

// probePerUser takes, in turn, as much as it can of the per-user kernel
// counts (inotify instances, POSIX message queues, queued signals, pipes
// at full size), reports each count, creates /tmp/ready-peruser and holds
// everything args[0] seconds. With "check" instead of seconds it takes
// one of each and reports whether it could: what a neighbour or the host
// runs meanwhile.
func probePerUser(args []string) {
	check := args[0] == "check"
	most := 1 << 20
	if check {
		most = 1
	}
	// Half the fds for inotify, an eighth for queues and a quarter for
	// pipes (two each), so that a
	// sandbox whose own kernel counts no less (gVisor) still has fds left
	// to say it is ready.
	var lim unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	n := 0
	var err error
	for ; n < min(most, int(lim.Cur/2)); n++ {
		if _, err = unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
			break
		}
	}
	report("inotify", errIf(check, err), n)
	n, err = 0, nil
	attr := struct{ flags, maxmsg, msgsize, curmsgs int64 }{0, 10, 8192, 0}
	for ; n < min(most, int(lim.Cur/8)); n++ {
		name := []byte(fmt.Sprintf("abprobe%d-%d\x00", os.Getpid(), n))
		fd, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafePtr(&name[0])), uintptr(unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC), 0o600, uintptr(unsafePtr(&attr)), 0, 0)
		if e != 0 {
			err = e
			break
		}
		_ = fd
		if check {
			unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafePtr(&name[0])), 0, 0)
		}
	}
	report("mqueue", errIf(check, err), n)
	n, err = sigqueueUntil(most)
	report("sigqueue", errIf(check, err), n)
	n, err = 0, nil
	small := 0
	for ; n < min(most, 4096, int(lim.Cur/8)); n++ {
		var p [2]int
		if err = unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			break
		}
		if sz, _ := unix.FcntlInt(uintptr(p[0]), unix.F_GETPIPE_SZ, 0); sz < 65536 {
			small++
		}
	}
	if check && small > 0 {
		err = fmt.Errorf("a new pipe holds less than 64 KiB")
	}
	report("pipes", errIf(check, err), n, " ", small)
	n, err = epollWatches(min(most, 200_000), max(int(lim.Cur/32), 1))
	report("epoll", errIf(check, err), n)
	if check {
		return
	}
	ready("peruser")
	secs, _ := strconv.Atoi(args[0])
	time.Sleep(time.Duration(secs) * time.Second)
}

// probeMqSig takes as many POSIX message queues (of the default size) as
// its uid may, reports the count, creates /tmp/ready-mqsig and holds them
// args[0] seconds: many sandboxes doing so at once show whose per-user
// count the kernel charges one level up (their user namespace's owner).
func probeMqSig(args []string) {
	attr := struct{ flags, maxmsg, msgsize, curmsgs int64 }{0, 10, 8192, 0}
	n := 0
	var err error
	for ; n < 64; n++ {
		name := []byte(fmt.Sprintf("abmq%d-%d\x00", os.Getpid(), n))
		_, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafePtr(&name[0])), uintptr(unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC), 0o600, uintptr(unsafePtr(&attr)), 0, 0)
		if e != 0 {
			err = e
			break
		}
	}
	report("mqueue", nil, n, " ", errText(err))
	ready("mqsig")
	secs, _ := strconv.Atoi(args[0])
	time.Sleep(time.Duration(secs) * time.Second)
}

// errText is err's text, "none" for nil.
func errText(err error) string {
	if err == nil {
		return "none"
	}
	return strings.ReplaceAll(err.Error(), " ", "_")
}

// epollWatches adds up to most epoll watches (fs.epoll.max_user_watches
// counts them per host uid) with at most fds descriptors: eventfds each
// watched by every epoll instance. It returns how many it added.
func epollWatches(most, fds int) (int, error) {
	per := min(most, max(fds/2, 1), 512)
	var evs []int
	for range per {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			return 0, err
		}
		evs = append(evs, fd)
	}
	n := 0
	for ep := 0; n < most && ep < max(fds/2, 1); ep++ {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return n, err
		}
		for _, fd := range evs {
			if n == most {
				break
			}
			if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// errIf is err for a check (any failure counts) and nil otherwise (the
// count is what matters).
func errIf(check bool, err error) error {
	if check {
		return err
	}
	return nil
}

// sigqueueUntil queues SIGRTMIN+2 to this thread, blocked, until most
// are queued or the kernel refuses one.
func sigqueueUntil(most int) (int, error) {
	runtime.LockOSThread()
	sig := unix.Signal(34 + 2)
	var set unix.Sigset_t
	set.Val[0] = 1 << (uint(sig) - 1)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil); err != nil {
		return 0, err
	}
	pid, tid := unix.Getpid(), unix.Gettid()
	var info [128]byte
	*(*int32)(unsafePtr(&info[0])) = int32(sig)
	*(*int32)(unsafePtr(&info[8])) = -1 // SI_QUEUE
	n := 0
	for ; n < most; n++ {
		if _, _, e := unix.Syscall6(unix.SYS_RT_TGSIGQUEUEINFO, uintptr(pid), uintptr(tid), uintptr(sig), uintptr(unsafePtr(&info[0])), 0, 0); e != 0 {
			return n, e
		}
	}
	return n, nil
}
