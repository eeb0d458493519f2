package guest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/api"
)

// call sends a JSON (or raw) request to the test guest and decodes the answer.
func (g *testGuest) call(t testing.TB, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		js, _ := json.Marshal(b)
		rd = bytes.NewReader(js)
	}
	req, _ := http.NewRequest(method, "http://guest"+path, rd)
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decoding %q: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

func TestBackgroundProcess(t *testing.T) {
	g := newTestGuest(t, Config{KeepaliveInterval: 200 * time.Millisecond})
	var pr api.Process
	if code := g.call(t, "POST", "/processes", api.StartProcessRequest{
		Shell: `read line; echo "got $line"; i=0; while [ $i -lt 50 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done; exit 7`,
		Tag:   "srv", MaxBufferBytes: 64,
	}, &pr); code != 201 {
		t.Fatalf("start: %d", code)
	}
	if pr.State != api.ProcessRunning || pr.Pid == 0 {
		t.Fatalf("started %+v", pr)
	}
	if code := g.call(t, "POST", "/processes/srv", api.StartProcessRequest{Cmd: []string{"true"}, Tag: "srv"}, nil); code != 405 && code != 404 {
		// POST /processes/{ref} is not a route; the tag check is below.
		t.Logf("POST /processes/srv: %d", code)
	}
	if code := g.call(t, "POST", "/processes", api.StartProcessRequest{Cmd: []string{"true"}, Tag: "srv"}, nil); code != http.StatusConflict {
		t.Errorf("second process with a running tag: %d, want 409", code)
	}
	if code := g.call(t, "POST", "/processes/srv/wait?timeout_ms=100", nil, nil); code != http.StatusGatewayTimeout {
		t.Errorf("wait on a running process: %d, want 504", code)
	}
	if code := g.call(t, "POST", "/processes/srv/stdin?eof=true", []byte("hello\n"), nil); code != 204 {
		t.Fatalf("stdin: %d", code)
	}
	var done api.Process
	if code := g.call(t, "POST", "/processes/srv/wait?timeout_ms=10000", nil, &done); code != 200 || done.ExitCode == nil || *done.ExitCode != 7 {
		t.Fatalf("wait: %d %+v", code, done)
	}
	// The ring holds the last 64 bytes of each stream; offsets say what
	// was dropped.
	var out api.ProcessOutput
	g.call(t, "GET", "/processes/srv/output", nil, &out)
	if out.State != api.ProcessExited || len(out.Stdout) != 64 || out.StdoutDropped == 0 ||
		out.StdoutOffset != out.StdoutDropped+64 || !strings.HasSuffix(string(out.Stdout), "out49\n") {
		t.Errorf("output: %+v (stdout %q)", out, out.Stdout)
	}
	var tail api.ProcessOutput
	g.call(t, "GET", fmt.Sprintf("/processes/%d/output?stdout_offset=%d", pr.Pid, out.StdoutOffset-6), nil, &tail)
	if string(tail.Stdout) != "out49\n" || tail.StdoutDropped != 0 {
		t.Errorf("tail: %q dropped %d", tail.Stdout, tail.StdoutDropped)
	}
	// A stream from an offset replays to the end, then exit.
	resp, err := g.client.Get(fmt.Sprintf("http://guest/processes/srv/stream?stdout_offset=%d", out.StdoutOffset-12))
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	var last api.ExecEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev api.ExecEvent
		json.Unmarshal(sc.Bytes(), &ev)
		if ev.Type == api.EventStdout {
			if ev.Offset == nil || *ev.Offset != out.StdoutOffset-12+int64(got.Len()) {
				t.Errorf("event offset %v, want %d", ev.Offset, out.StdoutOffset-12+int64(got.Len()))
			}
			got.Write(ev.Data)
		}
		last = ev
	}
	resp.Body.Close()
	if got.String() != "out48\nout49\n" || last.Type != api.EventExit || *last.ExitCode != 7 {
		t.Errorf("stream: %q, last %+v", got.String(), last)
	}
	var list api.ProcessList
	g.call(t, "GET", "/processes", nil, &list)
	if len(list.Processes) != 1 || list.Processes[0].Tag != "srv" {
		t.Errorf("list: %+v", list)
	}
	if code := g.call(t, "DELETE", "/processes/srv", nil, nil); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if code := g.call(t, "GET", "/processes/srv", nil, nil); code != 404 {
		t.Errorf("get after delete: %d", code)
	}
}

