package code

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-zeromq/zmq4"
)

// fakeSpawner runs fakeKernels in the test process: the Manager's side
// of the protocol is real (sockets, signatures, routing), the kernel is a
// small scripted one.
type fakeSpawner struct {
	t     *testing.T
	mu    sync.Mutex
	procs []*fakeProc
}

func (f *fakeSpawner) UserIDs(string) (int, int, error) { return os.Getuid(), os.Getgid(), nil }

func (f *fakeSpawner) Spawn(sp SpawnSpec) (Proc, error) {
	p := &fakeProc{done: make(chan struct{}), intr: make(chan struct{}, 8), pid: 1000 + len(f.procs)}
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	go p.serve(f.t, sp.Argv[len(sp.Argv)-1])
	return p, nil
}

type fakeProc struct {
	pid  int
	done chan struct{}
	intr chan struct{}
	once sync.Once
	mu   sync.Mutex
	why  string
}

func (p *fakeProc) Pid() int              { return p.pid }
func (p *fakeProc) Done() <-chan struct{} { return p.done }
func (p *fakeProc) Interrupt() error      { p.intr <- struct{}{}; return nil }
func (p *fakeProc) Kill()                 { p.exit("killed by SIGKILL") }
func (p *fakeProc) ExitReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.why
}
func (p *fakeProc) exit(why string) {
	p.once.Do(func() {
		p.mu.Lock()
		p.why = why
		p.mu.Unlock()
		close(p.done)
	})
}

// serve is the fake kernel: it binds the connection file's sockets and
// answers kernel_info, execute (scripted by the code) and shutdown.
func (p *fakeProc) serve(t *testing.T, connFile string) {
	b, err := os.ReadFile(connFile)
	if err != nil {
		t.Errorf("fake kernel: %v", err)
		p.exit("exit code 1")
		return
	}
	var ci connInfo
	json.Unmarshal(b, &ci)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ep := func(port int) string { return "ipc://" + ci.IP + "-" + strconv.Itoa(port) }
	shell, control, iopub := zmq4.NewRouter(ctx), zmq4.NewRouter(ctx), zmq4.NewPub(ctx)
	for s, port := range map[zmq4.Socket]int{shell: ci.ShellPort, control: ci.ControlPort, iopub: ci.IOPubPort} {
		if err := s.Listen(ep(port)); err != nil {
			t.Errorf("fake kernel: listen: %v", err)
			p.exit("exit code 1")
			return
		}
	}
	defer shell.Close()
	defer control.Close()
	defer iopub.Close()
	sig := signer{key: []byte(ci.Key)}
	count := 0
	send := func(s zmq4.Socket, ident []byte, parent header, typ string, content any) {
		h, _ := json.Marshal(header{MsgID: newID(), Session: "fake", MsgType: typ, Version: protocolVersion})
		ph, _ := json.Marshal(parent)
		c, _ := json.Marshal(content)
		frames := [][]byte{}
		if ident != nil {
			frames = append(frames, ident)
		}
		frames = append(frames, delimiter, sig.sign(h, ph, []byte("{}"), c), h, ph, []byte("{}"), c)
		s.Send(zmq4.NewMsgFrom(frames...))
	}
	pub := func(parent header, typ string, content any) { send(iopub, nil, parent, typ, content) }
	go func() { // control: shutdown
		for {
			raw, err := control.Recv()
			if err != nil {
				return
			}
			m, err := sig.decode(raw.Frames)
			if err == nil && m.Header.MsgType == "shutdown_request" {
				p.exit("exit code 0")
				return
			}
		}
	}()
	msgs := make(chan zmq4.Msg)
	go func() {
		for {
			raw, err := shell.Recv()
			if err != nil {
				return
			}
			select {
			case msgs <- raw:
			case <-p.done:
				return
			}
		}
	}()
	for {
		var raw zmq4.Msg
		select {
		case raw = <-msgs:
		case <-p.done:
			return
		}
		m, err := sig.decode(raw.Frames)
		if err != nil {
			continue // unsigned: dropped, as a kernel does
		}
		ident := raw.Frames[0]
		pub(m.Header, "status", map[string]string{"execution_state": "busy"})
		switch m.Header.MsgType {
		case "kernel_info_request":
			send(shell, ident, m.Header, "kernel_info_reply", map[string]any{"status": "ok", "protocol_version": protocolVersion})
		case "execute_request":
			var req struct {
				Code   string `json:"code"`
				Silent bool   `json:"silent"`
			}
			json.Unmarshal(m.Content, &req)
			status := "ok"
			if !req.Silent {
				count++
				pub(m.Header, "execute_input", map[string]any{"code": req.Code, "execution_count": count})
				switch {
				case req.Code == "1+1":
					pub(m.Header, "execute_result", map[string]any{"execution_count": count, "data": map[string]any{"text/plain": "2"}})
				case strings.HasPrefix(req.Code, "print"):
					pub(m.Header, "stream", map[string]string{"name": "stdout", "text": "a\n"})
					pub(m.Header, "stream", map[string]string{"name": "stderr", "text": "b\n"})
					pub(m.Header, "display_data", map[string]any{"data": map[string]any{"image/png": "iVBO\nRw==", "text/html": "<b>x</b>", "application/x-custom": map[string]int{"n": 1}}})
					pub(m.Header, "execute_result", map[string]any{"execution_count": count, "data": map[string]any{"text/plain": "'done'", "application/json": map[string]int{"k": 2}}})
				case req.Code == "raise":
					status = "error"
					pub(m.Header, "error", map[string]any{"ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": []string{"\x1b[0;31mTraceback\x1b[0m", "line 1"}})
				case req.Code == "sleep":
					<-p.intr
					status = "error"
					pub(m.Header, "error", map[string]any{"ename": "KeyboardInterrupt", "evalue": "", "traceback": []string{"KeyboardInterrupt"}})
				case req.Code == "hang":
					<-p.done // ignores interrupts
					return
				case req.Code == "die":
					p.exit("killed by SIGKILL (out of memory: the sandbox's memory limit was reached)")
					return
				}
			}
			pub(m.Header, "status", map[string]string{"execution_state": "idle"})
			send(shell, ident, m.Header, "execute_reply", map[string]any{"status": status, "execution_count": count})
			continue
		}
		pub(m.Header, "status", map[string]string{"execution_state": "idle"})
	}
}
