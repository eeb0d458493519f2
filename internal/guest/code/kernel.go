package code

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Spawner starts kernel processes for the Manager: the guest agent owns
// every child (its reaper waits for them), so the Manager never forks.
type Spawner interface {
	// Spawn starts argv as a background process of the sandbox, in cwd as
	// user (the sandbox's default when ""), with env added to the
	// sandbox's default environment.
	Spawn(s SpawnSpec) (Proc, error)
	// UserIDs resolves user ("" is the sandbox's default user).
	UserIDs(user string) (uid, gid int, err error)
}

// SpawnSpec is a kernel process to start.
type SpawnSpec struct {
	Argv []string
	Env  map[string]string
	Cwd  string
	User string
	Tag  string
}

// Proc is a started kernel process.
type Proc interface {
	Pid() int
	// Done closes when the process has ended.
	Done() <-chan struct{}
	// ExitReason says how it ended ("exit code 1", "signal SIGKILL (out of
	// memory)") with the tail of its stderr; valid after Done.
	ExitReason() string
	// Interrupt sends SIGINT to the process group.
	Interrupt() error
	// Kill kills the process and everything it started.
	Kill()
}

// kernelStartTimeout bounds a kernel's start to its first reply.
const kernelStartTimeout = 120 * time.Second

// kernel is one running kernel process and our three sockets to it
// (shell and control DEALERs, iopub SUB). Heartbeats are not used: the
// agent is the kernel's parent and sees it end.
type kernel struct {
	spec    kernelSpec
	proc    Proc
	sig     signer
	session string
	dir     string
	started time.Time

	ctx     context.Context
	cancel  context.CancelFunc
	shell   zmq4.Socket
	control zmq4.Socket
	iopub   zmq4.Socket

	// mu guards replies and subs.
	mu sync.Mutex
	// replies: shell/control replies wanted, by the request's msg_id.
	replies map[string]chan *message
	// subs: iopub messages wanted, by the parent request's msg_id.
	subs map[string]*sub
	// iopubSeen closes on the first iopub message (the SUB is live).
	iopubSeen chan struct{}
	iopubOnce sync.Once
}

// sub receives the iopub messages of one request.
type sub struct {
	ch   chan *message
	gone chan struct{}
}

// connInfo is a kernel connection file.
type connInfo struct {
	Transport       string `json:"transport"`
	IP              string `json:"ip"`
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	Key             string `json:"key"`
	SignatureScheme string `json:"signature_scheme"`
	KernelName      string `json:"kernel_name"`
}

