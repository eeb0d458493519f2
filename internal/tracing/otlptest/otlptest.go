// Package otlptest is an OTLP/HTTP trace receiver for tests: a real HTTP
// server on loopback that decodes every POST /v1/traces (a protobuf
// ExportTraceServiceRequest, as the daemon's exporter sends it) and keeps
// the spans, so that a test can check what the daemon exported.
package otlptest

import (
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, its ids in hex ("" for no parent).
type Span struct {
	Name, TraceID, SpanID, Parent string
	Kind                          tracepb.Span_SpanKind
	// Attrs are the span's attributes, as strings (ints in decimal).
	Attrs map[string]string
	// Service is its resource's service.name.
	Service string
}

// Receiver is a running receiver.
type Receiver struct {
	// URL is its base URL, http://127.0.0.1:<port>: the endpoint to
	// configure.
	URL string

	mu       sync.Mutex
	posts    int
	spans    []Span
	problems []string
}

// Start starts a receiver on loopback, closed when t ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rv := &Receiver{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(rv.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return rv
}

func (rv *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	rv.mu.Lock()
	defer rv.mu.Unlock()
	rv.posts++
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		rv.problems = append(rv.problems, "request "+r.Method+" "+r.URL.Path)
		http.NotFound(w, r)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		rv.problems = append(rv.problems, "content type "+ct)
	}
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		rv.problems = append(rv.problems, "decoding: "+err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = a.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				g := Span{Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					Parent: hex.EncodeToString(s.ParentSpanId), Kind: s.Kind, Attrs: map[string]string{}, Service: service}
				for _, a := range s.Attributes {
					g.Attrs[a.Key] = valueString(a.Value)
				}
				rv.spans = append(rv.spans, g)
			}
		}
	}
	b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func valueString(v interface {
	GetStringValue() string
	GetIntValue() int64
	GetBoolValue() bool
}) string {
	if s := v.GetStringValue(); s != "" {
		return s
	}
	if n := v.GetIntValue(); n != 0 {
		return strconv.FormatInt(n, 10)
	}
	if v.GetBoolValue() {
		return "true"
	}
	return ""
}

// Posts is how many requests it got, spans or not.
func (rv *Receiver) Posts() int {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return rv.posts
}

// Spans returns the spans received so far, in order of arrival.
func (rv *Receiver) Spans() []Span {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return append([]Span(nil), rv.spans...)
}

// Problems lists what was wrong with the requests (a path, a content
// type, a body that did not decode).
func (rv *Receiver) Problems() []string {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return append([]string(nil), rv.problems...)
}

// Find returns the first span named name whose attributes include attrs.
func Find(spans []Span, name string, attrs map[string]string) *Span {
	for i, s := range spans {
		if s.Name != name {
			continue
		}
		ok := true
		for k, v := range attrs {
			ok = ok && s.Attrs[k] == v
		}
		if ok {
			return &spans[i]
		}
	}
	return nil
}

// Parent returns s's parent among spans, or nil.
func Parent(spans []Span, s *Span) *Span {
	for i := range spans {
		if spans[i].SpanID == s.Parent && spans[i].TraceID == s.TraceID {
			return &spans[i]
		}
	}
	return nil
}

// Child returns a child of parent whose name starts with prefix, or nil.
func Child(spans []Span, parent *Span, prefix string) *Span {
	for i, s := range spans {
		if s.Parent == parent.SpanID && s.TraceID == parent.TraceID && strings.HasPrefix(s.Name, prefix) {
			return &spans[i]
		}
	}
	return nil
}
