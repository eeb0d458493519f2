package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// runBehaviourCodeStep runs the code interpreter's steps of the shared
// behaviour suite (sdk/testdata/behaviour/code.json) with the Go SDK.
func runBehaviourCodeStep(ctx context.Context, c *client.Client, id string, s behaviourStep) error {
	x := s.Expect
	switch s.Op {
	case "run_code":
		req := api.RunCodeRequest{Code: s.Code, Context: s.Context, Language: s.Language, Env: s.Env}
		if s.TimeoutS > 0 {
			req.TimeoutMs = max(1, int64(s.TimeoutS*1000))
		}
		ex, err := c.RunCode(ctx, id, req, nil)
		if err != nil {
			return err
		}
		var text string
		for _, r := range ex.Results {
			if r.IsMain {
				text = r.Text
			}
		}
		var name string
		if ex.Error != nil {
			name = ex.Error.Name
		}
		if x.Formats != nil {
			var got []string
			if len(ex.Results) > 0 {
				got = resultFormats(ex.Results[0])
			}
			if !slices.Equal(got, x.Formats) {
				return mismatch{fmt.Sprintf("formats = %v, want %v", got, x.Formats)}
			}
		}
		return firstErr(expectEq("text", text, x.Text), expectEq("stdout", strings.Join(ex.Logs.Stdout, ""), x.Stdout),
			expectEq("status", ex.Status, x.Status), expectEq("restarted", ex.Restarted, x.Restarted),
			expectEq("error_name", name, x.ErrorName))
	case "create_code_context":
		cc, err := c.CreateCodeContext(ctx, id, api.CreateCodeContextRequest{ID: s.ID, Cwd: s.Cwd, Language: s.Language})
		if err != nil {
			return err
		}
		if x.State != "" && cc.State != x.State {
			return mismatch{fmt.Sprintf("state = %q, want %q", cc.State, x.State)}
		}
		return nil
	case "remove_code_context":
		return c.RemoveCodeContext(ctx, id, s.ID)
	}
	return fmt.Errorf("unknown code op %q", s.Op)
}

// resultFormats lists a result's formats in the order both SDKs use.
func resultFormats(r api.CodeResult) []string {
	var out []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"text", r.Text != ""}, {"html", r.HTML != ""}, {"markdown", r.Markdown != ""}, {"svg", r.SVG != ""},
		{"png", r.PNG != ""}, {"jpeg", r.JPEG != ""}, {"pdf", r.PDF != ""}, {"latex", r.LaTeX != ""},
		{"json", len(r.JSON) > 0}, {"javascript", r.JavaScript != ""}} {
		if f.set {
			out = append(out, f.name)
		}
	}
	for k := range r.Extra {
		out = append(out, k)
	}
	return out
}
