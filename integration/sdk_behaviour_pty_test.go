package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// The behaviour suite's terminal and snapshot ops (pty, snapshot,
// from_snapshot), run by the Go SDK; see sdk/testdata/behaviour/README.md.

func runBehaviourStateStep(ctx context.Context, t *testing.T, c *client.Client, id string, s behaviourStep, snaps map[string]string) error {
	x := s.Expect
	switch s.Op {
	case "pty":
		req := api.CreatePTYRequest{Cols: 80, Rows: 24}
		if len(s.Cmd) > 0 && json.Unmarshal(s.Cmd, &req.Shell) != nil {
			if err := json.Unmarshal(s.Cmd, &req.Cmd); err != nil {
				return fmt.Errorf("bad cmd %s: %v", s.Cmd, err)
			}
		}
		sess, err := c.CreatePTY(ctx, id, req)
		if err != nil {
			return err
		}
		timeout := time.Duration(s.TimeoutS * float64(time.Second))
		if timeout <= 0 {
			timeout = time.Minute
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		conn, err := c.AttachPTY(pctx, id, sess.Pid)
		if err != nil {
			_ = c.KillPTY(ctx, id, sess.Pid)
			return err
		}
		defer conn.Close()
		if s.Text != nil {
			if _, err := conn.Write([]byte(*s.Text)); err != nil {
				return err
			}
		}
		var out bytes.Buffer
		if _, err := io.Copy(&out, conn); err != nil {
			return fmt.Errorf("reading the terminal until its program exits (got %q): %w", out.String(), err)
		}
		code := conn.ExitCode()
		if code == nil {
			return mismatch{fmt.Sprintf("the terminal ended without an exit code; output %q", out.String())}
		}
		if x.StdoutContains != "" && !strings.Contains(out.String(), x.StdoutContains) {
			return mismatch{fmt.Sprintf("terminal output %q lacks %q", out.String(), x.StdoutContains)}
		}
		return expectEq("exit_code", *code, x.ExitCode)
	case "snapshot":
		snap, err := c.CreateSnapshot(ctx, id, "")
		if err != nil {
			return err
		}
		t.Cleanup(func() {
			if err := c.DeleteSnapshot(context.Background(), snap.ID); err != nil {
				t.Errorf("removing snapshot %s: %v", snap.ID, err)
			}
		})
		snaps[s.Tag] = snap.ID
		return nil
	case "from_snapshot":
		ref, ok := snaps[s.Ref]
		if !ok {
			return fmt.Errorf("from_snapshot: no snapshot step tagged %q before it", s.Ref)
		}
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: ref, TTLSeconds: 120,
			Metadata: map[string]string{"suite": "behaviour-go"}})
		if err != nil {
			return err
		}
		defer func() { _ = c.DestroySandbox(context.Background(), sb.ID) }()
		rc, err := c.ReadFile(ctx, sb.ID, s.Path)
		if err != nil {
			return err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			return err
		}
		return expectEq("text", string(b), x.Text)
	}
	return fmt.Errorf("unknown op %q in the behaviour suite", s.Op)
}
