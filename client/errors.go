package client

import "github.com/agentbox/agentbox/errdefs"

// The error classes of the API, re-exported so that SDK users need not
// import errdefs: every error a Client method returns for an API failure
// matches exactly one of them with errors.Is, e.g.
//
//	if errors.Is(err, client.ErrNotFound) { ... }
//
// errdefs.Code(err) gives the API's code ("not_found", ...).
var (
	ErrNotFound           = errdefs.ErrNotFound           // 404 not_found
	ErrAlreadyExists      = errdefs.ErrAlreadyExists      // 409 already_exists
	ErrInvalidArgument    = errdefs.ErrInvalidArgument    // 400 invalid_argument
	ErrFailedPrecondition = errdefs.ErrFailedPrecondition // 409 failed_precondition
	ErrResourceExhausted  = errdefs.ErrResourceExhausted  // 429 resource_exhausted
	ErrUnavailable        = errdefs.ErrUnavailable        // 503 unavailable
	ErrPermissionDenied   = errdefs.ErrPermissionDenied   // 403 permission_denied
	ErrUnauthenticated    = errdefs.ErrUnauthenticated    // 401 unauthenticated
	ErrDeadlineExceeded   = errdefs.ErrDeadlineExceeded   // 504 deadline_exceeded
	ErrInternal           = errdefs.ErrInternal           // 500 internal
	ErrUnimplemented      = errdefs.ErrUnimplemented      // 501 unimplemented (a gateway, docs/cluster.md)
)

// ErrNodeUnavailable is the 503 node_unavailable of a gateway whose node
// holding the sandbox does not answer (docs/cluster.md). It is also an
// ErrUnavailable: errors.Is(err, ErrUnavailable) holds for it.
var ErrNodeUnavailable = errdefs.ErrNodeUnavailable
