package guest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// testGuest is a Server on a real unix socket, and a client for it.
type testGuest struct {
	srv    *Server
	client *http.Client
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: execs switch users and make cgroups")
	}
}

func newTestGuest(t testing.TB, cfg Config) *testGuest {
	t.Helper()
	requireRoot(t)
	srv := NewServer(cfg)
	sock := filepath.Join(t.TempDir(), "guest.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		MaxIdleConnsPerHost: 64,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &testGuest{srv: srv, client: &http.Client{Transport: tr}}
}

// exec runs a buffered exec and returns the result, or the error body
// with the status.
func (g *testGuest) exec(t testing.TB, req api.ExecRequest) (api.ExecResult, int, api.ErrorBody) {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := g.client.Post("http://guest/exec", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST /exec: %v", err)
	}
	defer resp.Body.Close()
	var res api.ExecResult
	var eb api.ErrorBody
	if resp.StatusCode == http.StatusOK {
		err = json.NewDecoder(resp.Body).Decode(&res)
	} else {
		err = json.NewDecoder(resp.Body).Decode(&eb)
	}
	if err != nil {
		t.Fatalf("decoding /exec answer (status %d): %v", resp.StatusCode, err)
	}
	return res, resp.StatusCode, eb
}

// mustExec is exec that fails the test on a non-200 answer.
func (g *testGuest) mustExec(t testing.TB, req api.ExecRequest) api.ExecResult {
	t.Helper()
	res, status, eb := g.exec(t, req)
	if status != http.StatusOK {
		t.Fatalf("exec %+v: status %d: %+v", req, status, eb)
	}
	return res
}

// stream is an open /exec/stream call: frames go in through in, events
// come out of events.
type stream struct {
	in     *io.PipeWriter
	resp   *http.Response
	events *bufio.Scanner
	frames *api.FrameReader // instead of events, for a framed stream
	cancel context.CancelFunc
}

// openFramedStream is openStream asking for api's binary frames.
func (g *testGuest) openFramedStream(t testing.TB, req api.ExecRequest) *stream {
	t.Helper()
	st := g.openStreamAccept(t, req, api.FramesContentType)
	if ct := st.resp.Header.Get("Content-Type"); ct != api.FramesContentType {
		t.Fatalf("asked for frames, got Content-Type %q", ct)
	}
	st.frames = api.NewFrameReader(st.resp.Body)
	return st
}

func (g *testGuest) openStream(t testing.TB, req api.ExecRequest) *stream {
	t.Helper()
	return g.openStreamAccept(t, req, "")
}

func (g *testGuest) openStreamAccept(t testing.TB, req api.ExecRequest, accept string) *stream {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	hreq, _ := http.NewRequestWithContext(ctx, "POST", "http://guest/exec/stream", pr)
	if accept != "" {
		hreq.Header.Set("Accept", accept)
	}
	line, _ := json.Marshal(req)
	go pw.Write(append(line, '\n'))
	resp, err := g.client.Do(hreq)
	if err != nil {
		cancel()
		t.Fatalf("POST /exec/stream: %v", err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	st := &stream{in: pw, resp: resp, events: sc, cancel: cancel}
	t.Cleanup(st.close)
	return st
}

func (st *stream) send(t testing.TB, f api.StdinFrame) {
	t.Helper()
	line, _ := json.Marshal(f)
	if _, err := st.in.Write(append(line, '\n')); err != nil {
		t.Fatalf("sending stdin frame: %v", err)
	}
}

func (st *stream) next(t testing.TB) (api.ExecEvent, bool) {
	t.Helper()
	if st.frames != nil {
		var ev api.ExecEvent
		err := st.frames.Next(&ev)
		if err == io.EOF {
			return ev, false
		}
		if err != nil {
			t.Fatalf("reading a frame: %v", err)
		}
		return ev, true
	}
	if !st.events.Scan() {
		return api.ExecEvent{}, false
	}
	var ev api.ExecEvent
	if err := json.Unmarshal(st.events.Bytes(), &ev); err != nil {
		t.Fatalf("event %q: %v", st.events.Bytes(), err)
	}
	return ev, true
}

// all reads events until the stream ends.
func (st *stream) all(t testing.TB) []api.ExecEvent {
	t.Helper()
	var evs []api.ExecEvent
	for {
		ev, ok := st.next(t)
		if !ok {
			return evs
		}
		evs = append(evs, ev)
	}
}

func (st *stream) close() {
	st.in.Close()
	st.cancel()
	st.resp.Body.Close()
}

// collect sums a finished stream: its output and its final event.
func collect(t testing.TB, evs []api.ExecEvent) (stdout, stderr []byte, last api.ExecEvent) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("stream ended without events")
	}
	for i, ev := range evs {
		switch ev.Type {
		case api.EventStdout:
			stdout = append(stdout, ev.Data...)
		case api.EventStderr:
			stderr = append(stderr, ev.Data...)
		case api.EventExit, api.EventError:
			if i != len(evs)-1 {
				t.Fatalf("%s event at %d of %d: must be the last", ev.Type, i, len(evs))
			}
		}
	}
	last = evs[len(evs)-1]
	if last.Type != api.EventExit && last.Type != api.EventError {
		t.Fatalf("stream ended with %q, want exit or error", last.Type)
	}
	return stdout, stderr, last
}

// testCgroupsV1 makes a real v1 pids and freezer cgroup pair for a test
// and returns their dir fds; cleanup kills anything left and removes them.
func testCgroupsV1(t testing.TB) (dirs []CgroupDir, paths []string) {
	t.Helper()
	requireRoot(t)
	name := fmt.Sprintf("agentbox-test-%08x", rand.Uint32())
	for _, ctl := range []string{"pids", "freezer"} {
		base := "/sys/fs/cgroup/" + ctl
		if _, err := os.Stat(filepath.Join(base, "tasks")); err != nil {
			t.Skipf("needs the cgroup v1 %s hierarchy at %s: %v", ctl, base, err)
		}
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		dirs = append(dirs, CgroupDir{FD: fd, Freezer: ctl == "freezer"})
		defer moveSelf(t, ctl, p) // after the cleanup below is registered
		t.Cleanup(func() {
			// Children first, killing what is left (a failed test).
			entries, _ := os.ReadDir(p)
			for _, e := range entries {
				if !e.IsDir() {
					continue
				}
				child := filepath.Join(p, e.Name())
				if ctl == "freezer" {
					os.WriteFile(filepath.Join(child, "freezer.state"), []byte("THAWED"), 0)
				}
				for range 100 {
					b, _ := os.ReadFile(filepath.Join(child, "cgroup.procs"))
					for f := range strings.FieldsSeq(string(b)) {
						var pid int
						fmt.Sscan(f, &pid)
						unix.Kill(pid, unix.SIGKILL)
					}
					if unix.Rmdir(child) == nil {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			unix.Close(fd)
			if err := unix.Rmdir(p); err != nil {
				t.Errorf("removing test cgroup %s: %v", p, err)
			}
		})
	}
	return dirs, paths
}

// testCgroupV2 makes a real cgroup on the v2 hierarchy (on this hybrid
// host, /sys/fs/cgroup/unified) and returns its dir fd.
func testCgroupV2(t testing.TB) (dirs []CgroupDir, paths []string) {
	t.Helper()
	requireRoot(t)
	base := "/sys/fs/cgroup/unified"
	if b, err := os.ReadFile("/proc/mounts"); err != nil || !strings.Contains(string(b), "cgroup2 /sys/fs/cgroup") {
		t.Skip("needs a cgroup v2 hierarchy under /sys/fs/cgroup")
	}
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		base = "/sys/fs/cgroup"
	}
	p := filepath.Join(base, fmt.Sprintf("agentbox-test-%08x", rand.Uint32()))
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			if e.IsDir() {
				child := filepath.Join(p, e.Name())
				os.WriteFile(filepath.Join(child, "cgroup.kill"), []byte("1"), 0)
				for range 100 {
					if unix.Rmdir(child) == nil {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
		unix.Close(fd)
		if err := unix.Rmdir(p); err != nil {
			t.Errorf("removing test cgroup %s: %v", p, err)
		}
	})
	return []CgroupDir{{FD: fd, V2: true}}, []string{p}
}

// cgroupKinds are the cgroup setups the cgroup tests run on.
var cgroupKinds = []struct {
	name string
	make func(testing.TB) ([]CgroupDir, []string)
}{
	{"v1", testCgroupsV1},
	{"v2", testCgroupV2},
}

// moveSelf moves the test process into cgroup dir of ctl, as the agent
// lives in the sandbox's cgroup, and back where it was at cleanup.
func moveSelf(t testing.TB, ctl, dir string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	orig := ""
	for l := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(l), ":", 3)
		if len(f) == 3 && f[1] == ctl {
			orig = filepath.Join("/sys/fs/cgroup", ctl, f[2])
		}
	}
	if orig == "" {
		t.Fatalf("no %s line in /proc/self/cgroup", ctl)
	}
	pid := []byte(fmt.Sprint(os.Getpid()))
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0); err != nil {
		t.Fatalf("moving the test into %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(orig, "cgroup.procs"), pid, 0); err != nil {
			t.Errorf("moving the test back to %s: %v", orig, err)
		}
	})
}

// alive says whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// settle waits until the tidy goroutine of s has nothing left to do.
func (s *cgroupSet) settle() {
	s.mu.Lock()
	for s.tidying {
		s.idle.Wait()
	}
	s.mu.Unlock()
}

// checkOnlyReady fails t unless every exec cgroup left under paths, once
// g's set has settled, is one made ahead for a later exec and is empty:
// no exec leaves its own behind.
func checkOnlyReady(t *testing.T, g *testGuest, paths []string) {
	t.Helper()
	s := g.srv.cgroups
	s.settle()
	s.mu.Lock()
	ready := map[string]bool{}
	for _, c := range s.ready {
		ready[c.name] = true
	}
	s.mu.Unlock()
	for _, p := range paths {
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			if !ready[e.Name()] {
				t.Errorf("exec cgroup %s left behind", filepath.Join(p, e.Name()))
				continue
			}
			if b, _ := os.ReadFile(filepath.Join(p, e.Name(), "cgroup.procs")); len(b) > 0 {
				t.Errorf("cgroup %s made ahead holds processes: %s", filepath.Join(p, e.Name()), b)
			}
		}
	}
}
