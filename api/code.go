package api

import (
	"encoding/json"
	"time"
)

// The code interpreter: stateful Jupyter kernels in the sandbox, one per
// context, run by the guest agent (internal/guest/code). The event names
// and result fields follow E2B's code-interpreter wire format, so an
// E2B-compatible front is a thin adapter.

// Code context states.
const (
	CodeStarting = "starting"
	CodeIdle     = "idle"
	CodeBusy     = "busy"
	CodeDead     = "dead"
)

// CodeContext is one kernel with its own state, language, cwd and env.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	// Kernel is the kernelspec's name, e.g. "python3".
	Kernel string `json:"kernel"`
	Cwd    string `json:"cwd,omitempty"`
	User   string `json:"user,omitempty"`
	// State is starting, idle, busy or dead (the kernel exited; the next
	// run starts a fresh one).
	State string `json:"state"`
	// Pid is the kernel's pid, 0 while none runs.
	Pid            int       `json:"pid,omitempty"`
	ExecutionCount int       `json:"execution_count"`
	StartedAt      time.Time `json:"started_at"`
	// Restarts counts the kernels started after the first (restart,
	// timeout escalation, death).
	Restarts int `json:"restarts"`
	// LastExit says why the last kernel ended, e.g. "signal SIGKILL (out
	// of memory)"; empty while the first kernel lives.
	LastExit string `json:"last_exit,omitempty"`
}

// CreateCodeContextRequest creates a context: POST /code/contexts.
type CreateCodeContextRequest struct {
	// Language picks the kernel by its language or name: python (the
	// default), or any kernelspec installed in the sandbox.
	Language string `json:"language,omitempty"`
	// ID names the context; empty picks a random one.
	ID   string            `json:"id,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
	User string            `json:"user,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
}

// CodeContextList is the answer of GET /code/contexts.
type CodeContextList struct {
	Contexts []CodeContext `json:"contexts"`
}

// DefaultCodeTimeoutMs is a run's timeout when the request gives none.
const DefaultCodeTimeoutMs = 300_000

// RunCodeRequest runs a cell: POST /code/run and /code/run/stream.
// Context and Language are exclusive; with neither the default python
// context runs it (made on first use). With Language, the default
// context of that language (its id is the language's name).
type RunCodeRequest struct {
	Code     string `json:"code"`
	Context  string `json:"context,omitempty"`
	Language string `json:"language,omitempty"`
	// Env is set for this run only (python contexts), then restored.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutMs bounds the run: 0 is DefaultCodeTimeoutMs, -1 none. At
	// the deadline the kernel is interrupted; if it is still busy 5 s
	// later it is restarted and the execution says restarted: true.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
}

// Code event types, in /code/run/stream's NDJSON answer. The stream ends
// with exactly one end_of_execution event.
const (
	CodeEventCount     = "number_of_executions"
	CodeEventStdout    = "stdout"
	CodeEventStderr    = "stderr"
	CodeEventResult    = "result"
	CodeEventError     = "error"
	CodeEventKeepalive = "keepalive"
	CodeEventEnd       = "end_of_execution"
)

// Execution statuses, in the end event and Execution.
const (
	CodeStatusOK          = "ok"
	CodeStatusError       = "error"
	CodeStatusTimeout     = "timeout"
	CodeStatusInterrupted = "interrupted"
	CodeStatusKernelDied  = "kernel_died"
)

// CodeResult is one rich output: an execute_result (IsMain) or a
// display_data. Each MIME type the kernel gave has its field; images and
// PDFs are base64 as the kernel sent them; other MIME types are in Extra.
type CodeResult struct {
	IsMain     bool                       `json:"is_main_result"`
	Text       string                     `json:"text,omitempty"`     // text/plain
	HTML       string                     `json:"html,omitempty"`     // text/html
	Markdown   string                     `json:"markdown,omitempty"` // text/markdown
	SVG        string                     `json:"svg,omitempty"`      // image/svg+xml
	PNG        string                     `json:"png,omitempty"`      // image/png, base64
	JPEG       string                     `json:"jpeg,omitempty"`     // image/jpeg, base64
	PDF        string                     `json:"pdf,omitempty"`      // application/pdf, base64
	LaTeX      string                     `json:"latex,omitempty"`    // text/latex
	JSON       json.RawMessage            `json:"json,omitempty"`     // application/json
	JavaScript string                     `json:"javascript,omitempty"`
	Extra      map[string]json.RawMessage `json:"extra,omitempty"`
	// ExecutionCount is the cell's number, on main results.
	ExecutionCount int `json:"execution_count,omitempty"`
}

// CodeError is an exception raised by the code (not an API failure), or
// the agent's own TimeoutError, KernelDied or ContextRestarting.
type CodeError struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Traceback is the kernel's traceback, lines joined, without ANSI
	// escapes.
	Traceback string `json:"traceback"`
}

