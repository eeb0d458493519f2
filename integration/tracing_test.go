package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/tracing/otlptest"
)

// TestTracing: with [tracing] off (the default) nothing is exported,
// even with the OTLP environment variables pointing at a receiver; with
// tracing.endpoint set, a create and an exec each export a trace whose
// spans chain API -> service -> driver -> guest (create) and API ->
// service -> guest (exec: the driver's part there is the connection,
// made once and kept), to a real OTLP/HTTP receiver that decodes the
// protobuf requests.
func TestTracing(t *testing.T) {
	ctx := context.Background()
	rv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rv.URL+"/v1/traces")

	// Off: a create, an exec and a destroy. Stopping the daemon exports
	// whatever it queued, so after the stop nothing may have come.
	off := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	mustSh(t, off, "true")
	if err := env.client.DestroySandbox(ctx, off); err != nil {
		t.Fatal(err)
	}
	restartDaemon(t, func() {
		if n := rv.Posts(); n != 0 {
			t.Errorf("with tracing off the receiver got %d requests", n)
		}
		env.cfg.Tracing.Endpoint = rv.URL
	})
	t.Cleanup(func() {
		restartDaemon(t, func() { env.cfg.Tracing.Endpoint = "" })
	})

	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	if got := mustSh(t, id, "echo traced"); got != "traced" {
		t.Fatalf("exec: %q", got)
	}
	var (
		spans                                    []otlptest.Span
		create, svc, drv, guest, exec, fwd, gRun *otlptest.Span
	)
	sb := map[string]string{"agentbox.sandbox": id}
	for deadline := time.Now().Add(time.Minute); ; {
		spans = rv.Spans()
		create, drv, guest, exec, gRun = nil, nil, nil, nil, nil
		if svc = otlptest.Find(spans, "sandbox.Create", sb); svc != nil {
			create = otlptest.Parent(spans, svc)
			if drv = otlptest.Child(spans, svc, "driver.Create"); drv != nil {
				guest = otlptest.Child(spans, drv, "guest ")
			}
		}
		if fwd = otlptest.Find(spans, "sandbox.Forward", sb); fwd != nil {
			exec = otlptest.Parent(spans, fwd)
			gRun = otlptest.Child(spans, fwd, "guest ")
		}
		if create != nil && guest != nil && exec != nil && gRun != nil {
			break
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range spans {
				names = append(names, s.Name+"("+s.SpanID+"<-"+s.Parent+")")
			}
			t.Fatalf("no whole create and exec traces of %s in a minute; spans: %v", id, names)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Create: API -> service -> driver -> guest.
	if create.Name != "POST /v1/sandboxes" || create.Parent != "" || create.Kind != tracepb.Span_SPAN_KIND_SERVER ||
		create.Attrs["http.route"] != "POST /v1/sandboxes" || create.Attrs["http.response.status_code"] != "201" ||
		create.Service != "agentbox" {
		t.Errorf("the create's root span: %+v", create)
	}
	if svc.Attrs["agentbox.template"] != "busybox" || drv.Attrs["agentbox.tier"] != "container" {
		t.Errorf("service span %+v, driver span %+v: want the template and the tier", svc, drv)
	}
	if guest.Name != "guest GET /ping" || guest.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("the create's guest span: %+v", guest)
	}
	for _, n := range []string{"storage.CreateLayer", "network.Prepare"} {
		if otlptest.Child(spans, svc, n) == nil {
			t.Errorf("no %s span under sandbox.Create", n)
		}
	}
	// Exec: API -> service -> guest.
	if exec.Name != "POST "+api.SandboxPrefix+"/exec" || exec.Parent != "" || exec.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("the exec's root span: %+v", exec)
	}
	if gRun.Name != "guest POST /exec" || gRun.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("the exec's guest span: %+v", gRun)
	}
	if create.TraceID == exec.TraceID {
		t.Errorf("the create and the exec share trace %s; want one trace per request", create.TraceID)
	}
	if p := rv.Problems(); len(p) > 0 {
		t.Errorf("the receiver's problems with what it got: %v", p)
	}
	for _, s := range spans {
		if s.Attrs["agentbox.sandbox"] == off || strings.Contains(s.Attrs["url.path"], off) {
			t.Errorf("a span of the sandbox made while tracing was off: %+v", s)
		}
	}
}
