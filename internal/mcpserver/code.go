package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// run_code runs cells in the sandbox's code interpreter (docs/interpreter.md):
// a stateful Jupyter kernel per context, so what one call defines the next
// one sees. Its results become MCP content: text/plain as text, PNG and
// JPEG pictures (matplotlib plots) as images, an exception as a tool error
// with its traceback.

const runCodeDescription = "Run code in a stateful Jupyter kernel inside a sandbox (templates with a kernel: python, which has numpy, pandas and matplotlib). " +
	"State is kept between calls: variables, imports and open files of one call are there in the next call to the same context. " +
	"Returns stdout, stderr, the cell's value as text, plots (matplotlib plt.show() or a figure left at the end of the cell) as PNG images, " +
	"and an exception as an error with its traceback."

// codeTimeout is a cell's default time limit in run_code.
const codeTimeout = time.Minute

type codeArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Language  string `json:"language,omitempty" jsonschema:"the kernel's language: python (default); another one (javascript, bash, ...) only if the sandbox's template has a Jupyter kernel for it"`
	Code      string `json:"code" jsonschema:"the cell's source; its last expression's value is returned"`
	Timeout   string `json:"timeout,omitempty" jsonschema:"interrupt the cell after this long, e.g. 30s; default 60s (the state is kept unless the kernel had to be restarted, which the result says)"`
	Context   string `json:"context,omitempty" jsonschema:"a context id: a separate kernel with its own state, made (in language) on first use; default one shared context per language"`
}

// languageAliases maps the names run_code accepted before it had kernels
// to the interpreter's language names.
var languageAliases = map[string]string{
	"": "python", "py": "python", "python3": "python",
	"js": "javascript", "node": "javascript", "nodejs": "javascript",
	"sh": "bash", "shell": "bash",
}

func codeLanguage(s string) string {
	l := strings.ToLower(strings.TrimSpace(s))
	if a, ok := languageAliases[l]; ok {
		return a
	}
	return l
}

func (t *tools) runCode(ctx context.Context, _ *mcp.CallToolRequest, in codeArgs) (*mcp.CallToolResult, any, error) {
	if err := needID(in.SandboxID); err != nil {
		return apiError(err)
	}
	if strings.TrimSpace(in.Code) == "" {
		return failed("code is required: the source of a cell such as \"print(1 + 1)\""), nil, nil
	}
	timeout, err := parseTimeout(in.Timeout, codeTimeout)
	if err != nil {
		return apiError(err)
	}
	lang := codeLanguage(in.Language)
	req := api.RunCodeRequest{Code: in.Code, Language: lang, TimeoutMs: timeout.Milliseconds()}
	if in.Context != "" {
		req.Language, req.Context = "", in.Context
	}
	ex, err := t.c.RunCode(ctx, in.SandboxID, req, nil)
	if in.Context != "" && errors.Is(err, errdefs.ErrNotFound) && strings.Contains(err.Error(), "no code context") {
		// A named context is made on first use, in the language asked.
		_, err = t.c.CreateCodeContext(ctx, in.SandboxID, api.CreateCodeContextRequest{ID: in.Context, Language: lang})
		if err == nil || errors.Is(err, errdefs.ErrAlreadyExists) {
			ex, err = t.c.RunCode(ctx, in.SandboxID, req, nil)
		}
	}
	if err != nil {
		if errors.Is(err, errdefs.ErrInvalidArgument) && strings.Contains(err.Error(), "no Jupyter kernel") {
			return t.noKernel(ctx, in.SandboxID, lang, err), nil, nil
		}
		return apiError(err)
	}
	return codeResult(ex, timeout), nil, nil
}

// noKernel is the tool error of a sandbox without a kernel for lang: it
// names the template to use instead, and exec for a one-off program.
func (t *tools) noKernel(ctx context.Context, id, lang string, err error) *mcp.CallToolResult {
	tmpl := "its template"
	if sb, gerr := t.c.GetSandbox(ctx, id); gerr == nil {
		tmpl = "template " + sb.Template
	}
	oneOff := map[string]string{"python": "python3 -c '...'", "javascript": "node -e '...'", "bash": "bash -c '...'"}[lang]
	if oneOff == "" {
		oneOff = "the language's interpreter"
	}
	return failed("sandbox %s (%s) has no %s kernel: run_code needs a Jupyter kernel (%v). "+
		"The built-in template with one is \"python\" (a python kernel with numpy, pandas and matplotlib): create a sandbox with sandbox_create and that template. "+
		"For a one-off program without kept state, use exec here instead (%s)", id, tmpl, lang, err, oneOff)
}

// codeResult turns an execution into MCP content: all of stdout, all of
// stderr, then each result in order (text/plain as text, PNG
// and JPEG as images, otherwise the first textual format), then the
// error. An exception, a timeout or a dead kernel makes it a tool error.
func codeResult(ex *api.Execution, timeout time.Duration) *mcp.CallToolResult {
	r := &mcp.CallToolResult{}
	add := func(s string) { r.Content = append(r.Content, &mcp.TextContent{Text: s}) }
	if ex.Restarted {
		add("[the kernel was restarted: variables and imports of earlier calls are gone]")
	}
	if out := strings.Join(ex.Logs.Stdout, ""); out != "" {
		add(out)
	}
	if errOut := strings.Join(ex.Logs.Stderr, ""); errOut != "" {
		add("--- stderr ---\n" + errOut)
	}
	for _, res := range ex.Results {
		images := 0
		for _, img := range []struct{ b64, mime string }{{res.PNG, "image/png"}, {res.JPEG, "image/jpeg"}} {
			if img.b64 == "" {
				continue
			}
			b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(img.b64))
			if err != nil {
				add(fmt.Sprintf("[an %s result that is not valid base64: %v]", img.mime, err))
				continue
			}
			r.Content = append(r.Content, &mcp.ImageContent{Data: b, MIMEType: img.mime})
			images++
		}
		switch {
		case res.Text != "":
			add(res.Text)
		case images > 0:
		case res.Markdown != "":
			add(res.Markdown)
		case res.LaTeX != "":
			add(res.LaTeX)
		case len(res.JSON) > 0:
			add(string(res.JSON))
		case res.SVG != "":
			add(res.SVG)
		case res.HTML != "":
			add(res.HTML)
		default:
			add(fmt.Sprintf("[a result in formats this tool cannot show: %s]", strings.Join(extraTypes(res.Extra), ", ")))
		}
	}
	switch ex.Status {
	case api.CodeStatusOK:
	case api.CodeStatusTimeout:
		r.IsError = true
		if ex.Restarted {
			add(fmt.Sprintf("timed out after %s: the cell did not stop when interrupted, so the kernel was restarted (its state is gone)", timeout))
		} else {
			add(fmt.Sprintf("timed out after %s: the cell was interrupted; the context's state is kept", timeout))
		}
	default:
		r.IsError = true
	}
	if e := ex.Error; e != nil {
		r.IsError = true
		tb := e.Traceback
		if tb == "" || !strings.Contains(tb, e.Name) {
			tb = strings.TrimSpace(tb + "\n" + e.Name + ": " + e.Value)
		}
		add(tb)
	} else if r.IsError && ex.Status != api.CodeStatusTimeout {
		add("the run ended with status " + ex.Status)
	}
	if len(r.Content) == 0 {
		add("(no output)")
	}
	return r
}

func extraTypes(m map[string]json.RawMessage) []string {
	var ts []string
	for k := range m {
		ts = append(ts, k)
	}
	if len(ts) == 0 {
		return []string{"none"}
	}
	return ts
}
