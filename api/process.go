package api

import "time"

// Background processes, PTY sessions and file watch: guest routes under
// SandboxPrefix (see guest.go for the exec routes they sit beside).
//
//	POST   /processes                 StartProcessRequest -> 201 Process
//	GET    /processes                 -> ProcessList
//	GET    /processes/{ref}           -> Process (ref: pid or tag)
//	GET    /processes/{ref}/output?stdout_offset=N&stderr_offset=M[&chunks=true]
//	                                  -> ProcessOutput
//	GET    /processes/{ref}/stream?stdout_offset=N&stderr_offset=M|from=now[&chunks=true]
//	                                  -> NDJSON ExecEvent lines (stdout/stderr
//	                                     carry offset, and time with chunks),
//	                                     keepalives, then exit
//	POST   /processes/{ref}/wait?timeout_ms=N -> Process
//	POST   /processes/{ref}/stdin[?eof=true]  raw body appended to stdin
//	POST   /processes/{ref}/signal    SignalRequest
//	DELETE /processes/{ref}           kill the whole tree -> 204
//	POST   /pty                       CreatePTYRequest -> 201 PTYSession
//	GET    /pty                       -> PTYList
//	GET    /pty/{pid}/ws              WebSocket (see PTYControl)
//	POST   /pty/{pid}/resize          PTYSize
//	DELETE /pty/{pid}                 kill it -> 204
//	GET    /files/watch?path=P[&recursive=true] -> NDJSON WatchEvent lines

// Process states.
const (
	ProcessRunning = "running"
	ProcessExited  = "exited"
)

// DefaultProcessBuffer is the default size of a background process's ring
// buffer, per stream; MaxProcessBuffer is the largest a request may ask.
const (
	DefaultProcessBuffer = 1 << 20
	MaxProcessBuffer     = 64 << 20
)

// StartProcessRequest starts a background (detached) process. The exec
// fields mean what they mean in ExecRequest; timeout_ms kills the process
// tree after that long.
type StartProcessRequest struct {
	Cmd       []string          `json:"cmd,omitempty"`
	Shell     string            `json:"shell,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	User      string            `json:"user,omitempty"`
	TimeoutMs int64             `json:"timeout_ms,omitempty"`
	// Tag names the process; it must be unique among running processes
	// and may be used instead of the pid in every route.
	Tag string `json:"tag,omitempty"`
	// MaxBufferBytes sizes the ring buffer kept of each of stdout and
	// stderr (0: DefaultProcessBuffer; at most MaxProcessBuffer). Older
	// output is dropped, and reported as dropped.
	MaxBufferBytes int64 `json:"max_buffer_bytes,omitempty"`
}

// Process describes a background process.
type Process struct {
	Pid       int        `json:"pid"`
	Tag       string     `json:"tag,omitempty"`
	Cmd       []string   `json:"cmd"`
	State     string     `json:"state"` // ProcessRunning or ProcessExited
	ExitCode  *int       `json:"exit_code,omitempty"`
	Signal    string     `json:"signal,omitempty"`
	TimedOut  bool       `json:"timed_out,omitempty"`
	OOMKilled bool       `json:"oom_killed,omitempty"` // the OOM killer ended it at the memory limit
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
}

// ProcessList is the answer of GET /processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// ProcessOutput is a background process's output from the requested
// offsets to what has been written so far. Offsets count every byte the
// stream ever carried; pass the returned offsets back to read on exactly
// where this answer ended. Dropped is how many bytes after the requested
// offset had already left the ring buffer.
type ProcessOutput struct {
	Stdout        []byte `json:"stdout"` // base64 in JSON
	Stderr        []byte `json:"stderr"`
	StdoutOffset  int64  `json:"stdout_offset"`
	StderrOffset  int64  `json:"stderr_offset"`
	StdoutDropped int64  `json:"stdout_dropped"`
	StderrDropped int64  `json:"stderr_dropped"`
	State         string `json:"state"`
	ExitCode      *int   `json:"exit_code,omitempty"`
	// Chunks (only with chunks=true) say when each part of the returned
	// stdout and stderr was written, oldest first across both streams:
	// the order to print them in to interleave the streams as the
	// process wrote them. They cover the returned bytes exactly.
	Chunks []OutputChunk `json:"chunks,omitempty"`
}

// OutputChunk is a range of a background process's output and the time
// the agent read it from the process. The agent keeps a bounded index of
// its reads: where a busy process wrote more reads than it holds, the
// oldest output is merged into longer chunks that carry their earliest
// time.
type OutputChunk struct {
	Stream string    `json:"stream"` // "stdout" or "stderr"
	Offset int64     `json:"offset"` // of the first byte, in its stream
	Length int64     `json:"length"`
	Time   time.Time `json:"time"`
}

// SignalRequest sends a signal: a name ("SIGINT", "INT") or a number as a
// JSON number or string. Tree sends it to every process of the process's
// tree (its cgroup), not only the process itself.
type SignalRequest struct {
	Signal any  `json:"signal"`
	Tree   bool `json:"tree,omitempty"`
}

// CreatePTYRequest starts a program in a new pseudo-terminal. With
// neither cmd nor shell it runs the user's login shell (from /etc/passwd,
// else /bin/sh). TERM defaults to xterm-256color.
type CreatePTYRequest struct {
	Cmd   []string          `json:"cmd,omitempty"`
	Shell string            `json:"shell,omitempty"`
	Cols  int               `json:"cols,omitempty"` // 0: 80
	Rows  int               `json:"rows,omitempty"` // 0: 24
	Env   map[string]string `json:"env,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	User  string            `json:"user,omitempty"`
}

// PTYSession describes a PTY session. ID is the pid as a string.
type PTYSession struct {
	ID        string     `json:"id"`
	Pid       int        `json:"pid"`
	Cmd       []string   `json:"cmd,omitempty"`
	Cols      int        `json:"cols,omitempty"`
	Rows      int        `json:"rows,omitempty"`
	State     string     `json:"state,omitempty"`
	ExitCode  *int       `json:"exit_code,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
}

// PTYList is the answer of GET /pty.
type PTYList struct {
	Sessions []PTYSession `json:"sessions"`
}

// PTYSize is a terminal size, the body of POST /pty/{pid}/resize.
type PTYSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// PTYControl is a text frame on a PTY's WebSocket (binary frames carry
// terminal data both ways). The client sends {"type":"resize","cols","rows"};
// the server sends {"type":"exit","exit_code":N} when the program ended,
// then closes the socket.
type PTYControl struct {
	Type     string `json:"type"`
	Cols     int    `json:"cols,omitempty"`
	Rows     int    `json:"rows,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
}

// PTY control frame types.
const (
	PTYResize = "resize"
	PTYExit   = "exit"
)

// Watch event types. Overflow says the kernel's queue overflowed and
// events were lost; keepalive is sent on silence.
const (
	WatchCreate    = "create"
	WatchWrite     = "write"
	WatchRemove    = "remove"
	WatchRename    = "rename"
	WatchOverflow  = "overflow"
	WatchKeepalive = "keepalive"
)

// WatchEvent is one line of GET /files/watch.
type WatchEvent struct {
	Type string    `json:"type"`
	Path string    `json:"path,omitempty"`
	Dir  bool      `json:"dir,omitempty"`
	Time time.Time `json:"time"`
}
