// Package reply is how the guest agent's route packages (code, desktop)
// read a JSON request body and write a JSON answer or an api.ErrorBody,
// the same way on every route.
package reply

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// Decode reads r's JSON body into v, refusing unknown fields and bodies
// over max bytes (tooBig is appended to that error: what to do instead).
// An empty body leaves v as it is: all defaults.
func Decode(w http.ResponseWriter, r *http.Request, v any, max int64, tooBig string) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, max))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var big *http.MaxBytesError
		if errors.As(err, &big) {
			return errdefs.Invalid("request body is over %d bytes%s", max, tooBig)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		return errdefs.Invalid("request is not valid JSON (%v); see api/openapi.yaml", err)
	}
	return nil
}

// Answer writes v with status, or err when it is not nil.
func Answer(w http.ResponseWriter, status int, v any, err error) {
	if err != nil {
		Error(w, err)
		return
	}
	JSON(w, status, v)
}

// JSON writes v as the answer, HTML characters unescaped.
func JSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// Error writes err as an api.ErrorBody with its class's status.
func Error(w http.ResponseWriter, err error) {
	code, status := errdefs.Code(err)
	JSON(w, status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: err.Error()}})
}
