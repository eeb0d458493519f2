package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/build"
	"github.com/agentbox/agentbox/internal/build/builder"
)

// buildTemplate is POST /v1/templates/build?name=N: a multipart/form-data
// body with a "spec" part (the YAML build spec) first and an optional
// "context" part (a tar of the build context, plain or gzip), stored in a
// temporary file in the pool while the build runs. With a tenant's key
// the template is the tenant's, built within its disk quota; with an
// admin key it is public (internal/templates). Bad input, a name the
// caller may not use and a spent quota are refused with a JSON error
// before anything runs; from then on the answer is 200 with NDJSON
// api.BuildEvent lines, the last "done" or "error".
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if name == "" {
		writeError(w, errdefs.Invalid("the name query parameter is required: POST /v1/templates/build?name=NAME"))
		return
	}
	// A name that is invalid, public or another tenant's: before the
	// body is read.
	if err := s.tpl.CheckName(r.Context(), name); err != nil {
		writeError(w, err)
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, errdefs.Invalid("send multipart/form-data with a spec part (the YAML build spec) and an optional context part (a tar of the build context): %v", err))
		return
	}
	part, err := mr.NextPart()
	if err != nil || part.FormName() != "spec" {
		writeError(w, errdefs.Invalid("the first part of the body must be named spec and hold the YAML build spec"))
		return
	}
	specName := part.FileName()
	if specName == "" {
		specName = "spec"
	}
	data, err := io.ReadAll(io.LimitReader(part, build.MaxSpecBytes+1))
	if err != nil {
		writeError(w, errdefs.Invalid("reading the spec part: %v", err))
		return
	}
	spec, err := build.Parse(data)
	if err != nil {
		writeError(w, fmt.Errorf("%s: %w", specName, err))
		return
	}
	req := &builder.Request{Name: name, Spec: spec, SpecName: specName}
	part, err = mr.NextPart()
	switch {
	case errors.Is(err, io.EOF):
	case err != nil:
		writeError(w, errdefs.Invalid("reading the body: %v", err))
		return
	case part.FormName() != "context":
		writeError(w, errdefs.Invalid("unexpected part %q: send spec, then optionally context", part.FormName()))
		return
	default:
		f, err := os.CreateTemp(s.pool.Root(), ".tmp-build-")
		if err != nil {
			writeError(w, fmt.Errorf("storing the build context: %w", err))
			return
		}
		defer os.Remove(f.Name())
		n, err := io.Copy(f, io.LimitReader(part, build.MaxContextBytes+1))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			writeError(w, errdefs.Invalid("receiving the build context: %v", err))
			return
		}
		if n > build.MaxContextBytes {
			writeError(w, errdefs.Invalid("the build context is larger than %d bytes", int64(build.MaxContextBytes)))
			return
		}
		if req.Context, err = build.OpenContext(f.Name()); err != nil {
			writeError(w, err)
			return
		}
	}

	fl, _ := w.(http.Flusher)
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	last := time.Now()
	send := func(ev api.BuildEvent) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev)
		if fl != nil {
			fl.Flush()
		}
		last = time.Now()
	}
	stop := make(chan struct{})
	defer close(stop)
	started := false
	// ready: the build is accepted (its name and the tenant's quota
	// checked); from here on the answer is the NDJSON stream.
	ready := func() {
		started = true
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		// A quiet step (a long compile, a slow download) still shows life.
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					mu.Lock()
					quiet := time.Since(last) >= api.BuildKeepalive
					mu.Unlock()
					if quiet {
						send(api.BuildEvent{Type: api.BuildEventKeepalive})
					}
				}
			}
		}()
	}
	req.Emit = send
	t, err := s.tpl.Build(r.Context(), req, ready)
	if err != nil && !started {
		writeError(w, err)
		return
	}
	if err != nil {
		code, _ := errdefs.Code(err)
		ev := api.BuildEvent{Type: api.BuildEventError, Error: &api.ErrorDetail{Code: code, Message: err.Error()}}
		var se *builder.StepError
		if errors.As(err, &se) {
			ev.Step, ev.ExitCode = se.Step, &se.ExitCode
		}
		send(ev)
		return
	}
	out := s.tpl.Describe(t)
	send(api.BuildEvent{Type: api.BuildEventDone, Template: &out})
}

// buildHandlers are the routes this file serves (registered by routes,
// server.go, from api.Routes).
func (s *Server) buildHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /v1/templates/build": s.buildTemplate,
	}
}
