package api

// Route is one method and path of the daemon's HTTP API, in the pattern
// syntax of net/http's ServeMux ("/v1/sandboxes/{id}").
type Route struct {
	Method string
	Path   string
}

// Pattern returns the route as a ServeMux pattern, "GET /v1/health".
func (r Route) Pattern() string { return r.Method + " " + r.Path }

// SandboxPrefix is the prefix under which the daemon forwards the guest
// protocol's exec and file routes to a sandbox's guest agent.
const SandboxPrefix = "/v1/sandboxes/{id}"

// Routes lists every route of the daemon's API. The server registers from
// this list and a test checks that api/openapi.yaml documents each one.
var Routes = []Route{
	{"GET", "/v1/health"},
	{"GET", "/v1/info"},  // tiers, defaults, limits, paths (api/info.go)
	{"GET", "/v1/pools"}, // warm pools (api/pool.go)

	{"POST", "/v1/sandboxes"},
	{"GET", "/v1/sandboxes"},
	{"GET", "/v1/sandboxes/{id}"},
	{"PATCH", "/v1/sandboxes/{id}"},
	{"DELETE", "/v1/sandboxes/{id}"},
	// State (api/state.go): pause, snapshots, fork, reset.
	{"POST", "/v1/sandboxes/{id}/pause"},
	{"POST", "/v1/sandboxes/{id}/resume"},
	{"POST", "/v1/sandboxes/{id}/snapshots"},
	{"POST", "/v1/sandboxes/{id}/fork"},
	{"POST", "/v1/sandboxes/{id}/reset"},
	// Egress policy at runtime (api/network.go).
	{"POST", "/v1/sandboxes/{id}/egress"},
	{"GET", "/v1/sandboxes/{id}/egress/log"},
	{"GET", "/v1/snapshots"},
	{"GET", "/v1/snapshots/{ref}"},
	{"DELETE", "/v1/snapshots/{ref}"},
	{"POST", "/v1/snapshots/{ref}/push"},
	{"POST", "/v1/snapshots/pull"},
	{"GET", "/v1/snapshots/{ref}/export"},
	{"POST", "/v1/snapshots/import"},

	// Forwarded to the guest (see guest.go), under SandboxPrefix.
	{"POST", SandboxPrefix + "/exec"},
	{"POST", SandboxPrefix + "/exec/stream"},
	{"GET", SandboxPrefix + "/files"},
	{"PUT", SandboxPrefix + "/files"},
	{"DELETE", SandboxPrefix + "/files"},
	{"GET", SandboxPrefix + "/files/stat"},
	{"GET", SandboxPrefix + "/files/list"},
	{"POST", SandboxPrefix + "/files/mkdir"},
	{"POST", SandboxPrefix + "/files/rename"},
	{"GET", SandboxPrefix + "/files/archive"},
	{"PUT", SandboxPrefix + "/files/archive"},
	{"GET", SandboxPrefix + "/files/watch"},
	{"POST", SandboxPrefix + "/processes"},
	{"GET", SandboxPrefix + "/processes"},
	{"GET", SandboxPrefix + "/processes/{ref}"},
	{"DELETE", SandboxPrefix + "/processes/{ref}"},
	{"GET", SandboxPrefix + "/processes/{ref}/output"},
	{"GET", SandboxPrefix + "/processes/{ref}/stream"},
	{"POST", SandboxPrefix + "/processes/{ref}/wait"},
	{"POST", SandboxPrefix + "/processes/{ref}/stdin"},
	{"POST", SandboxPrefix + "/processes/{ref}/signal"},
	{"POST", SandboxPrefix + "/pty"},
	{"GET", SandboxPrefix + "/pty"},
	{"GET", SandboxPrefix + "/pty/{pid}/ws"},
	{"POST", SandboxPrefix + "/pty/{pid}/resize"},
	{"DELETE", SandboxPrefix + "/pty/{pid}"},
	// The code interpreter (api/code.go).
	{"POST", SandboxPrefix + "/code/contexts"},
	{"GET", SandboxPrefix + "/code/contexts"},
	{"GET", SandboxPrefix + "/code/contexts/{ctx}"},
	{"DELETE", SandboxPrefix + "/code/contexts/{ctx}"},
	{"POST", SandboxPrefix + "/code/contexts/{ctx}/interrupt"},
	{"POST", SandboxPrefix + "/code/contexts/{ctx}/restart"},
	{"POST", SandboxPrefix + "/code/run"},
	{"POST", SandboxPrefix + "/code/run/stream"},
	// The desktop (api/desktop.go): all forwarded to the guest but
	// /desktop/stream, which the daemon answers (it knows the preview
	// domain and the sandbox's token).
	{"POST", SandboxPrefix + "/desktop"},
	{"GET", SandboxPrefix + "/desktop"},
	{"DELETE", SandboxPrefix + "/desktop"},
	{"GET", SandboxPrefix + "/desktop/screenshot"},
	{"POST", SandboxPrefix + "/desktop/actions"},
	{"GET", SandboxPrefix + "/desktop/cursor"},
	{"GET", SandboxPrefix + "/desktop/windows"},
	{"POST", SandboxPrefix + "/desktop/launch"},
	{"POST", SandboxPrefix + "/desktop/open"},
	{"GET", SandboxPrefix + "/desktop/stream"},

	{"GET", "/v1/templates"},
	{"GET", "/v1/templates/{name}"},
	{"POST", "/v1/templates"},
	{"POST", "/v1/templates/import"},
	{"DELETE", "/v1/templates/{name}"},
	{"POST", "/v1/templates/build"},
	{"POST", "/v1/templates/{name}/push"},
	{"POST", "/v1/templates/pull"},

	// Keys, tenants, audit log, posture check (api/security.go; admin only).
	{"POST", "/v1/keys"},
	{"GET", "/v1/keys"},
	{"DELETE", "/v1/keys/{id}"},
	{"POST", "/v1/tenants"},
	{"GET", "/v1/tenants"},
	{"GET", "/v1/tenants/{name}"},
	{"PATCH", "/v1/tenants/{name}"},
	{"DELETE", "/v1/tenants/{name}"},
	{"GET", "/v1/audit"},
	{"GET", SandboxPrefix + "/security"},

	// Usage samples and lifecycle events (api/usage.go, api/events.go).
	{"GET", SandboxPrefix + "/metrics"},
	{"GET", "/v1/events"},

	// Single-use tickets for browser WebSockets (api/ticket.go).
	{"POST", "/v1/tickets"},

	// Fleets (api/fleet.go, docs/cluster.md): a node's status for the
	// gateway, the gateway's membership table.
	{"GET", "/v1/node"},
	{"GET", "/v1/fleet/nodes"},
}

