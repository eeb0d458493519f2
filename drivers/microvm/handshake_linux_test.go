package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/agentbox/agentbox/internal/guest/proto"
)

// TestDialSessionHandshake plays the agent's side of the port's races
// against dialSession, one connection after another as QEMU's socket
// takes them, and checks that the session it returns is the one the
// agent serves.
func TestDialSessionHandshake(t *testing.T) {
	ackIt := func(c net.Conn, hellos []proto.VMHello) bool {
		write(c, proto.VMAckFor(hellos[len(hellos)-1].Nonce))
		return true
	}
	tests := []struct {
		name  string
		steps []agentStep
	}{
		{"ack at once", []agentStep{ackIt}},
		{
			// A loaded restored VM: the agent answers the first hello
			// after the host gave up on it, and the ack, written while no
			// host was connected, reaches the second connection. The
			// session that ack starts reads the second hello as frames
			// and fails, so the second hello is never acked: the host
			// must skip the old ack and say hello a third time.
			"late ack of an older hello",
			[]agentStep{
				func(c net.Conn, _ []proto.VMHello) bool {
					waitClosed(c)
					return false
				},
				func(c net.Conn, hellos []proto.VMHello) bool {
					write(c, "old frames"+proto.VMAckFor(hellos[0].Nonce))
					waitClosed(c)
					return false
				},
				ackIt,
			},
		},
		{
			// The connection ends before any ack: the host connects
			// again rather than failing.
			"closed before the ack",
			[]agentStep{
				func(c net.Conn, _ []proto.VMHello) bool { return false },
				ackIt,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "agent.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			served := make(chan string, 1)
			agentDone := make(chan error, 1)
			go func() { agentDone <- fakeAgent(l, tt.steps, served) }()
			defer func() {
				l.Close()
				if err := <-agentDone; err != nil {
					t.Errorf("agent: %v", err)
				}
			}()

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			hello := &proto.VMHello{Pids: 7}
			sess, err := dialSession(ctx, sock, hello, 50*time.Millisecond)
			if err != nil {
				t.Fatalf("dialSession: %v", err)
			}
			defer sess.Close()
			select {
			case got := <-served:
				if got != hello.Nonce {
					t.Fatalf("the agent serves the session of hello %q, the host's is %q", got, hello.Nonce)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the host started a session that the agent does not serve (it took an ack that was not its hello's)")
			}
			st, err := sess.Open()
			if err != nil {
				t.Fatal(err)
			}
			st.SetDeadline(time.Now().Add(5 * time.Second))
			if err := write(st, "ping\n"); err != nil {
				t.Fatal(err)
			}
			got, err := bufio.NewReader(st).ReadString('\n')
			if want := "pong\n"; got != want || err != nil {
				t.Fatalf("over the session: got %q (%v), want %q", got, err, want)
			}
		})
	}
}

// agentStep is what the agent does on one host connection: it gets that
// connection's hello and the hellos before it, and says whether the agent
// serves the session on it (its answers written).
type agentStep func(c net.Conn, hellos []proto.VMHello) (serve bool)

// fakeAgent accepts one connection per step, reads its hello, runs the
// step and, when the step serves, answers one stream's "ping" with
// "pong" over a yamux server on that connection.
func fakeAgent(l net.Listener, steps []agentStep, served chan<- string) error {
	defer close(served)
	var hellos []proto.VMHello
	for _, st := range steps {
		c, err := l.Accept()
		if err != nil {
			return nil // the test ended
		}
		defer c.Close()
		h, err := readHello(c)
		if err != nil {
			return fmt.Errorf("reading the hello: %w", err)
		}
		hellos = append(hellos, h)
		if !st(c, hellos) {
			c.Close()
			continue
		}
		served <- h.Nonce
		cfg := yamux.DefaultConfig()
		cfg.LogOutput = io.Discard
		sess, err := yamux.Server(c, cfg)
		if err != nil {
			return err
		}
		defer sess.Close()
		s, err := sess.Accept()
		if err != nil {
			return err
		}
		if line, _ := bufio.NewReader(s).ReadString('\n'); line == "ping\n" {
			// Its error is the host's to see: the host may read the
			// pong and close before the write returns.
			_, _ = io.WriteString(s, "pong\n")
		}
		<-sess.CloseChan()
		return nil
	}
	return fmt.Errorf("the host connected %d times and took no ack it was given", len(steps))
}

// readHello reads a hello line byte by byte (nothing after it).
func readHello(c net.Conn) (proto.VMHello, error) {
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := c.Read(b); err != nil {
			return proto.VMHello{}, err
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	var h proto.VMHello
	rest, ok := strings.CutPrefix(string(line), proto.VMHelloPrefix)
	if !ok {
		return h, io.ErrUnexpectedEOF
	}
	return h, json.Unmarshal([]byte(rest), &h)
}

// waitClosed returns when the host has closed c.
func waitClosed(c net.Conn) { _, _ = io.Copy(io.Discard, c) }

func write(w io.Writer, s string) error {
	_, err := io.WriteString(w, s)
	return err
}