func TestBackgroundSignalAndKill(t *testing.T) {
	g := newTestGuest(t, Config{})
	var pr api.Process
	g.call(t, "POST", "/processes", api.StartProcessRequest{Shell: "trap 'echo usr1; exit 3' USR1; while :; do sleep 0.05; done"}, &pr)
	time.Sleep(300 * time.Millisecond) // let the trap be set
	ref := fmt.Sprint(pr.Pid)
	if code := g.call(t, "POST", "/processes/"+ref+"/signal", map[string]any{"signal": "USR1"}, nil); code != 204 {
		t.Fatalf("signal: %d", code)
	}
	var done api.Process
	g.call(t, "POST", "/processes/"+ref+"/wait?timeout_ms=10000", nil, &done)
	if done.ExitCode == nil || *done.ExitCode != 3 {
		t.Errorf("after SIGUSR1: %+v", done)
	}
	if code := g.call(t, "POST", "/processes/"+ref+"/signal", map[string]any{"signal": "BOGUS"}, nil); code != 400 {
		t.Errorf("bogus signal: %d", code)
	}
	g.call(t, "POST", "/processes", api.StartProcessRequest{Shell: "sleep 100 & sleep 100"}, &pr)
	if code := g.call(t, "DELETE", fmt.Sprintf("/processes/%d", pr.Pid), nil, nil); code != 204 {
		t.Errorf("kill: %d", code)
	}
	waitGone(t, pr.Pid)
}

func TestPTYSession(t *testing.T) {
	g := newTestGuest(t, Config{})
	var ps api.PTYSession
	if code := g.call(t, "POST", "/pty", api.CreatePTYRequest{Cmd: []string{"/bin/sh"}, Cols: 100, Rows: 30}, &ps); code != 201 {
		t.Fatalf("create: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://guest/pty/"+ps.ID+"/ws", &websocket.DialOptions{HTTPClient: g.client})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.Write(ctx, websocket.MessageBinary, []byte("stty size; echo $TERM; tty\n"))
	var screen bytes.Buffer
	readUntil := func(want string) {
		t.Helper()
		for !strings.Contains(screen.String(), want) {
			typ, data, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for %q: %v; screen %q", want, err, screen.String())
			}
			if typ == websocket.MessageBinary {
				screen.Write(data)
			} else {
				screen.WriteString("CTL" + string(data))
			}
		}
	}
	readUntil("30 100")
	readUntil("xterm-256color")
	readUntil("/dev/pts/")
	ctl, _ := json.Marshal(api.PTYControl{Type: api.PTYResize, Cols: 120, Rows: 40})
	c.Write(ctx, websocket.MessageText, ctl)
	time.Sleep(100 * time.Millisecond)
	c.Write(ctx, websocket.MessageBinary, []byte("stty size\n"))
	readUntil("40 120")
	c.Write(ctx, websocket.MessageBinary, []byte("sleep 100\n"))
	time.Sleep(300 * time.Millisecond)
	c.Write(ctx, websocket.MessageBinary, []byte{3})
	c.Write(ctx, websocket.MessageBinary, []byte("echo after-$((40+2))\n"))
	readUntil("after-42")
	c.Write(ctx, websocket.MessageBinary, []byte("exit 5\n"))
	readUntil(`CTL{"type":"exit","exit_code":5}`)
}

