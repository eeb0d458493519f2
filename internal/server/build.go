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
	"github.com/agentbox/agentbox/internal/storage"
)

// buildTemplate is POST /v1/templates/build?name=N (admin only): a
// multipart/form-data body with a "spec" part (the YAML build spec) first
// and an optional "context" part (a tar of the build context, plain or
// gzip), stored in a temporary file in the pool while the build runs. Bad
// input is refused with a JSON error before anything runs; from then on
// the answer is 200 with NDJSON api.BuildEvent lines, the last "done" or
// "error".
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) {
	if !principal(r.Context()).Admin {
		writeError(w, errdefs.New(errdefs.ErrPermissionDenied, "building a template needs an admin key: templates are shared by every tenant"))
		return
	}
	name := r.URL.Query().Get("name")
	if name == "" {
		writeError(w, errdefs.Invalid("the name query parameter is required: POST /v1/templates/build?name=NAME"))
		return
	}
	if err := storage.ValidTemplateName(name); err != nil {
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
	req := &build.Request{Name: name, Spec: spec, SpecName: specName}
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

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
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
	// A quiet step (a long compile, a slow download) still shows life.
	stop := make(chan struct{})
	defer close(stop)
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
	req.Emit = send
	b := &build.Builder{Pool: s.pool, Boxes: s.svc, Log: s.log}
	t, err := b.Build(r.Context(), req)
	if err != nil {
		code, _ := errdefs.Code(err)
		ev := api.BuildEvent{Type: api.BuildEventError, Error: &api.ErrorDetail{Code: code, Message: err.Error()}}
		var se *build.StepError
		if errors.As(err, &se) {
			ev.Step, ev.ExitCode = se.Step, &se.ExitCode
		}
		send(ev)
		return
	}
	out := s.pool.Describe(t)
	send(api.BuildEvent{Type: api.BuildEventDone, Template: &out})
}
