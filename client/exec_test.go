package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// catServer answers /exec/stream like `cat` would: each stdin frame comes
// back at once as a stdout event, so a client that waits for the echo
// before sending more proves the stream is full duplex.
func catServer(t *testing.T) *Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec/stream", func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Errorf("EnableFullDuplex: %v", err)
		}
		br := bufio.NewReader(r.Body)
		// Like the guest, take the whole request body before the handler
		// ends: a server that closes with stdin unread resets the
		// connection, and the client may lose the answer.
		defer io.Copy(io.Discard, br)
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Errorf("reading request line: %v", err)
			return
		}
		var req api.ExecRequest
		if err := json.Unmarshal(line, &req); err != nil {
			t.Errorf("request line %q: %v", line, err)
			return
		}
		switch r.PathValue("id") {
		case "gone":
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: errdefs.CodeNotFound, Message: "no such sandbox"}})
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		flush := func() { http.NewResponseController(w).Flush() }
		enc.Encode(api.ExecEvent{Type: api.EventStart, Pid: 42})
		flush()
		switch r.PathValue("id") {
		case "fails":
			enc.Encode(api.ExecEvent{Type: api.EventError, Error: &api.ErrorDetail{Code: errdefs.CodeInvalidArgument, Message: `no such user "bob"`}})
			return
		case "cut":
			enc.Encode(api.ExecEvent{Type: api.EventStdout, Data: []byte("partial")})
			return
		}
		enc.Encode(api.ExecEvent{Type: api.EventStderr, Data: []byte(strings.Join(req.Cmd, " "))})
		flush()
		if req.StdinStream {
			dec := json.NewDecoder(br)
			for {
				var f api.StdinFrame
				if err := dec.Decode(&f); err != nil {
					t.Errorf("stdin frame: %v", err)
					return
				}
				if len(f.Data) > 0 {
					enc.Encode(api.ExecEvent{Type: api.EventStdout, Data: f.Data})
					enc.Encode(api.ExecEvent{Type: api.EventKeepalive})
					flush()
				}
				if f.EOF {
					break
				}
			}
		}
		code := 3
		enc.Encode(api.ExecEvent{Type: api.EventExit, ExitCode: &code, DurationMs: 1.5})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := New(WithoutEnvironment(), WithHost(srv.URL), WithAPIKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// lineWriter sends each write to a channel.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) { w <- string(p); return len(p), nil }

func TestExecStreamFullDuplex(t *testing.T) {
	c := catServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	stdinR, stdinW := io.Pipe()
	out := make(lineWriter, 16)
	var errBuf bytes.Buffer
	type result struct {
		ev  *api.ExecEvent
		err error
	}
	done := make(chan result, 1)
	go func() {
		ev, err := c.ExecStream(ctx, "sb1", api.ExecRequest{Cmd: []string{"cat", "-"}}, stdinR, out, &errBuf)
		done <- result{ev, err}
	}()

	// Each line must come back before the next is sent: the request body
	// is still open while the response streams.
	for _, line := range []string{"hello\n", "world\n"} {
		if _, err := stdinW.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-out:
			if got != line {
				t.Fatalf("stdout = %q, want %q", got, line)
			}
		case <-ctx.Done():
			t.Fatalf("no echo of %q while stdin stays open: the stream is not full duplex", line)
		}
	}
	stdinW.Close()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.ev.Type != api.EventExit || r.ev.ExitCode == nil || *r.ev.ExitCode != 3 {
		t.Errorf("exit event = %+v, want exit code 3", r.ev)
	}
	if errBuf.String() != "cat -" {
		t.Errorf("stderr = %q, want %q", errBuf.String(), "cat -")
	}
}

func TestExecStreamNoStdin(t *testing.T) {
	c := catServer(t)
	var stderr bytes.Buffer
	ev, err := c.ExecStream(context.Background(), "sb1", api.ExecRequest{Cmd: []string{"echo", "a b"}}, nil, nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if *ev.ExitCode != 3 || stderr.String() != "echo a b" {
		t.Errorf("got exit %d stderr %q", *ev.ExitCode, stderr.String())
	}
}

func TestExecStreamErrors(t *testing.T) {
	c := catServer(t)
	tests := []struct {
		id    string
		class error
		msg   string
	}{
		{"gone", errdefs.ErrNotFound, "no such sandbox"},
		{"fails", errdefs.ErrInvalidArgument, `no such user "bob"`},
		{"cut", errdefs.ErrUnavailable, "the exec stream ended before the command's exit"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			ev, err := c.ExecStream(context.Background(), tt.id, api.ExecRequest{Cmd: []string{"true"}}, strings.NewReader("x"), nil, nil)
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("ExecStream = %+v, %v; want %v containing %q", ev, err, tt.class, tt.msg)
			}
		})
	}
}

func TestExecStreamCancel(t *testing.T) {
	block := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec/stream", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.ExecEvent{Type: api.EventStart})
		http.NewResponseController(w).Flush()
		select {
		case <-block:
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(block) })
	c, err := New(WithoutEnvironment(), WithHost(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.ExecStream(ctx, "sb", api.ExecRequest{Cmd: []string{"sleep", "100"}}, nil, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want context.DeadlineExceeded", err)
	}
}

func TestDecodeOutput(t *testing.T) {
	out, errb, err := DecodeOutput(&api.ExecResult{Stdout: "/w==", Stderr: "aGk=", Encoding: "base64"})
	if err != nil || !bytes.Equal(out, []byte{0xff}) || string(errb) != "hi" {
		t.Errorf("DecodeOutput = %q, %q, %v", out, errb, err)
	}
	out, _, _ = DecodeOutput(&api.ExecResult{Stdout: "plain"})
	if string(out) != "plain" {
		t.Errorf("plain stdout = %q", out)
	}
}
