package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/tracing/otlptest"
)

// TestOffIsNoop: with tracing off the provider is the no-op one, and the
// layers' Start, End and RoundTrip allocate nothing beyond the request.
func TestOffIsNoop(t *testing.T) {
	p, err := Setup(config.Tracing{SampleRatio: 1}, "test")
	if err != nil || p.On {
		t.Fatalf("Setup(off) = %+v, %v", p, err)
	}
	ctx, root := p.Tracer(Scope).Start(context.Background(), "api")
	if root.IsRecording() {
		t.Fatal("the off provider's span records")
	}
	if n := testing.AllocsPerRun(100, func() {
		_, sp := Start(ctx, "sandbox.Create")
		End(sp, nil)
	}); n != 0 {
		t.Errorf("Start and End with tracing off: %v allocations, want 0", n)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := RoundTrip(http.DefaultTransport, req)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(fmt.Sprintf("%T", resp.Body), "*closer.") {
		t.Error("RoundTrip wrapped the body with tracing off")
	}
	resp.Body.Close()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// TestExport: with an endpoint, spans chain through the context (api ->
// service -> guest, the guest's ending with its answer's body) and reach
// a real OTLP/HTTP receiver; an error marks its span.
func TestExport(t *testing.T) {
	rv := otlptest.Start(t)
	p, err := Setup(config.Tracing{Endpoint: rv.URL + "/", SampleRatio: 1}, "v-test")
	if err != nil || !p.On {
		t.Fatalf("Setup = %+v, %v", p, err)
	}
	guest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer guest.Close()

	ctx, api := p.Tracer(Scope).Start(context.Background(), "POST /v1/sandboxes/{id}/exec")
	sctx, svc := Start(ctx, "sandbox.Forward")
	req, _ := http.NewRequestWithContext(sctx, "POST", guest.URL+"/exec", nil)
	resp, err := RoundTrip(http.DefaultTransport, req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_, failed := Start(sctx, "driver.Create")
	End(failed, errors.New("boom"))
	End(svc, nil)
	api.End()
	sctx2, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(sctx2); err != nil { // exports what is queued
		t.Fatal(err)
	}

	spans := rv.Spans()
	root := otlptest.Find(spans, "POST /v1/sandboxes/{id}/exec", nil)
	if root == nil || root.Parent != "" || root.Service != "agentbox" {
		t.Fatalf("no root span in %+v", spans)
	}
	fwd := otlptest.Child(spans, root, "sandbox.Forward")
	if fwd == nil {
		t.Fatalf("no service span under the root: %+v", spans)
	}
	g := otlptest.Child(spans, fwd, "guest POST /exec")
	if g == nil || g.Attrs["http.response.status_code"] != "200" || g.Attrs["url.path"] != "/exec" {
		t.Errorf("guest span %+v, want POST /exec answered 200", g)
	}
	if d := otlptest.Child(spans, fwd, "driver.Create"); d == nil {
		t.Errorf("no failed driver span in %+v", spans)
	}
	if p := rv.Problems(); len(p) > 0 {
		t.Errorf("receiver: %v", p)
	}
}

// BenchmarkStartOff is what each layer pays with tracing off.
func BenchmarkStartOff(b *testing.B) {
	p, _ := Setup(config.Tracing{SampleRatio: 1}, "test")
	ctx, _ := p.Tracer(Scope).Start(context.Background(), "api")
	b.ReportAllocs()
	for b.Loop() {
		_, sp := Start(ctx, "sandbox.Create")
		End(sp, nil)
	}
}

// BenchmarkRequestSpanOff is the API's span with tracing off (the no-op
// provider's Start and End).
func BenchmarkRequestSpanOff(b *testing.B) {
	p, _ := Setup(config.Tracing{SampleRatio: 1}, "test")
	tr := p.Tracer(Scope)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, sp := tr.Start(ctx, "POST /v1/sandboxes")
		sp.End()
	}
}
