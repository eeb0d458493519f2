package guest

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

func TestStreamOrderAndKeepalive(t *testing.T) {
	g := newTestGuest(t, Config{KeepaliveInterval: 50 * time.Millisecond})
	st := g.openStream(t, api.ExecRequest{Shell: "echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three; exit 4"})
	if ct := st.resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q", ct)
	}
	evs := st.all(t)
	if evs[0].Type != api.EventStart || evs[0].Pid <= 0 {
		t.Fatalf("first event %+v, want start with a pid", evs[0])
	}
	var order []string
	keepalives := 0
	for _, ev := range evs {
		switch ev.Type {
		case api.EventStdout, api.EventStderr:
			order = append(order, ev.Type+":"+strings.TrimSpace(string(ev.Data)))
		case api.EventKeepalive:
			keepalives++
		}
	}
	if got, want := strings.Join(order, " "), "stdout:one stderr:two stdout:three"; got != want {
		t.Errorf("output order %q, want %q", got, want)
	}
	if keepalives < 2 {
		t.Errorf("%d keepalives over 600 ms of silence at a 50 ms interval, want several", keepalives)
	}
	_, _, last := collect(t, evs)
	if last.Type != api.EventExit || last.ExitCode == nil || *last.ExitCode != 4 || last.DurationMs < 500 {
		t.Errorf("last event %+v, want exit 4 after ~600 ms", last)
	}
}

func TestStreamStdin(t *testing.T) {
	g := newTestGuest(t, Config{})
	st := g.openStream(t, api.ExecRequest{Shell: "while read l; do echo got:$l; done; echo end", StdinStream: true})
	if ev, _ := st.next(t); ev.Type != api.EventStart {
		t.Fatalf("first event %+v", ev)
	}
	// Interactive: each line comes back before the next is sent.
	for i := range 3 {
		st.send(t, api.StdinFrame{Data: fmt.Appendf(nil, "line%d\n", i)})
		ev, ok := st.next(t)
		if !ok || ev.Type != api.EventStdout || string(ev.Data) != fmt.Sprintf("got:line%d\n", i) {
			t.Fatalf("after line %d: %+v", i, ev)
		}
	}
	st.send(t, api.StdinFrame{EOF: true})
	out, _, last := collect(t, st.all(t))
	if string(out) != "end\n" || last.Type != api.EventExit || *last.ExitCode != 0 {
		t.Errorf("after EOF: out %q, last %+v", out, last)
	}
}

func TestStreamBinaryAndCap(t *testing.T) {
	g := newTestGuest(t, Config{})
	want := make([]byte, 50<<20)
	rand.Read(want)
	f := filepath.Join(t.TempDir(), "blob")
	os.WriteFile(f, want, 0o644)
	t.Run("50 MiB unlimited", func(t *testing.T) {
		st := g.openStream(t, api.ExecRequest{Cmd: []string{"cat", f}})
		out, _, last := collect(t, st.all(t))
		if !bytes.Equal(out, want) || last.Truncated {
			t.Errorf("got %d bytes (truncated %v), want the file's %d", len(out), last.Truncated, len(want))
		}
	})
	t.Run("capped", func(t *testing.T) {
		st := g.openStream(t, api.ExecRequest{Cmd: []string{"cat", f}, MaxOutputBytes: 100000})
		out, _, last := collect(t, st.all(t))
		if !bytes.Equal(out, want[:100000]) || !last.Truncated || *last.ExitCode != 0 {
			t.Errorf("got %d bytes, truncated %v, exit %v; want the first 100000, true, 0", len(out), last.Truncated, *last.ExitCode)
		}
	})
}

