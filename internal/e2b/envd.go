package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

// E2B's in-sandbox API, envd (spec §4): the SDKs send every request to one
// base URL and name the sandbox in E2b-Sandbox-Id and the port in
// E2b-Sandbox-Port.

// call is one envd request: the sandbox, the client acting as the
// caller's key, and the Linux user the SDK asked for ("" for the
// template's) with that user's home, once looked up.
type call struct {
	id   string
	c    *client.Client
	user string
	home string
}

type rpc func(h *Handler, w http.ResponseWriter, r *http.Request, k *call)

var rpcs = map[string]rpc{
	"/process.Process/Start":      (*Handler).processStart,
	"/process.Process/Connect":    (*Handler).processConnect,
	"/process.Process/List":       (*Handler).processList,
	"/process.Process/SendInput":  (*Handler).processSendInput,
	"/process.Process/CloseStdin": (*Handler).processCloseStdin,
	"/process.Process/SendSignal": (*Handler).processSendSignal,
	"/process.Process/Update":     (*Handler).processUpdate,

	"/filesystem.Filesystem/Stat":     (*Handler).fsStat,
	"/filesystem.Filesystem/ListDir":  (*Handler).fsListDir,
	"/filesystem.Filesystem/MakeDir":  (*Handler).fsMakeDir,
	"/filesystem.Filesystem/Move":     (*Handler).fsMove,
	"/filesystem.Filesystem/Remove":   (*Handler).fsRemove,
	"/filesystem.Filesystem/WatchDir": (*Handler).fsWatchDir,
}

func (h *Handler) serveSandbox(w http.ResponseWriter, r *http.Request, c *client.Client, p string) {
	k := &call{id: r.Header.Get("E2b-Sandbox-Id"), c: c}
	if port := r.Header.Get("E2b-Sandbox-Port"); port != "" && port != envdPort {
		if port == interpreterPort {
			h.serveInterpreter(w, r, k, p)
			return
		}
		writeError(w, http.StatusNotImplemented, "agentbox's E2B API serves only envd (port 49983) and the code interpreter (49999), not port "+port)
		return
	}
	k.user = basicUser(r)
	if u := r.URL.Query().Get("username"); u != "" {
		k.user = u
	}
	if fn, ok := rpcs[p]; ok {
		if r.Method != http.MethodPost {
			writeConnectUnaryError(w, connectError{Code: "unimplemented", Message: "Connect calls are POST; GET is not supported"})
			return
		}
		if err := h.lookupUser(r.Context(), k); err != nil {
			e := h.rpcError(r, k, err)
			if isStream(r) {
				newStream(w).end(e)
			} else {
				writeConnectUnaryError(w, *e)
			}
			return
		}
		fn(h, w, r, k)
		return
	}
	switch r.Method + " " + p {
	case "GET /health":
		h.health(w, r, k)
	case "GET /envs":
		h.envs(w, r, k)
	case "GET /files", "POST /files":
		if err := h.lookupUser(r.Context(), k); err != nil {
			h.writeEnvdError(w, r, k, err)
			return
		}
		if r.Method == http.MethodGet {
			h.download(w, r, k)
		} else {
			h.upload(w, r, k)
		}
	default:
		if isRPC(r) {
			writeConnectUnaryError(w, connectError{Code: "unimplemented", Message: "agentbox's E2B API does not support " + p + " yet; docs/e2b.md lists what it supports"})
			return
		}
		writeError(w, http.StatusNotImplemented, "agentbox's E2B API does not support "+r.Method+" "+p+" in a sandbox yet; docs/e2b.md lists what it supports")
	}
}

// basicUser is the user an RPC names in "Authorization: Basic
// base64(user:)": E2B uses it to choose the Linux user, not to
// authenticate.
func basicUser(r *http.Request) string {
	scheme, v, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return ""
	}
	u, _, _ := strings.Cut(string(b), ":")
	return u
}

// isStream reports whether r is a Connect server-stream call (its
// request is one enveloped message).
func isStream(r *http.Request) bool {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return strings.HasPrefix(ct, "application/connect+")
}

// maxPasswd bounds how much of a sandbox's /etc/passwd is read: the
// file belongs to the sandbox.
const maxPasswd = 4 << 20

// lookupUser resolves the user a call names, as envd does with its
// user.Lookup: by name in the sandbox's /etc/passwd, which gives the
// user's home. A name the sandbox does not know is refused the way envd
// refuses it: unauthenticated (HTTP 401), which the SDKs raise as
// AuthenticationError. No user named: nothing to do, the template's user
// applies. E2B's templates have the users root and user; agentbox's base
// template has both too, other templates have whom their image has.
func (h *Handler) lookupUser(ctx context.Context, k *call) error {
	if k.user == "" || k.home != "" {
		return nil
	}
	body, err := k.c.ReadFile(ctx, k.id, "/etc/passwd")
	if errors.Is(err, errdefs.ErrNotFound) {
		// No passwd at all (or the sandbox is gone: the call's own
		// request says which): root is still root.
		if _, gerr := k.c.GetSandbox(ctx, k.id); gerr != nil {
			return err
		}
		if k.user == "root" {
			k.home = "/root"
			return nil
		}
		return unknownUser(k.user)
	}
	if err != nil {
		return err
	}
	defer body.Close()
	db, err := io.ReadAll(io.LimitReader(body, maxPasswd))
	if err != nil {
		return err
	}
	home, ok := passwdHome(db, k.user)
	if !ok {
		return unknownUser(k.user)
	}
	k.home = home
	return nil
}

