// Package tracing is the daemon's OpenTelemetry traces: the tracer
// provider that [tracing] in the config asks for (an OTLP/HTTP exporter,
// or the no-op provider when tracing is off), and the helpers that the
// layers a create or an exec passes through (API, service, driver, guest)
// use to add their spans.
//
// Only the API's span is started from the provider; every other span is a
// child of the span in its context, made by that span's own provider. So
// nothing is passed down but the context the calls already take, and with
// tracing off the API's span is a no-op one: Start then returns at once,
// allocating nothing.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/agentbox/agentbox/internal/closer"
	"github.com/agentbox/agentbox/internal/config"
)

// Scope names the daemon's tracer (the instrumentation scope of every
// span it makes).
const Scope = "github.com/agentbox/agentbox"

// Provider is the daemon's tracer provider and how to stop it.
type Provider struct {
	trace.TracerProvider
	// On is true when spans are exported (tracing.endpoint is set).
	On  bool
	sdk *sdktrace.TracerProvider
}

// Setup returns the provider cfg asks for: with an endpoint, one that
// batches spans and POSTs them as OTLP protobuf to <endpoint>/v1/traces;
// without, the no-op provider. version is the daemon's, for the spans'
// resource.
func Setup(cfg config.Tracing, version string) (*Provider, error) {
	if cfg.Endpoint == "" {
		return &Provider{TracerProvider: noop.NewTracerProvider()}, nil
	}
	exp, err := otlptracehttp.New(context.Background(),
		otlptracehttp.WithEndpointURL(strings.TrimSuffix(cfg.Endpoint, "/")+"/v1/traces"),
		otlptracehttp.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("tracing.endpoint %s: %w", cfg.Endpoint, err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(
			attribute.String("service.name", "agentbox"),
			attribute.String("service.version", version))))
	return &Provider{TracerProvider: tp, On: true, sdk: tp}, nil
}

// Shutdown exports the spans still queued and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// Start starts the span name as a child of ctx's span, when that one is
// recording; else it returns ctx and its (no-op) span unchanged. Set
// attributes under sp.IsRecording(), so that their values are not built
// for nothing.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(Scope).Start(ctx, name, opts...)
}

// End ends sp, marking it failed with err if err is not nil.
func End(sp trace.Span, err error) {
	if err != nil && sp.IsRecording() {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// RoundTrip sends r, a request to a guest agent, through rt inside a
// client span "guest METHOD PATH" when r's context is traced. The span
// ends when the answer's body is closed, so a streamed exec's span is the
// whole stream; an upgraded connection's body stays an io.ReadWriteCloser.
func RoundTrip(rt http.RoundTripper, r *http.Request) (*http.Response, error) {
	if !trace.SpanFromContext(r.Context()).IsRecording() {
		return rt.RoundTrip(r)
	}
	ctx, sp := Start(r.Context(), "guest "+r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindClient))
	sp.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path))
	resp, err := rt.RoundTrip(r.WithContext(ctx))
	if err != nil {
		End(sp, err)
		return nil, err
	}
	sp.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		sp.SetStatus(codes.Error, resp.Status)
	}
	resp.Body = closer.Body(resp.Body, func() { sp.End() }) // a second End is ignored
	return resp, nil
}
