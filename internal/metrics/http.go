package metrics

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// Path is where the exposition is served.
const Path = "/metrics"

// RequestIDHeader carries a request's id, in both directions: a client
// may send one (up to 64 letters, digits, '-', '_' or '.'), else the
// daemon makes one.
const RequestIDHeader = "X-Request-Id"

// operations maps the API's route patterns to the operation they count as.
var operations = map[string]string{
	"POST /v1/sandboxes":                          "create",
	"DELETE /v1/sandboxes/{id}":                   "destroy",
	"POST " + api.SandboxPrefix + "/exec":         "exec",
	"POST " + api.SandboxPrefix + "/exec/stream":  "exec",
	"POST " + api.SandboxPrefix + "/processes":    "exec",
	"GET " + api.SandboxPrefix + "/files":         "file_read",
	"GET " + api.SandboxPrefix + "/files/archive": "file_read",
	"PUT " + api.SandboxPrefix + "/files":         "file_write",
	"PUT " + api.SandboxPrefix + "/files/archive": "file_write",
	"POST /v1/sandboxes/{id}/fork":                "fork",
	"POST /v1/sandboxes/{id}/snapshots":           "snapshot",
	"POST /v1/sandboxes/{id}/reset":               "reset",
	"POST /v1/sandboxes/{id}/pause":               "pause",
	"POST /v1/sandboxes/{id}/resume":              "resume",
}

// routeTable finds a request's route pattern without serving it.
type routeTable struct{ mux *http.ServeMux }

func newRouteTable() routeTable {
	mux := http.NewServeMux()
	nop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, r := range api.Routes {
		mux.Handle(r.Pattern(), nop)
	}
	mux.Handle("GET "+Path, nop)
	return routeTable{mux}
}

func (t routeTable) pattern(r *http.Request) string {
	_, p := t.mux.Handler(r)
	return p
}

// serverSpan is made once: an option built per request allocates.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

type infoKey struct{}

// info is what the server tells the wrapper about a request.
type info struct{ tenant string }

// NoteTenant records the authenticated request's tenant for its log line.
func NoteTenant(ctx context.Context, tenant string) {
	if in, ok := ctx.Value(infoKey{}).(*info); ok {
		in.tenant = tenant
	}
}

// Wrap returns next with a request id, a log line and the operation
// metrics for every request, serving GET /metrics itself (an admin key
// or the scrape token).
func (m *Metrics) Wrap(next http.Handler) http.Handler {
	scrape := m.ScrapeHandler(true)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rid := requestID(r.Header.Get(RequestIDHeader))
		w.Header().Set(RequestIDHeader, rid)
		in := &info{}
		pattern := m.routes.pattern(r)
		route := pattern
		if route == "" {
			route = "unmatched"
		}
		// The request's span: the root of the trace of everything it
		// causes (a no-op one when tracing is off).
		ctx, sp := m.o.Tracer.Start(context.WithValue(r.Context(), infoKey{}, in), route, serverSpan...)
		r = r.WithContext(ctx)
		rec := &recorder{ResponseWriter: w}
		op := operations[pattern]
		var l sbLabels
		switch op {
		case "":
		case "create":
			rec.keep = &bytes.Buffer{}
		default:
			// Before the handler: a destroy forgets the sandbox.
			l = m.labelsOf(sandboxID(r.URL.Path))
		}
		if pattern == "GET "+Path {
			scrape.ServeHTTP(rec, r)
		} else {
			next.ServeHTTP(rec, r)
		}
		took := time.Since(start)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		traceID := ""
		if sp.IsRecording() {
			sp.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route),
				attribute.String("url.path", r.URL.Path), attribute.Int("http.response.status_code", status),
				attribute.String("agentbox.request_id", rid), attribute.String("agentbox.tenant", in.tenant))
			if status >= 500 {
				sp.SetStatus(codes.Error, http.StatusText(status))
			}
			traceID = sp.SpanContext().TraceID().String()
		}
		sp.End()
		m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
		if op != "" {
			if op == "create" {
				var sb struct{ Template, Isolation string }
				if status < 300 && json.Unmarshal(rec.keep.Bytes(), &sb) == nil {
					l = sbLabels{sb.Template, sb.Isolation}
				}
			}
			m.observeOp(op, l.template, l.tier, outcome(status), took)
		}
		if traceID != "" {
			m.log.Info("request", "request_id", rid, "method", r.Method, "route", route, "path", r.URL.Path,
				"tenant", in.tenant, "status", status, "took", took, "trace_id", traceID)
			return
		}
		m.log.Info("request", "request_id", rid, "method", r.Method, "route", route, "path", r.URL.Path,
			"tenant", in.tenant, "status", status, "took", took)
	})
}

// ScrapeHandler serves the exposition; with auth it wants the scrape
// token or an admin key.
func (m *Metrics) ScrapeHandler(auth bool) http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: nil})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if auth {
			if err := m.authorize(r); err != nil {
				code, status := errdefs.Code(err)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: err.Error(),
					RequestID: w.Header().Get(RequestIDHeader)}})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (m *Metrics) authorize(r *http.Request) error {
	if tok := m.o.ScrapeToken; tok != "" {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(tok)) == 1 {
			return nil
		}
	}
	if m.o.Auth == nil {
		return errdefs.New(errdefs.ErrUnauthenticated, "GET /metrics needs the scrape token (metrics.scrape_token) as a bearer token")
	}
	p, err := m.o.Auth.Authenticate(r.Context(), r)
	if err != nil {
		if errors.Is(err, errdefs.ErrUnauthenticated) {
			return errdefs.New(errdefs.ErrUnauthenticated, "GET /metrics needs an admin key or the scrape token (metrics.scrape_token) as a bearer token: %v", err)
		}
		return err
	}
	if !p.Admin {
		return errdefs.New(errdefs.ErrPermissionDenied, "GET /metrics needs an admin key or the scrape token (metrics.scrape_token); this key is tenant %q's", p.Tenant)
	}
	return nil
}

func outcome(status int) string {
	switch {
	case status < 400:
		return "ok"
	case status == http.StatusTooManyRequests:
		return "exhausted"
	case status < 500:
		return "rejected"
	default:
		return "error"
	}
}

// requestID returns the client's id if it is a sane one, else a new one.
func requestID(sent string) string {
	if n := len(sent); n > 0 && n <= 64 && strings.Trim(sent, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == "" {
		return sent
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// recorder notes the status and, for a create, keeps the start of the
// body (the sandbox's template and tier label the operation).
type recorder struct {
	http.ResponseWriter
	status int
	keep   *bytes.Buffer
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.keep != nil && w.keep.Len() < 64<<10 {
		w.keep.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *recorder) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return c, brw, err
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sandboxID is the {id} of a /v1/sandboxes/{id}/... path.
func sandboxID(path string) string {
	f := strings.SplitN(path, "/", 5) // "", v1, sandboxes, id, rest
	if len(f) < 4 {
		return ""
	}
	return f[3]
}