// CodeEvent is one line of /code/run/stream's answer: Type says which
// fields are set. A result event carries a CodeResult's fields and an
// error event a CodeError's, inline, as E2B's stream does.
type CodeEvent struct {
	Type string `json:"type"`
	// stdout, stderr (Text is also a result's text/plain):
	Text      string `json:"text,omitempty"`
	Timestamp string `json:"timestamp,omitempty"`
	// result:
	IsMain     *bool                      `json:"is_main_result,omitempty"`
	HTML       string                     `json:"html,omitempty"`
	Markdown   string                     `json:"markdown,omitempty"`
	SVG        string                     `json:"svg,omitempty"`
	PNG        string                     `json:"png,omitempty"`
	JPEG       string                     `json:"jpeg,omitempty"`
	PDF        string                     `json:"pdf,omitempty"`
	LaTeX      string                     `json:"latex,omitempty"`
	JSON       json.RawMessage            `json:"json,omitempty"`
	JavaScript string                     `json:"javascript,omitempty"`
	Extra      map[string]json.RawMessage `json:"extra,omitempty"`
	// error:
	Name      string `json:"name,omitempty"`
	Value     string `json:"value,omitempty"`
	Traceback string `json:"traceback,omitempty"`
	// number_of_executions, result (main), end_of_execution:
	ExecutionCount int `json:"execution_count,omitempty"`
	// end_of_execution:
	Status     string  `json:"status,omitempty"`
	DurationMs float64 `json:"duration_ms,omitempty"`
	Restarted  bool    `json:"restarted,omitempty"`
	Context    string  `json:"context,omitempty"`
}

// ResultEvent makes a result event of r.
func ResultEvent(r CodeResult) CodeEvent {
	return CodeEvent{Type: CodeEventResult, IsMain: &r.IsMain, Text: r.Text, HTML: r.HTML, Markdown: r.Markdown,
		SVG: r.SVG, PNG: r.PNG, JPEG: r.JPEG, PDF: r.PDF, LaTeX: r.LaTeX, JSON: r.JSON, JavaScript: r.JavaScript,
		Extra: r.Extra, ExecutionCount: r.ExecutionCount}
}

// Result returns a result event's CodeResult.
func (ev CodeEvent) Result() CodeResult {
	return CodeResult{IsMain: ev.IsMain != nil && *ev.IsMain, Text: ev.Text, HTML: ev.HTML, Markdown: ev.Markdown,
		SVG: ev.SVG, PNG: ev.PNG, JPEG: ev.JPEG, PDF: ev.PDF, LaTeX: ev.LaTeX, JSON: ev.JSON, JavaScript: ev.JavaScript,
		Extra: ev.Extra, ExecutionCount: ev.ExecutionCount}
}

// ErrorEvent makes an error event of e.
func ErrorEvent(e CodeError) CodeEvent {
	return CodeEvent{Type: CodeEventError, Name: e.Name, Value: e.Value, Traceback: e.Traceback}
}

// CodeLogs is an execution's output streams, chunk by chunk.
type CodeLogs struct {
	Stdout []string `json:"stdout"`
	Stderr []string `json:"stderr"`
}

// Execution is the whole of one run: the answer of /code/run.
type Execution struct {
	Results        []CodeResult `json:"results"`
	Logs           CodeLogs     `json:"logs"`
	Error          *CodeError   `json:"error,omitempty"`
	ExecutionCount int          `json:"execution_count"`
	Status         string       `json:"status"`
	DurationMs     float64      `json:"duration_ms"`
	// Restarted says the context's kernel was restarted during or just
	// before this run: its state (variables, imports) is lost.
	Restarted bool   `json:"restarted"`
	Context   string `json:"context"`
}

// Add folds one stream event into e.
func (e *Execution) Add(ev CodeEvent) {
	switch ev.Type {
	case CodeEventStdout:
		e.Logs.Stdout = append(e.Logs.Stdout, ev.Text)
	case CodeEventStderr:
		e.Logs.Stderr = append(e.Logs.Stderr, ev.Text)
	case CodeEventResult:
		e.Results = append(e.Results, ev.Result())
	case CodeEventError:
		e.Error = &CodeError{Name: ev.Name, Value: ev.Value, Traceback: ev.Traceback}
	case CodeEventCount:
		e.ExecutionCount = ev.ExecutionCount
	case CodeEventEnd:
		e.Status, e.DurationMs, e.Restarted, e.Context = ev.Status, ev.DurationMs, ev.Restarted, ev.Context
		if ev.ExecutionCount != 0 {
			e.ExecutionCount = ev.ExecutionCount
		}
	}
}