func TestWatch(t *testing.T) {
	g := newTestGuest(t, Config{})
	dir := t.TempDir()
	resp, err := g.client.Get("http://guest/files/watch?recursive=true&path=" + dir)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Scan() // the first keepalive: the watch is in place
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	time.Sleep(100 * time.Millisecond)
	for i := range 50 {
		os.WriteFile(filepath.Join(dir, "sub", fmt.Sprintf("f%d", i)), []byte("x"), 0o644)
	}
	os.Rename(filepath.Join(dir, "sub", "f0"), filepath.Join(dir, "sub", "g0"))
	os.Remove(filepath.Join(dir, "sub", "g0"))
	var got []string
	for sc.Scan() && len(got) < 1+50*2+2+1 {
		var ev api.WatchEvent
		json.Unmarshal(sc.Bytes(), &ev)
		if ev.Type == api.WatchKeepalive {
			continue
		}
		got = append(got, ev.Type+" "+strings.TrimPrefix(ev.Path, dir))
	}
	want := []string{"create /sub"}
	for i := range 50 {
		want = append(want, fmt.Sprintf("create /sub/f%d", i), fmt.Sprintf("write /sub/f%d", i))
	}
	want = append(want, "rename /sub/f0", "rename /sub/g0", "remove /sub/g0")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBackgroundChunks checks that chunks=true puts stdout and stderr back
// in the order the process wrote them, on the output route and the
// stream. The process writes one line per stdin line, and the test feeds
// the next line only once the agent has read the last output, so the
// order is certain.
func TestBackgroundChunks(t *testing.T) {
	g := newTestGuest(t, Config{KeepaliveInterval: 200 * time.Millisecond})
	var pr api.Process
	if code := g.call(t, "POST", "/processes", api.StartProcessRequest{
		Shell: `for i in 1 2 3; do read x; echo out$i; read x; echo err$i >&2; done`, Tag: "alt",
	}, &pr); code != 201 {
		t.Fatalf("start: %d", code)
	}
	for k := 1; k <= 6; k++ {
		if code := g.call(t, "POST", "/processes/alt/stdin", []byte("\n"), nil); code != 204 {
			t.Fatalf("stdin: %d", code)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			var out api.ProcessOutput
			g.call(t, "GET", "/processes/alt/output", nil, &out)
			if out.StdoutOffset+out.StderrOffset == int64(5*k) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %d lines of input, output is %q / %q", k, out.Stdout, out.Stderr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want := "out1\nerr1\nout2\nerr2\nout3\nerr3\n"
	var out api.ProcessOutput
	g.call(t, "GET", "/processes/alt/output?chunks=true&stdout_offset=0", nil, &out)
	var got strings.Builder
	var last time.Time
	for _, c := range out.Chunks {
		data := out.Stdout
		if c.Stream == api.EventStderr {
			data = out.Stderr
		}
		got.Write(data[c.Offset : c.Offset+c.Length])
		if c.Time.Before(last) || c.Time.IsZero() {
			t.Errorf("chunk times go back: %+v", out.Chunks)
		}
		last = c.Time
	}
	if got.String() != want {
		t.Errorf("chunks put together: %q, want %q (chunks %+v)", got.String(), want, out.Chunks)
	}
	var plain api.ProcessOutput
	g.call(t, "GET", "/processes/alt/output", nil, &plain)
	if plain.Chunks != nil || string(plain.Stdout) != "out1\nout2\nout3\n" {
		t.Errorf("without chunks=true: %+v", plain)
	}
	g.call(t, "POST", "/processes/alt/stdin?eof=true", nil, nil)
	resp, err := g.client.Get("http://guest/processes/alt/stream?chunks=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got.Reset()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev api.ExecEvent
		json.Unmarshal(sc.Bytes(), &ev)
		if ev.Type == api.EventStdout || ev.Type == api.EventStderr {
			if ev.Time == nil {
				t.Fatalf("event without a time: %s", sc.Bytes())
			}
			got.Write(ev.Data)
		}
	}
	if got.String() != want {
		t.Errorf("stream with chunks: %q, want %q", got.String(), want)
	}
}
