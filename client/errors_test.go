package client

import (
	"errors"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
)

// Every API code maps to the client's re-exported class and to no other.
func TestErrorClassesMatchCodes(t *testing.T) {
	classes := []struct {
		code  string
		class error
	}{
		{errdefs.CodeNotFound, ErrNotFound},
		{errdefs.CodeAlreadyExists, ErrAlreadyExists},
		{errdefs.CodeInvalidArgument, ErrInvalidArgument},
		{errdefs.CodeFailedPrecondition, ErrFailedPrecondition},
		{errdefs.CodeResourceExhausted, ErrResourceExhausted},
		{errdefs.CodeUnavailable, ErrUnavailable},
		{errdefs.CodePermissionDenied, ErrPermissionDenied},
		{errdefs.CodeUnauthenticated, ErrUnauthenticated},
		{errdefs.CodeDeadlineExceeded, ErrDeadlineExceeded},
		{errdefs.CodeInternal, ErrInternal},
		{errdefs.CodeUnimplemented, ErrUnimplemented},
	}
	for _, tt := range classes {
		t.Run(tt.code, func(t *testing.T) {
			err := errdefs.FromCode(tt.code, "message")
			for _, other := range classes {
				if got := errors.Is(err, other.class); got != (other.code == tt.code) {
					t.Errorf("errors.Is(%s error, class of %s) = %v", tt.code, other.code, got)
				}
			}
		})
	}
}

// node_unavailable is its own class and an unavailable one.
func TestNodeUnavailableIsUnavailable(t *testing.T) {
	err := errdefs.FromCode(errdefs.CodeNodeUnavailable, "node n2a does not answer")
	if !errors.Is(err, ErrNodeUnavailable) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("node_unavailable error %v: Is(ErrNodeUnavailable) %v, Is(ErrUnavailable) %v",
			err, errors.Is(err, ErrNodeUnavailable), errors.Is(err, ErrUnavailable))
	}
	if code, status := errdefs.Code(err); code != errdefs.CodeNodeUnavailable || status != 503 {
		t.Errorf("Code = %s %d, want node_unavailable 503", code, status)
	}
}
