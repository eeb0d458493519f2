package mcpserver

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/api"
)

// describe renders a result's content as one line per block: the text, or
// "image <mime> <n> bytes".
func describe(r *mcp.CallToolResult) []string {
	var out []string
	for _, c := range r.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			out = append(out, c.Text)
		case *mcp.ImageContent:
			out = append(out, fmt.Sprintf("image %s %d bytes", c.MIMEType, len(c.Data)))
		default:
			out = append(out, "?")
		}
	}
	return out
}

func TestCodeResult(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nxyz")
	tests := []struct {
		name    string
		ex      api.Execution
		want    []string
		wantErr bool
	}{
		{name: "value and logs", ex: api.Execution{Status: api.CodeStatusOK,
			Logs:    api.CodeLogs{Stdout: []string{"a\n", "b\n"}, Stderr: []string{"w\n"}},
			Results: []api.CodeResult{{IsMain: true, Text: "42"}}},
			want: []string{"a\nb\n", "--- stderr ---\nw\n", "42"}},
		{name: "no output", ex: api.Execution{Status: api.CodeStatusOK}, want: []string{"(no output)"}},
		{name: "plot", ex: api.Execution{Status: api.CodeStatusOK,
			Results: []api.CodeResult{{PNG: base64.StdEncoding.EncodeToString(png), Text: "<Figure size 640x480 with 1 Axes>"}}},
			want: []string{fmt.Sprintf("image image/png %d bytes", len(png)), "<Figure size 640x480 with 1 Axes>"}},
		{name: "html only", ex: api.Execution{Status: api.CodeStatusOK, Results: []api.CodeResult{{HTML: "<b>x</b>"}}},
			want: []string{"<b>x</b>"}},
		{name: "exception", ex: api.Execution{Status: api.CodeStatusError,
			Error: &api.CodeError{Name: "ZeroDivisionError", Value: "division by zero", Traceback: "Traceback...\nZeroDivisionError: division by zero"}},
			want: []string{"Traceback...\nZeroDivisionError: division by zero"}, wantErr: true},
		{name: "error without traceback", ex: api.Execution{Status: api.CodeStatusKernelDied, Restarted: true,
			Error: &api.CodeError{Name: "KernelDied", Value: "exit code 3"}},
			want: []string{"[the kernel was restarted: variables and imports of earlier calls are gone]", "KernelDied: exit code 3"}, wantErr: true},
		{name: "timeout keeps state", ex: api.Execution{Status: api.CodeStatusTimeout,
			Error: &api.CodeError{Name: "KeyboardInterrupt", Value: "", Traceback: "KeyboardInterrupt"}},
			want: []string{"timed out after 1m0s: the cell was interrupted; the context's state is kept", "KeyboardInterrupt"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := codeResult(&tt.ex, time.Minute)
			got := describe(r)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || r.IsError != tt.wantErr {
				t.Errorf("codeResult = %q (error %v), want %q (error %v)", got, r.IsError, tt.want, tt.wantErr)
			}
		})
	}

	// The image's bytes are the PNG's, not its base64.
	r := codeResult(&api.Execution{Status: api.CodeStatusOK, Results: []api.CodeResult{{PNG: base64.StdEncoding.EncodeToString(png)}}}, time.Minute)
	if img, ok := r.Content[0].(*mcp.ImageContent); !ok || !bytes.Equal(img.Data, png) {
		t.Errorf("image content = %#v, want the decoded PNG", r.Content[0])
	}
}

func TestCodeLanguage(t *testing.T) {
	for in, want := range map[string]string{"": "python", "Python3": "python", "py": "python", "node": "javascript",
		"js": "javascript", "shell": "bash", "r": "r", " julia ": "julia"} {
		if got := codeLanguage(in); got != want {
			t.Errorf("codeLanguage(%q) = %q, want %q", in, got, want)
		}
	}
}
