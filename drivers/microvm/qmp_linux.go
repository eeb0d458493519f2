package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// QEMU's machine protocol (QMP): each VM's QEMU serves it on a unix
// socket in the sandbox's run directory (qmp.sock), which the driver
// listens on and hands to QEMU as a descriptor, as it does the agent's.
// The driver connects only for a checkpoint (stop, migrate, cont or quit)
// and a restore (waiting for the incoming state to be loaded); one
// command at a time, events skipped.

// qmpConn is one connection to a QEMU's QMP socket.
type qmpConn struct {
	c  *net.UnixConn
	rd *bufio.Reader
}

// dialQMP connects to the QMP socket sock and negotiates capabilities.
func dialQMP(ctx context.Context, sock string) (*qmpConn, error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, fmt.Errorf("qemu's control socket: %w", err)
	}
	q := &qmpConn{c: c.(*net.UnixConn), rd: bufio.NewReaderSize(c, 64<<10)}
	stop := context.AfterFunc(ctx, func() { _ = q.c.SetDeadline(time.Now()) })
	defer stop()
	// The greeting, then the capabilities' negotiation.
	if _, err := q.read(); err != nil {
		q.Close()
		return nil, fmt.Errorf("qemu's control socket: greeting: %w", err)
	}
	if _, err := q.exec(ctx, "qmp_capabilities", nil, nil); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmpConn) Close() error { return q.c.Close() }

type qmpReply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string `json:"event"`
	QMP   any    `json:"QMP"`
}

// read reads one message.
func (q *qmpConn) read() (*qmpReply, error) {
	line, err := q.rd.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	var r qmpReply
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("qemu's control socket: %q: %w", line, err)
	}
	return &r, nil
}

// exec runs command with args and returns its result; file, when set,
// goes with the command as a descriptor (SCM_RIGHTS), as getfd wants.
func (q *qmpConn) exec(ctx context.Context, command string, args any, file *os.File) (json.RawMessage, error) {
	stop := context.AfterFunc(ctx, func() { _ = q.c.SetDeadline(time.Now()) })
	defer stop()
	msg := map[string]any{"execute": command}
	if args != nil {
		msg["arguments"] = args
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	var oob []byte
	if file != nil {
		oob = unix.UnixRights(int(file.Fd()))
	}
	if _, _, err := q.c.WriteMsgUnix(append(b, '\n'), oob, nil); err != nil {
		return nil, fmt.Errorf("qemu %s: %w", command, err)
	}
	for {
		r, err := q.read()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("qemu %s: %w", command, err)
		}
		switch {
		case r.Event != "" || r.QMP != nil:
			continue
		case r.Error != nil:
			return nil, fmt.Errorf("qemu %s: %s: %s", command, r.Error.Class, r.Error.Desc)
		}
		return r.Return, nil
	}
}

// status is the VM's run state (running, paused, inmigrate, postmigrate…).
func (q *qmpConn) status(ctx context.Context) (string, error) {
	raw, err := q.exec(ctx, "query-status", nil, nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", err
	}
	return st.Status, nil
}

// setIgnoreShared sets the migration capability x-ignore-shared: RAM
// QEMU maps shared from a file is left out of the state saved (the
// driver keeps the file), and on a load is taken as it is.
func (q *qmpConn) setIgnoreShared(ctx context.Context, on bool) error {
	_, err := q.exec(ctx, "migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": on}}}, nil)
	return err
}

// migrateTo saves the VM's state (it should be stopped) into f, a file
// QEMU gets as a descriptor (its sandbox forbids it to spawn a helper or
// open a path), and waits until the migration is done; ignoreShared
// leaves out RAM mapped shared (setIgnoreShared).
func (q *qmpConn) migrateTo(ctx context.Context, f *os.File, ignoreShared bool) error {
	if err := q.setIgnoreShared(ctx, ignoreShared); err != nil {
		return err
	}
	// The default bandwidth (128 MiB/s) is for a network; a file takes
	// what the disk gives.
	if _, err := q.exec(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(64) << 30}, nil); err != nil {
		return err
	}
	if _, err := q.exec(ctx, "getfd", map[string]any{"fdname": "state"}, f); err != nil {
		return err
	}
	if _, err := q.exec(ctx, "migrate", map[string]any{"uri": "fd:state"}, nil); err != nil {
		return err
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		raw, err := q.exec(ctx, "query-migrate", nil, nil)
		if err != nil {
			return err
		}
		var st struct {
			Status string `json:"status"`
			Error  string `json:"error-desc"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("qemu: saving the VM's state %s: %s", st.Status, st.Error)
		}
		select {
		case <-ctx.Done():
			_, _ = q.exec(context.WithoutCancel(ctx), "migrate_cancel", nil, nil)
			return fmt.Errorf("qemu: saving the VM's state: %w", ctx.Err())
		case <-time.After(delay):
		}
	}
}

// startIncoming has a QEMU started with `-incoming defer` load the
// saved state from its descriptor fd, with the capability x-ignore-shared
// as the state was saved (a source's migration capabilities must be the
// destination's).
func startIncoming(ctx context.Context, sock string, fd int, ignoreShared bool) error {
	q, err := dialQMP(ctx, sock)
	if err != nil {
		return err
	}
	defer q.Close()
	if err := q.setIgnoreShared(ctx, ignoreShared); err != nil {
		return err
	}
	_, err = q.exec(ctx, "migrate-incoming", map[string]any{"uri": fmt.Sprintf("fd:%d", fd)}, nil)
	return err
}

// runIncoming waits until QEMU has loaded an incoming state and runs
// the VM: a state saved from a stopped VM (as checkpoints are) loads
// paused, and is continued here.
func runIncoming(ctx context.Context, sock string, exited <-chan struct{}) error {
	return waitStatus(ctx, sock, "running", exited)
}

// waitStatus polls the VM's run state until it is want, the VM exits
// (exited closes) or ctx ends; a VM paused (not in an incoming
// migration) is continued when want is running.
func waitStatus(ctx context.Context, sock string, want string, exited <-chan struct{}) error {
	var q *qmpConn
	var err error
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		if q == nil {
			q, err = dialQMP(ctx, sock)
		}
		var st string
		if err == nil {
			if st, err = q.status(ctx); err == nil && st == want {
				q.Close()
				return nil
			}
			if err == nil && st == "paused" && want == "running" {
				_, err = q.exec(ctx, "cont", nil, nil)
				continue
			}
		}
		if err != nil && q != nil {
			q.Close()
			q = nil
		}
		select {
		case <-exited:
			if q != nil {
				q.Close()
			}
			return errors.New("qemu exited")
		case <-ctx.Done():
			if q != nil {
				q.Close()
			}
			return fmt.Errorf("the VM is %q, not %s (%v): %w", st, want, err, ctx.Err())
		case <-time.After(delay):
		}
	}
}
