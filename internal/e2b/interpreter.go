package e2b

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// The code interpreter of @e2b/code-interpreter (spec §5), port 49999, on
// agentbox's own (/code routes, docs/interpreter.md), whose events already
// have E2B's names and fields.

// codeContext is a context as E2B's SDK reads it.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func contextOf(cc *api.CodeContext) codeContext {
	return codeContext{ID: cc.ID, Language: cc.Language, Cwd: cc.Cwd}
}

// language is E2B's name of a language as agentbox's code contexts take it.
func language(l string) string {
	switch strings.ToLower(l) {
	case "js":
		return "javascript"
	case "ts":
		return "typescript"
	}
	return l
}

func (h *Handler) serveInterpreter(w http.ResponseWriter, r *http.Request, k *call, p string) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case r.Method == "GET" && p == "/health":
		writeJSON(w, http.StatusOK, "OK")
	case r.Method == "POST" && p == "/execute":
		h.execute(w, r, k)
	case r.Method == "POST" && p == "/contexts":
		var in struct {
			Language string `json:"language"`
			Cwd      string `json:"cwd"`
		}
		if err := decodeBody(r, &in); err != nil {
			writeAPIError(w, err)
			return
		}
		cc, err := k.c.CreateCodeContext(r.Context(), k.id, api.CreateCodeContextRequest{Language: language(in.Language), Cwd: in.Cwd, User: k.user})
		if err != nil {
			writeAPIError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, contextOf(cc))
	case r.Method == "GET" && p == "/contexts":
		ccs, err := k.c.ListCodeContexts(r.Context(), k.id)
		if err != nil {
			writeAPIError(w, err)
			return
		}
		out := make([]codeContext, 0, len(ccs))
		for i := range ccs {
			out = append(out, contextOf(&ccs[i]))
		}
		writeJSON(w, http.StatusOK, out)
	case r.Method == "POST" && len(parts) == 3 && parts[0] == "contexts" && parts[2] == "restart":
		if _, err := k.c.RestartCodeContext(r.Context(), k.id, parts[1]); err != nil {
			writeAPIError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, nil)
	case r.Method == "DELETE" && len(parts) == 2 && parts[0] == "contexts":
		if err := k.c.RemoveCodeContext(r.Context(), k.id, parts[1]); err != nil {
			writeAPIError(w, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	default:
		writeError(w, http.StatusNotImplemented, "agentbox's E2B API does not support "+r.Method+" "+p+" on the code interpreter; docs/e2b.md lists what it supports")
	}
}

// execute runs a cell and streams its events as NDJSON lines, one flushed
// write each and no blank line, ending with end_of_execution. An error
// before the first event is an HTTP status (404: no such context).
func (h *Handler) execute(w http.ResponseWriter, r *http.Request, k *call) {
	var in struct {
		Code      string            `json:"code"`
		ContextID string            `json:"context_id"`
		Language  string            `json:"language"`
		EnvVars   map[string]string `json:"env_vars"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeAPIError(w, err)
		return
	}
	if in.ContextID != "" && in.Language != "" {
		writeError(w, http.StatusBadRequest, "give context_id or language, not both")
		return
	}
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	started := false
	var werr error
	_, err := k.c.RunCode(r.Context(), k.id, api.RunCodeRequest{Code: in.Code, Context: in.ContextID, Language: language(in.Language), Env: in.EnvVars},
		func(ev api.CodeEvent) {
			if werr != nil {
				return
			}
			if !started {
				started = true
				w.Header().Set("Content-Type", "application/x-ndjson")
				w.WriteHeader(http.StatusOK)
			}
			b, err := json.Marshal(ev)
			if err != nil {
				werr = err
				return
			}
			if _, werr = w.Write(append(b, '\n')); werr == nil {
				flush()
			}
		})
	switch {
	case err == nil || r.Context().Err() != nil:
	case !started:
		if errors.Is(err, errdefs.ErrNotFound) {
			// E2B's SDK raises NotFoundError with the body as its text.
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(err.Error()))
			return
		}
		writeAPIError(w, err)
	default:
		h.log.Debug("e2b: a code run's stream ended without its end", "sandbox", k.id, "err", err)
		b, _ := json.Marshal(api.ErrorEvent(api.CodeError{Name: "UnexpectedEndOfExecution", Value: err.Error()}))
		_, _ = w.Write(append(b, '\n'))
	}
}
