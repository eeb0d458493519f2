package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/tracing"
	"github.com/agentbox/agentbox/internal/usage"
	"github.com/agentbox/agentbox/internal/version"
)

// observability is the daemon's metrics, usage sampler, event hub and
// traces (docs/observability.md).
type observability struct {
	metrics *metrics.Metrics
	usage   *usage.Sampler
	stop    func()
}

// startObservability starts the usage sampler, the tracer provider
// ([tracing]) and, with metrics.listen, the separate metrics listener;
// stop ends them, exporting the spans still queued.
func startObservability(ctx context.Context, cfg *config.Config, svc *sandbox.Service, pool *storage.Pool,
	netm *network.Manager, authn *auth.Authenticator, hub *events.Hub, ranges metrics.UIDRanges, log *slog.Logger) (*observability, error) {
	sampler, err := usage.New(usage.Options{Source: svc, Disk: pool, CgroupParent: cfg.CgroupParent,
		Interval: cfg.Metrics.UsageInterval, Logger: log})
	if err != nil {
		return nil, err
	}
	tp, err := tracing.Setup(cfg.Tracing, version.Version)
	if err != nil {
		return nil, err
	}
	if tp.On {
		// The exporter's errors (a receiver down) go to the daemon's log.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
		log.Info("tracing: exporting spans over OTLP/HTTP", "endpoint", cfg.Tracing.Endpoint, "sample_ratio", cfg.Tracing.SampleRatio)
	}
	m := metrics.New(metrics.Options{Sandboxes: svc, Network: netm, Events: hub, Auth: authn,
		ScrapeToken: cfg.Metrics.ScrapeToken, DataDir: cfg.DataDir, UIDRanges: ranges, Logger: log, Tracer: tp.Tracer(tracing.Scope)})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); sampler.Run(ctx) }()
	o := &observability{metrics: m, usage: sampler}
	var msrv *http.Server
	if cfg.Metrics.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Metrics.Listen)
		if err != nil {
			cancel()
			<-done
			return nil, fmt.Errorf("listening on metrics.listen %s: %w", cfg.Metrics.Listen, err)
		}
		mux := http.NewServeMux()
		// With a scrape token the separate address wants it too.
		mux.Handle("GET "+metrics.Path, m.ScrapeHandler(cfg.Metrics.ScrapeToken != ""))
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
		go func() {
			if err := msrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Warn("metrics listener stopped", "err", err)
			}
		}()
		log.Info("metrics served", "listen", ln.Addr().String())
	}
	o.stop = func() {
		if msrv != nil {
			sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
			_ = msrv.Shutdown(sctx)
			c()
		}
		cancel()
		<-done
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing: exporting the last spans", "err", err)
		}
		c()
	}
	return o, nil
}
