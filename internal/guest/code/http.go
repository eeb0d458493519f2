package code

import (
	"encoding/json"
	"net/http"
	"sync"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/guest/reply"
)

// maxRunBody caps a run or create request (the cell's code is in it).
const maxRunBody = 16 << 20

// Register adds the /code routes of the guest protocol to mux.
func (m *Manager) Register(mux *http.ServeMux) {
	mux.HandleFunc(proto.CodeContextCreate.Pattern(), m.handleCreate)
	mux.HandleFunc(proto.CodeContextList.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, api.CodeContextList{Contexts: m.List()})
	})
	mux.HandleFunc(proto.CodeContextGet.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		c, err := m.Get(r.PathValue("ctx"))
		answer(w, http.StatusOK, c, err)
	})
	mux.HandleFunc(proto.CodeContextDelete.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		if err := m.Delete(r.PathValue("ctx")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc(proto.CodeContextInterrupt.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		c, err := m.Interrupt(r.Context(), r.PathValue("ctx"))
		answer(w, http.StatusOK, c, err)
	})
	mux.HandleFunc(proto.CodeContextRestart.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		c, err := m.Restart(r.Context(), r.PathValue("ctx"))
		answer(w, http.StatusOK, c, err)
	})
	mux.HandleFunc(proto.CodeRun.Pattern(), m.handleRun)
	mux.HandleFunc(proto.CodeRunStream.Pattern(), m.handleRunStream)
}

func (m *Manager) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req api.CreateCodeContextRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	c, err := m.Create(r.Context(), req)
	answer(w, http.StatusCreated, c, err)
}

func (m *Manager) handleRun(w http.ResponseWriter, r *http.Request) {
	var req api.RunCodeRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	ex := api.Execution{Results: []api.CodeResult{}, Logs: api.CodeLogs{Stdout: []string{}, Stderr: []string{}}}
	if err := m.Run(r.Context(), req, ex.Add); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ex)
}

func (m *Manager) handleRunStream(w http.ResponseWriter, r *http.Request) {
	var req api.RunCodeRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	var mu sync.Mutex
	started := false
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	err := m.Run(r.Context(), req, func(ev api.CodeEvent) {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		enc.Encode(ev) // a write error means the client left: Run sees its context end
		rc.Flush()
	})
	if err != nil && !started {
		writeError(w, err)
	}
}

func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return reply.Decode(w, r, v, maxRunBody, "; send the code as a file and run it from there")
}

var (
	answer     = reply.Answer
	writeJSON  = reply.JSON
	writeError = reply.Error
)
