package integration

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// TestExecStreamReusedConnection runs many streamed execs back to back on
// the SDK's shared keep-alive connections, with and without stdin: each
// must end with its exit event. (Streams on reused connections to the guest
// used to end after their start event about once in a hundred.)
func TestExecStreamReusedConnection(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		var out bytes.Buffer
		var stdin *bytes.Reader
		req := api.ExecRequest{Shell: "echo hi"}
		if i%2 == 1 {
			stdin = bytes.NewReader([]byte("x\n"))
			req = api.ExecRequest{Cmd: []string{"cat"}, StdinStream: true}
		}
		var ev *api.ExecEvent
		var err error
		if stdin != nil {
			ev, err = env.client.ExecStream(ctx, id, req, stdin, &out, nil)
		} else {
			ev, err = env.client.ExecStream(ctx, id, req, nil, &out, nil)
		}
		if err != nil || ev == nil || ev.ExitCode == nil || *ev.ExitCode != 0 {
			b, _ := os.ReadFile(env.cfg.RunDir + "/sandboxes/" + id + "/guest.log")
			t.Logf("guest log: %s", b)
			t.Fatalf("exec %d: event %+v, err %v", i, ev, err)
		}
		if want := map[bool]string{false: "hi\n", true: "x\n"}[stdin != nil]; out.String() != want {
			t.Fatalf("exec %d: output %q, want %q", i, out.String(), want)
		}
	}
	// The agent's own log has no errors (its starter thread moved in and
	// out of the exec cgroups every time).
	if b, _ := os.ReadFile(env.cfg.RunDir + "/sandboxes/" + id + "/guest.log"); bytes.Contains(b, []byte("level=ERROR")) {
		t.Fatalf("guest log has errors:\n%s", b)
	}
}
