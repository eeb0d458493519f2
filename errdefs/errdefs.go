// Package errdefs holds agentbox's small set of error classes. Every layer
// wraps one of these with %w and short lowercase context; the HTTP server
// translates them once into {"error": {"code", "message"}} with the matching
// status, and the SDKs translate them back.
package errdefs

import (
	"errors"
	"fmt"
	"net/http"
)

// The error classes. Compare with errors.Is.
var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrUnavailable        = errors.New("unavailable")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrUnauthenticated    = errors.New("unauthenticated")
	ErrDeadlineExceeded   = errors.New("deadline exceeded")
	ErrInternal           = errors.New("internal")
	// ErrUnimplemented: the server knows the route but does not serve it
	// (a gateway, for the routes it does not serve yet).
	ErrUnimplemented = errors.New("unimplemented")
	// ErrNodeUnavailable is ErrUnavailable where the reason is that the
	// fleet node holding the resource does not answer (a gateway's
	// answer): errors.Is(err, ErrUnavailable) holds for it too.
	ErrNodeUnavailable = fmt.Errorf("node unavailable: %w", ErrUnavailable)
)

// Stable codes, as they appear in API error bodies.
const (
	CodeNotFound           = "not_found"
	CodeAlreadyExists      = "already_exists"
	CodeInvalidArgument    = "invalid_argument"
	CodeFailedPrecondition = "failed_precondition"
	CodeResourceExhausted  = "resource_exhausted"
	CodeUnavailable        = "unavailable"
	CodePermissionDenied   = "permission_denied"
	CodeUnauthenticated    = "unauthenticated"
	CodeDeadlineExceeded   = "deadline_exceeded"
	CodeInternal           = "internal"
	CodeUnimplemented      = "unimplemented"
	CodeNodeUnavailable    = "node_unavailable"
)

var classes = []struct {
	err    error
	code   string
	status int
}{
	// Sub-classes come before the class they wrap: Code answers the
	// first match.
	{ErrNodeUnavailable, CodeNodeUnavailable, http.StatusServiceUnavailable},
	{ErrNotFound, CodeNotFound, http.StatusNotFound},
	{ErrAlreadyExists, CodeAlreadyExists, http.StatusConflict},
	{ErrInvalidArgument, CodeInvalidArgument, http.StatusBadRequest},
	{ErrFailedPrecondition, CodeFailedPrecondition, http.StatusConflict},
	{ErrResourceExhausted, CodeResourceExhausted, http.StatusTooManyRequests},
	{ErrUnavailable, CodeUnavailable, http.StatusServiceUnavailable},
	{ErrPermissionDenied, CodePermissionDenied, http.StatusForbidden},
	{ErrUnauthenticated, CodeUnauthenticated, http.StatusUnauthorized},
	{ErrDeadlineExceeded, CodeDeadlineExceeded, http.StatusGatewayTimeout},
	{ErrInternal, CodeInternal, http.StatusInternalServerError},
	{ErrUnimplemented, CodeUnimplemented, http.StatusNotImplemented},
}

// Code returns the stable code and HTTP status for err; unknown errors are
// internal.
func Code(err error) (code string, status int) {
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return c.code, c.status
		}
	}
	return CodeInternal, http.StatusInternalServerError
}

// FromCode turns an API error code and message back into a typed error.
func FromCode(code, message string) error {
	for _, c := range classes {
		if c.code == code {
			return &Error{Class: c.err, Message: message}
		}
	}
	return &Error{Class: ErrInternal, Message: message}
}

// Error is an error with a class and a message meant for users. Its message
// is shown without the class prefix.
type Error struct {
	Class   error
	Message string
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Class }

// New returns an error of class with a formatted message.
func New(class error, format string, args ...any) error {
	return &Error{Class: class, Message: fmt.Sprintf(format, args...)}
}

// Convenience constructors.
func NotFound(format string, args ...any) error { return New(ErrNotFound, format, args...) }
func Invalid(format string, args ...any) error  { return New(ErrInvalidArgument, format, args...) }
func Precondition(format string, args ...any) error {
	return New(ErrFailedPrecondition, format, args...)
}
func Exhausted(format string, args ...any) error { return New(ErrResourceExhausted, format, args...) }
func Unavailable(format string, args ...any) error {
	return New(ErrUnavailable, format, args...)
}