// RawBody says what a route takes for a body when that is not one JSON
// object (see RequestBodies).
type RawBody string

// NoBody is the RawBody of a POST route that reads no body.
const NoBody RawBody = "no body"

// RequestBodies says, for every POST, PUT and PATCH route (by its
// Pattern), what its request body is: a nil pointer to the API type a JSON
// body decodes into, or a RawBody saying what it takes instead. The
// server's FuzzDecodeRequest fuzzes the decoding of every JSON one, and
// TestJSONBodyRoutesFuzzed (internal/server) fails on a route that has a
// body and no entry here. The guest routes' bodies pass through to the
// guest, which decodes them again (internal/guest's fuzz targets), but the
// API promises the same types, and SDKs build them, so they are here too.
var RequestBodies = map[string]any{
	"POST /v1/sandboxes":                                    (*CreateSandboxRequest)(nil),
	"PATCH /v1/sandboxes/{id}":                              (*UpdateSandboxRequest)(nil),
	"POST /v1/sandboxes/{id}/pause":                         NoBody,
	"POST /v1/sandboxes/{id}/resume":                        NoBody,
	"POST /v1/sandboxes/{id}/snapshots":                     (*CreateSnapshotRequest)(nil),
	"POST /v1/sandboxes/{id}/fork":                          (*ForkRequest)(nil),
	"POST /v1/sandboxes/{id}/reset":                         (*ResetRequest)(nil),
	"POST /v1/sandboxes/{id}/egress":                        (*Network)(nil),
	"POST /v1/sandboxes/{id}/exec":                          (*ExecRequest)(nil),
	"POST /v1/sandboxes/{id}/exec/stream":                   RawBody("NDJSON: an ExecRequest line, then StdinFrame lines (guest FuzzExecStream)"),
	"PUT /v1/sandboxes/{id}/files":                          RawBody("the file's bytes"),
	"PUT /v1/sandboxes/{id}/files/archive":                  RawBody("a tar stream (guest FuzzExtract)"),
	"POST /v1/sandboxes/{id}/files/mkdir":                   (*MkdirRequest)(nil),
	"POST /v1/sandboxes/{id}/files/rename":                  (*RenameRequest)(nil),
	"POST /v1/sandboxes/{id}/processes":                     (*StartProcessRequest)(nil),
	"POST /v1/sandboxes/{id}/processes/{ref}/wait":          NoBody,
	"POST /v1/sandboxes/{id}/processes/{ref}/stdin":         RawBody("raw stdin bytes"),
	"POST /v1/sandboxes/{id}/processes/{ref}/signal":        (*SignalRequest)(nil),
	"POST /v1/sandboxes/{id}/pty":                           (*CreatePTYRequest)(nil),
	"POST /v1/sandboxes/{id}/pty/{pid}/resize":              (*PTYSize)(nil),
	"POST /v1/sandboxes/{id}/code/contexts":                 (*CreateCodeContextRequest)(nil),
	"POST /v1/sandboxes/{id}/code/contexts/{ctx}/interrupt": NoBody,
	"POST /v1/sandboxes/{id}/code/contexts/{ctx}/restart":   NoBody,
	"POST /v1/sandboxes/{id}/code/run":                      (*RunCodeRequest)(nil),
	"POST /v1/sandboxes/{id}/code/run/stream":               (*RunCodeRequest)(nil),
	"POST /v1/sandboxes/{id}/desktop":                       (*StartDesktopRequest)(nil),
	"POST /v1/sandboxes/{id}/desktop/actions":               (*DesktopActionsRequest)(nil),
	"POST /v1/sandboxes/{id}/desktop/launch":                (*DesktopLaunchRequest)(nil),
	"POST /v1/sandboxes/{id}/desktop/open":                  (*DesktopOpenRequest)(nil),
	"POST /v1/templates":                                    (*ImportTemplateRequest)(nil),
	"POST /v1/templates/import":                             RawBody("an image archive (storage's image import)"),
	"POST /v1/templates/build":                              RawBody("a build spec and its context (FuzzParseBuildSpec)"),
	"POST /v1/templates/{name}/push":                        (*PushRequest)(nil),
	"POST /v1/templates/pull":                               (*PullRequest)(nil),
	"POST /v1/snapshots/{ref}/push":                         (*PushRequest)(nil),
	"POST /v1/snapshots/pull":                               (*PullRequest)(nil),
	"POST /v1/snapshots/import":                             RawBody("a snapshot stream (storage FuzzSnapshotStream)"),
	"POST /v1/keys":                                         (*CreateKeyRequest)(nil),
	"POST /v1/tenants":                                      (*CreateTenantRequest)(nil),
	"PATCH /v1/tenants/{name}":                              (*UpdateTenantRequest)(nil),
	"POST /v1/tickets":                                      (*TicketRequest)(nil),
}