// TestStreamFrames: asked for api's binary frames, the stream carries the
// same events, output as raw bytes (50 MiB of random bytes exact, a cap
// as with NDJSON, stdout and stderr apart, a program not found).
func TestStreamFrames(t *testing.T) {
	g := newTestGuest(t, Config{})
	want := make([]byte, 50<<20)
	rand.Read(want)
	f := filepath.Join(t.TempDir(), "blob")
	os.WriteFile(f, want, 0o644)
	st := g.openFramedStream(t, api.ExecRequest{Cmd: []string{"cat", f}})
	evs := st.all(t)
	if evs[0].Type != api.EventStart || evs[0].Pid <= 0 {
		t.Errorf("first event %+v, want start", evs[0])
	}
	out, _, last := collect(t, evs)
	if !bytes.Equal(out, want) || last.Type != api.EventExit || *last.ExitCode != 0 {
		t.Errorf("got %d bytes, last %+v; want the file's %d and exit 0", len(out), last, len(want))
	}
	st = g.openFramedStream(t, api.ExecRequest{Cmd: []string{"cat", f}, MaxOutputBytes: 100000})
	if out, _, last = collect(t, st.all(t)); !bytes.Equal(out, want[:100000]) || !last.Truncated {
		t.Errorf("capped: %d bytes, truncated %v", len(out), last.Truncated)
	}
	st = g.openFramedStream(t, api.ExecRequest{Shell: "echo out; echo err >&2; exit 3"})
	stdout, stderr, last := collect(t, st.all(t))
	if string(stdout) != "out\n" || string(stderr) != "err\n" || *last.ExitCode != 3 {
		t.Errorf("stdout %q, stderr %q, last %+v", stdout, stderr, last)
	}
	st = g.openFramedStream(t, api.ExecRequest{Cmd: []string{"no-such-program-here"}})
	_, stderr, last = collect(t, st.all(t))
	if !strings.Contains(string(stderr), "not found") || *last.ExitCode != 127 {
		t.Errorf("not found: stderr %q, last %+v", stderr, last)
	}
	// An Accept that lists frames among others gets them too.
	st = g.openStreamAccept(t, api.ExecRequest{Shell: "true"}, "application/x-ndjson;q=0.9, "+api.FramesContentType)
	if ct := st.resp.Header.Get("Content-Type"); ct != api.FramesContentType {
		t.Errorf("Content-Type %q", ct)
	}
}

func TestStreamNotFoundAndErrors(t *testing.T) {
	g := newTestGuest(t, Config{})
	t.Run("missing program", func(t *testing.T) {
		st := g.openStream(t, api.ExecRequest{Cmd: []string{"no-such-program-xyz"}})
		_, errOut, last := collect(t, st.all(t))
		if *last.ExitCode != 127 || !strings.Contains(string(errOut), "command not found") {
			t.Errorf("got exit %d stderr %q, want 127 and a message", *last.ExitCode, errOut)
		}
	})
	t.Run("invalid request", func(t *testing.T) {
		st := g.openStream(t, api.ExecRequest{})
		if st.resp.StatusCode != 400 {
			t.Errorf("status %d, want 400", st.resp.StatusCode)
		}
	})
	t.Run("bad stdin frame", func(t *testing.T) {
		st := g.openStream(t, api.ExecRequest{Cmd: []string{"sleep", "30"}, StdinStream: true})
		st.next(t)
		st.in.Write([]byte("{not json\n"))
		_, _, last := collect(t, st.all(t))
		if last.Type != api.EventError || last.Error == nil || last.Error.Code != "invalid_argument" {
			t.Errorf("last %+v, want an invalid_argument error event", last)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		st := g.openStream(t, api.ExecRequest{Shell: "trap '' TERM; sleep 30", TimeoutMs: 200})
		_, _, last := collect(t, st.all(t))
		if !last.TimedOut || last.Signal != "SIGKILL" || *last.ExitCode != 137 {
			t.Errorf("last %+v, want timed out by SIGKILL", last)
		}
	})
}

func TestStreamClientGoneKillsTree(t *testing.T) {
	g := newTestGuest(t, Config{})
	dir := t.TempDir()
	st := g.openStream(t, api.ExecRequest{Shell: fmt.Sprintf("sleep 300 & echo $! > %s/pid; echo ready; wait", dir)})
	for {
		ev, ok := st.next(t)
		if !ok {
			t.Fatal("stream ended early")
		}
		if ev.Type == api.EventStdout {
			break
		}
	}
	st.close() // the client goes away
	b, _ := os.ReadFile(filepath.Join(dir, "pid"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}
