// Package proto is the guest protocol, defined once: the routes the
// guest agent serves (its mux registers from this table, and the daemon's
// guest client builds its requests from it), the protocol version the
// agent reports, and the private boot protocol between a driver and the
// agent it starts (BootSpec, the boot channel, the environment of
// `agentbox-guest serve`).
//
// The protocol is HTTP/1.1 over the sandbox's channel (a unix socket on
// the container and gvisor tiers). The bodies are the public API's types
// (package api): the daemon forwards the routes marked Public under
// /v1/sandboxes/{id} (api.SandboxPrefix) unchanged, so both speak the
// same bodies. Errors are api.ErrorBody with the status errdefs gives
// for the code. Every path is resolved by the guest inside the sandbox's
// own mount namespace; magic links (/proc/*/fd, /proc/*/root, ...) are
// refused.
//
// Both sides import this package, and the guest agent may import nothing
// of the daemon's (cmd/agentbox-guest's deps test), so it holds only
// constants, the route table and plain types.
package proto

import "strings"

// Route is one method and path of the guest protocol, in the pattern
// syntax of net/http's ServeMux ("/processes/{ref}").
type Route struct {
	Method string
	Path   string
	// Public routes are forwarded by the daemon's API under
	// api.SandboxPrefix (api.Routes lists them too); the others only the
	// daemon calls.
	Public bool
}

// Pattern returns the route as a ServeMux pattern, "GET /ping".
func (r Route) Pattern() string { return r.Method + " " + r.Path }

// URL returns the request URL of the route on the guest's channel,
// "http://guest/processes/12", its {wildcards} replaced in order by args
// (which must not hold a slash; they are not escaped).
func (r Route) URL(args ...string) string {
	p := r.Path
	for _, a := range args {
		i := strings.IndexByte(p, '{')
		j := strings.IndexByte(p, '}')
		if i < 0 || j < i {
			break
		}
		p = p[:i] + a + p[j+1:]
	}
	return "http://guest" + p
}