// startKernel writes a connection file (ipc transport: unix sockets in a
// directory only the kernel's user can enter, nothing on TCP), starts the
// kernel and connects to it. It returns once the kernel answered a
// kernel_info_request and its iopub delivers.
func startKernel(ctx context.Context, sp Spawner, spec kernelSpec, base, id string, cwd, user string, env map[string]string) (_ *kernel, err error) {
	uid, gid, err := sp.UserIDs(user)
	if err != nil {
		return nil, err
	}
	var kb [32]byte
	rand.Read(kb[:])
	key := hex.EncodeToString(kb[:])
	dir, err := os.MkdirTemp(base, "k")
	if err != nil {
		return nil, fmt.Errorf("making the kernel's socket directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, fmt.Errorf("giving the kernel's socket directory to uid %d: %w", uid, err)
	}
	ci := connInfo{Transport: "ipc", IP: filepath.Join(dir, "s"), ShellPort: 1, IOPubPort: 2, StdinPort: 3, ControlPort: 4, HBPort: 5,
		Key: key, SignatureScheme: "hmac-sha256", KernelName: spec.Name}
	b, _ := json.Marshal(ci)
	connFile := filepath.Join(dir, "connection.json")
	if err := os.WriteFile(connFile, b, 0o600); err != nil {
		return nil, err
	}
	if err := os.Chown(connFile, uid, gid); err != nil {
		return nil, err
	}
	// pydevd (ipykernel's debugger) warns on every start without this,
	// which would bury a dying kernel's own last words.
	kenv := map[string]string{"PYDEVD_DISABLE_FILE_VALIDATION": "1"}
	for k, v := range spec.Env {
		kenv[k] = v
	}
	for k, v := range env {
		kenv[k] = v
	}
	proc, err := sp.Spawn(SpawnSpec{Argv: spec.argv(connFile), Env: kenv, Cwd: cwd, User: user, Tag: "kernel:" + id})
	if err != nil {
		return nil, fmt.Errorf("starting kernel %s: %w", spec, err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	k := &kernel{spec: spec, proc: proc, sig: signer{key: []byte(key)}, session: newID(), dir: dir, started: time.Now(),
		ctx: kctx, cancel: cancel, replies: map[string]chan *message{}, subs: map[string]*sub{}, iopubSeen: make(chan struct{})}
	defer func() {
		if err != nil {
			k.close()
		}
	}()
	go func() {
		select {
		case <-proc.Done():
			k.cancel()
		case <-kctx.Done():
		}
	}()
	if err := k.connect(ctx, ci); err != nil {
		return nil, err
	}
	if err := k.waitReady(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// connect waits for the kernel's sockets to appear, then dials them.
func (k *kernel) connect(ctx context.Context, ci connInfo) error {
	ctx, cancel := context.WithTimeout(ctx, kernelStartTimeout)
	defer cancel()
	paths := []string{fmt.Sprintf("%s-%d", ci.IP, ci.ShellPort), fmt.Sprintf("%s-%d", ci.IP, ci.IOPubPort), fmt.Sprintf("%s-%d", ci.IP, ci.ControlPort)}
	for _, p := range paths {
		for {
			if _, err := os.Stat(p); err == nil {
				break
			}
			if err := k.startErr(ctx); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	id := zmq4.SocketIdentity(k.session)
	k.shell = zmq4.NewDealer(k.ctx, zmq4.WithID(id), zmq4.WithDialerRetry(50*time.Millisecond), zmq4.WithDialerMaxRetries(100))
	k.control = zmq4.NewDealer(k.ctx, zmq4.WithID(id), zmq4.WithDialerRetry(50*time.Millisecond), zmq4.WithDialerMaxRetries(100))
	k.iopub = zmq4.NewSub(k.ctx, zmq4.WithDialerRetry(50*time.Millisecond), zmq4.WithDialerMaxRetries(100))
	for i, s := range []zmq4.Socket{k.shell, k.iopub, k.control} {
		if err := s.Dial("ipc://" + paths[i]); err != nil {
			return fmt.Errorf("connecting to kernel %s: %w", k.spec, err)
		}
	}
	if err := k.iopub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return err
	}
	go k.readLoop(k.shell, false)
	go k.readLoop(k.control, false)
	go k.readLoop(k.iopub, true)
	return nil
}

// startErr reports why a start cannot go on: ctx ended or the kernel
// exited.
func (k *kernel) startErr(ctx context.Context) error {
	select {
	case <-k.proc.Done():
		return fmt.Errorf("kernel %s exited while starting: %s", k.spec, k.proc.ExitReason())
	default:
	}
	if ctx.Err() != nil {
		return fmt.Errorf("kernel %s did not start within %v: %w", k.spec, kernelStartTimeout, ctx.Err())
	}
	return nil
}

// waitReady probes with kernel_info_request every 200 ms until one is
// answered and an iopub message arrived (a SUB needs a moment to
// subscribe: messages sent before are lost).
func (k *kernel) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, kernelStartTimeout)
	defer cancel()
	got := make(chan *message, 1024)
	var ids []string
	defer func() {
		k.mu.Lock()
		for _, id := range ids {
			delete(k.replies, id)
		}
		k.mu.Unlock()
	}()
	replied := false
	for {
		id, err := k.send(k.shell, "kernel_info_request", struct{}{})
		if err != nil {
			return err
		}
		k.mu.Lock()
		k.replies[id] = got
		k.mu.Unlock()
		ids = append(ids, id)
		t := time.NewTimer(200 * time.Millisecond)
	wait:
		for {
			select {
			case <-got:
				replied = true
			case <-k.iopubSeen:
				if replied {
					t.Stop()
					return nil
				}
			case <-t.C:
				break wait
			case <-k.ctx.Done():
				t.Stop()
				return k.startErr(ctx)
			case <-ctx.Done():
				t.Stop()
				return k.startErr(ctx)
			}
			if replied {
				select {
				case <-k.iopubSeen:
					t.Stop()
					return nil
				default:
				}
			}
		}
	}
}

// send sends a new message on s and returns its msg_id.
func (k *kernel) send(s zmq4.Socket, msgType string, content any) (string, error) {
	frames, id, err := k.sig.encode(k.session, msgType, content)
	if err != nil {
		return "", err
	}
	if err := s.Send(zmq4.NewMsgFrom(frames...)); err != nil {
		return "", fmt.Errorf("sending %s to kernel %s: %w", msgType, k.spec, err)
	}
	return id, nil
}

// request sends a message and waits for its reply on the same socket.
func (k *kernel) request(ctx context.Context, s zmq4.Socket, msgType string, content any) (*message, error) {
	ch := make(chan *message, 1)
	frames, id, err := k.sig.encode(k.session, msgType, content)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.replies[id] = ch
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		delete(k.replies, id)
		k.mu.Unlock()
	}()
	if err := s.Send(zmq4.NewMsgFrom(frames...)); err != nil {
		return nil, err
	}
	select {
	case m := <-ch:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-k.ctx.Done():
		return nil, errors.New("kernel ended")
	}
}

// subscribe registers for the iopub messages and the shell reply of a
// request about to be sent with msgID.
func (k *kernel) subscribe(msgID string) (*sub, chan *message) {
	s := &sub{ch: make(chan *message, 256), gone: make(chan struct{})}
	reply := make(chan *message, 1)
	k.mu.Lock()
	k.subs[msgID] = s
	k.replies[msgID] = reply
	k.mu.Unlock()
	return s, reply
}

func (k *kernel) unsubscribe(msgID string, s *sub) {
	k.mu.Lock()
	delete(k.subs, msgID)
	delete(k.replies, msgID)
	k.mu.Unlock()
	close(s.gone)
}

// readLoop routes the messages of one socket until it closes.
func (k *kernel) readLoop(s zmq4.Socket, iopub bool) {
	for {
		raw, err := s.Recv()
		if err != nil {
			if k.ctx.Err() == nil {
				k.cancel() // the transport is gone: fail what waits on it
			}
			return
		}
		m, err := k.sig.decode(raw.Frames)
		if err != nil {
			continue // unsigned or malformed: dropped
		}
		k.mu.Lock()
		if iopub {
			k.iopubOnce.Do(func() { close(k.iopubSeen) })
			sb := k.subs[m.Parent.MsgID]
			k.mu.Unlock()
			if sb != nil {
				select {
				case sb.ch <- m:
				case <-sb.gone:
				case <-k.ctx.Done():
					return
				}
			}
			continue
		}
		ch := k.replies[m.Parent.MsgID]
		k.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m:
			default:
			}
		}
	}
}

// interrupt interrupts the running cell, by the kernelspec's mode.
func (k *kernel) interrupt() error {
	if k.spec.InterruptMode == "message" {
		_, err := k.send(k.control, "interrupt_request", struct{}{})
		return err
	}
	return k.proc.Interrupt()
}

// dead reports whether the kernel's process ended or its sockets failed.
func (k *kernel) dead() bool { return k.ctx.Err() != nil }

// shutdown asks the kernel to exit, kills it after grace, and closes.
func (k *kernel) shutdown(grace time.Duration) {
	if !k.dead() && grace > 0 {
		k.send(k.control, "shutdown_request", map[string]bool{"restart": false})
		t := time.NewTimer(grace)
		select {
		case <-k.proc.Done():
		case <-t.C:
		}
		t.Stop()
	}
	k.close()
}

// close kills the process, closes the sockets and removes the directory.
func (k *kernel) close() {
	k.proc.Kill()
	<-k.proc.Done()
	k.cancel()
	for _, s := range []zmq4.Socket{k.shell, k.control, k.iopub} {
		if s != nil {
			s.Close()
		}
	}
	os.RemoveAll(k.dir)
}

func zmqMsg(frames [][]byte) zmq4.Msg { return zmq4.NewMsgFrom(frames...) }
