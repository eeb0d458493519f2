package api

import "time"

// Template builds: POST /v1/templates/build?name=NAME takes a
// multipart/form-data body with a "spec" part (the YAML build spec, at
// most 1 MiB, first) and an optional "context" part (a tar of the build
// context directory, plain or gzip). It answers 200 with NDJSON BuildEvent
// lines as the build runs; the last is "done" (with the template) or
// "error". See docs/templates.md.

// ReadyCheck is a template's readiness check: create returns once Cmd
// exits 0 in the sandbox, or Port accepts a TCP connection there, and
// fails (removing the sandbox) after TimeoutMs.
type ReadyCheck struct {
	Cmd       string `json:"cmd,omitempty"`
	Port      int    `json:"port,omitempty"`
	TimeoutMs int64  `json:"timeout_ms"`
}

// TemplateLayer describes one build layer of a template
// (GET /v1/templates/{name}): what made it and the bytes it references.
type TemplateLayer struct {
	ID        string    `json:"id"`
	Step      string    `json:"step"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
}

// Build event types.
const (
	BuildEventStep     = "step"      // a step starts (Cached: it was found in the cache)
	BuildEventOutput   = "output"    // a line the step printed (Stream stdout or stderr)
	BuildEventStepDone = "step_done" // a step ended: ExitCode, DurationMs, Layer
	BuildEventDone     = "done"      // the build finished: Template
	BuildEventError    = "error"     // the build failed: Error (and Step, ExitCode when a step failed)
	// BuildEventKeepalive is sent after BuildKeepalive without another
	// event (a quiet step), so that proxies keep the stream open.
	BuildEventKeepalive = "keepalive"
)

// BuildKeepalive is how long a build's stream stays quiet at most.
const BuildKeepalive = 15 * time.Second

// BuildEvent is one line of a build's NDJSON stream.
type BuildEvent struct {
	Type  string `json:"type"`
	Step  int    `json:"step,omitempty"`  // 1-based
	Steps int    `json:"steps,omitempty"` // how many there are (step events)
	// Text: the step's description (step), or one line of output without
	// its newline (output).
	Text       string       `json:"text,omitempty"`
	Stream     string       `json:"stream,omitempty"`
	Cached     bool         `json:"cached,omitempty"`
	ExitCode   *int         `json:"exit_code,omitempty"`
	DurationMs float64      `json:"duration_ms,omitempty"`
	Layer      string       `json:"layer,omitempty"`
	Template   *Template    `json:"template,omitempty"`
	Error      *ErrorDetail `json:"error,omitempty"`
}
