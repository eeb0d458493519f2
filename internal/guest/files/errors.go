package files

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// statusError overrides the status errdefs gives its class: 507 for a full
// disk, 413 for an archive over its limits. The code stays the class's.
type statusError struct {
	err    error
	status int
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// diskFull is ENOSPC or EDQUOT: the sandbox hit its disk limit.
func diskFull(p string, err error) error {
	return &statusError{
		err:    errdefs.Exhausted("disk limit reached: writing %s: %v; free space in the sandbox or raise its disk limit", p, err),
		status: http.StatusInsufficientStorage,
	}
}

// tooLarge is an uploaded archive over a limit.
func tooLarge(format string, args ...any) error {
	return &statusError{err: errdefs.Exhausted(format, args...), status: http.StatusRequestEntityTooLarge}
}

// writeError answers err as an api.ErrorBody.
func writeError(w http.ResponseWriter, err error) {
	code, status := errdefs.Code(err)
	var se *statusError
	if errors.As(err, &se) {
		status = se.status
	}
	writeJSON(w, status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: err.Error()}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// maxJSONBody caps request bodies of the JSON routes.
const maxJSONBody = 64 << 10

func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errdefs.Invalid("decoding request body: %v", err)
	}
	return nil
}