// The routes. Bodies, answers and query parameters are documented where
// the types are (api/types.go, api/process.go, api/code.go, ...) and for
// the public ones in api/openapi.yaml under /v1/sandboxes/{id}.
var (
	// Ping answers Info: the agent's build and protocol version.
	Ping = Route{"GET", "/ping", false}

	// Exec runs an api.ExecRequest to its end and answers api.ExecResult.
	Exec = Route{"POST", "/exec", true}
	// ExecStream's body is NDJSON: an api.ExecRequest, then
	// api.StdinFrame lines; it answers NDJSON api.ExecEvent lines.
	ExecStream = Route{"POST", "/exec/stream", true}

	// Files: ?path=P; GET answers the raw bytes of a regular file, PUT
	// (&mode=0644&user=U) writes the raw body (parents are created) and
	// answers api.FileInfo, DELETE (&recursive=true) removes.
	FileGet    = Route{"GET", "/files", true}
	FilePut    = Route{"PUT", "/files", true}
	FileDelete = Route{"DELETE", "/files", true}
	FileStat   = Route{"GET", "/files/stat", true}   // -> api.FileInfo
	FileList   = Route{"GET", "/files/list", true}   // &depth=1 -> api.ListFilesResponse
	FileMkdir  = Route{"POST", "/files/mkdir", true} // api.MkdirRequest -> api.FileInfo
	FileRename = Route{"POST", "/files/rename", true}
	// ArchiveGet answers a tar stream of path; ArchivePut extracts its tar
	// body under path (&user=U).
	ArchiveGet = Route{"GET", "/files/archive", true}
	ArchivePut = Route{"PUT", "/files/archive", true}
	FileWatch  = Route{"GET", "/files/watch", true} // NDJSON file events

	// Background processes (api/process.go); {ref} is a pid or a tag.
	ProcessStart  = Route{"POST", "/processes", true}
	ProcessList   = Route{"GET", "/processes", true}
	ProcessGet    = Route{"GET", "/processes/{ref}", true}
	ProcessKill   = Route{"DELETE", "/processes/{ref}", true}
	ProcessOutput = Route{"GET", "/processes/{ref}/output", true}
	ProcessStream = Route{"GET", "/processes/{ref}/stream", true}
	ProcessWait   = Route{"POST", "/processes/{ref}/wait", true}
	ProcessStdin  = Route{"POST", "/processes/{ref}/stdin", true}
	ProcessSignal = Route{"POST", "/processes/{ref}/signal", true}

	// Terminals.
	PTYCreate = Route{"POST", "/pty", true}
	PTYList   = Route{"GET", "/pty", true}
	PTYSocket = Route{"GET", "/pty/{pid}/ws", true}
	PTYResize = Route{"POST", "/pty/{pid}/resize", true}
	PTYKill   = Route{"DELETE", "/pty/{pid}", true}

	// The code interpreter (api/code.go).
	CodeContextCreate    = Route{"POST", "/code/contexts", true}
	CodeContextList      = Route{"GET", "/code/contexts", true}
	CodeContextGet       = Route{"GET", "/code/contexts/{ctx}", true}
	CodeContextDelete    = Route{"DELETE", "/code/contexts/{ctx}", true}
	CodeContextInterrupt = Route{"POST", "/code/contexts/{ctx}/interrupt", true}
	CodeContextRestart   = Route{"POST", "/code/contexts/{ctx}/restart", true}
	CodeRun              = Route{"POST", "/code/run", true}
	CodeRunStream        = Route{"POST", "/code/run/stream", true}

	// The desktop (api/desktop.go; internal/guest/desktop). Screenshot
	// answers the image's bytes (query: format, quality, scale, x, y, w,
	// h); GET /desktop/stream is the daemon's (it knows the preview URL).
	DesktopStart      = Route{"POST", "/desktop", true}   // api.StartDesktopRequest -> api.Desktop
	DesktopGet        = Route{"GET", "/desktop", true}    // -> api.Desktop
	DesktopStop       = Route{"DELETE", "/desktop", true} // -> 204
	DesktopScreenshot = Route{"GET", "/desktop/screenshot", true}
	DesktopActions    = Route{"POST", "/desktop/actions", true} // api.DesktopActionsRequest -> api.DesktopActionsResult
	DesktopCursor     = Route{"GET", "/desktop/cursor", true}   // -> api.Point
	DesktopWindows    = Route{"GET", "/desktop/windows", true}  // -> api.DesktopWindowList
	DesktopLaunch     = Route{"POST", "/desktop/launch", true}  // api.DesktopLaunchRequest -> 201 api.Process
	DesktopOpen       = Route{"POST", "/desktop/open", true}    // api.DesktopOpenRequest -> 201 api.Process

	// Dial turns its connection into a TCP tunnel to 127.0.0.1:{port}
	// inside the sandbox's network namespace: send Connection: Upgrade
	// and Upgrade: DialProtocol; after 101 the connection carries the
	// port's bytes. Preview URLs and ready checks use it.
	Dial = Route{"GET", "/ports/{port}/dial", false}
	// SetEnv replaces the default environment of later execs (body
	// GuestEnv, answer 204). A warm pool sandbox gets its request's env
	// through it when it is handed out (docs/PERFORMANCE.md, "Warm
	// pools").
	SetEnv = Route{"PUT", "/env", false}
	// Checkpoint makes the agent of a gvisor sandbox answer 204, then
	// close its channel for a runsc checkpoint (internal/guest/gvisorserve);
	// the container tier's agent does not serve it.
	Checkpoint = Route{"POST", "/checkpoint", false}
)

// Routes lists every route of the guest protocol. A test holds the
// agent's mux to it, and the public ones to api.Routes.
var Routes = []Route{
	Ping, Exec, ExecStream,
	FileGet, FilePut, FileDelete, FileStat, FileList, FileMkdir, FileRename,
	ArchiveGet, ArchivePut, FileWatch,
	ProcessStart, ProcessList, ProcessGet, ProcessKill, ProcessOutput,
	ProcessStream, ProcessWait, ProcessStdin, ProcessSignal,
	PTYCreate, PTYList, PTYSocket, PTYResize, PTYKill,
	CodeContextCreate, CodeContextList, CodeContextGet, CodeContextDelete,
	CodeContextInterrupt, CodeContextRestart, CodeRun, CodeRunStream,
	DesktopStart, DesktopGet, DesktopStop, DesktopScreenshot, DesktopActions,
	DesktopCursor, DesktopWindows, DesktopLaunch, DesktopOpen,
	Dial, SetEnv, Checkpoint,
}

// DialProtocol is the Upgrade token of Dial.
const DialProtocol = "tcp"

// GuestEnv is the body of SetEnv: KEY=VALUE entries, the template's
// defaults merged with the sandbox's env, sorted by key.
type GuestEnv struct {
	Env []string `json:"env"`
}