func unknownUser(name string) error {
	return errdefs.New(errdefs.ErrUnauthenticated, "error looking up user %q: the sandbox has no such user (its /etc/passwd); E2B's users root and user exist in agentbox's base template", name)
}

// passwdHome finds name in an /etc/passwd and returns its home ("/" when
// the entry names none).
func passwdHome(db []byte, name string) (string, bool) {
	for line := range strings.SplitSeq(string(db), "\n") {
		f := strings.Split(strings.TrimSuffix(line, "\r"), ":")
		if len(f) < 6 || f[0] != name {
			continue
		}
		if !strings.HasPrefix(f[5], "/") {
			return "/", true
		}
		return path.Clean(f[5]), true
	}
	return "", false
}

// health answers 204 while the sandbox runs and 502 otherwise, which the
// SDKs read as "not running". Like any request to a sandbox, it resumes
// a paused one created with autoResume, as E2B's proxy does.
func (h *Handler) health(w http.ResponseWriter, r *http.Request, k *call) {
	sb, err := k.c.GetSandbox(r.Context(), k.id)
	if err == nil && sb.State == api.StatePaused && sb.AutoResume {
		sb, err = k.c.ResumeSandbox(r.Context(), k.id)
	}
	if err == nil && sb.State == api.StateRunning {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	msg := "sandbox " + k.id + " is not running"
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		writeAPIError(w, err)
		return
	}
	writeError(w, http.StatusBadGateway, msg)
}

// envs answers the sandbox-wide environment variables (the create's
// envVars).
func (h *Handler) envs(w http.ResponseWriter, r *http.Request, k *call) {
	sb, err := k.c.GetSandbox(r.Context(), k.id)
	if err != nil {
		h.writeEnvdError(w, r, k, err)
		return
	}
	env := sb.Env
	if env == nil {
		env = map[string]string{}
	}
	writeJSON(w, http.StatusOK, env)
}

// resolve makes p absolute as envd does: a relative path or one starting
// with ~ is under the user's home, which for the template's own user is
// the template's workdir.
func (h *Handler) resolve(ctx context.Context, k *call, p string) (string, error) {
	if p == "" {
		return "", errdefs.Invalid("a path is required")
	}
	if strings.HasPrefix(p, "/") {
		return path.Clean(p), nil
	}
	home, err := h.home(ctx, k)
	if err != nil {
		return "", err
	}
	p = strings.TrimPrefix(strings.TrimPrefix(p, "~"), "/")
	return path.Join(home, p), nil
}

func (h *Handler) home(ctx context.Context, k *call) (string, error) {
	if k.user != "" {
		if err := h.lookupUser(ctx, k); err != nil {
			return "", err
		}
		return k.home, nil
	}
	sb, err := k.c.GetSandbox(ctx, k.id)
	if err != nil {
		return "", err
	}
	t, err := k.c.GetTemplate(ctx, sb.Template)
	if err != nil {
		return "", err
	}
	switch {
	case t.Workdir != "":
		return t.Workdir, nil
	case t.User == "" || t.User == "root":
		return "/root", nil
	}
	return "/home/" + t.User, nil
}

// writeEnvdError answers a failed envd REST call in E2B's shape; a sandbox
// that is gone is 502, which the SDKs read as "not running".
func (h *Handler) writeEnvdError(w http.ResponseWriter, r *http.Request, k *call, err error) {
	if msg, gone := h.gone(r, k, err); gone {
		writeError(w, http.StatusBadGateway, msg)
		return
	}
	writeAPIError(w, err)
}

// rpcError is the Connect error of a failed call; a sandbox that is gone
// is unavailable, which the SDKs raise as their TimeoutError, as for a
// sandbox E2B ended.
// cwdOf resolves a process's optional working directory (E2B's cwd, which
// may be relative to the user's home); "" when none is given.
func (h *Handler) cwdOf(r *http.Request, k *call, cwd *string) (string, error) {
	if cwd == nil || *cwd == "" {
		return "", nil
	}
	return h.resolve(r.Context(), k, *cwd)
}

func (h *Handler) rpcError(r *http.Request, k *call, err error) *connectError {
	if msg, gone := h.gone(r, k, err); gone {
		return &connectError{Code: "unavailable", Message: msg}
	}
	return errorOf(err)
}

// gone reports whether err, a not_found or failed_precondition, is the
// sandbox's own: it does not run (any more, or paused without
// autoResume), or the key cannot see it. Those are what E2B answers for
// a sandbox that does not run; the message says which.
func (h *Handler) gone(r *http.Request, k *call, err error) (string, bool) {
	if !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrFailedPrecondition) {
		return "", false
	}
	sb, gerr := k.c.GetSandbox(r.Context(), k.id)
	switch {
	case gerr != nil:
		return "sandbox " + k.id + " is not running", true
	case sb.State == api.StatePaused:
		return "sandbox " + k.id + " is paused; Sandbox.connect resumes it (or create it with lifecycle autoResume)", true
	case sb.State != api.StateRunning:
		return "sandbox " + k.id + " is not running", true
	}
	return "", false
}
