// Package daemon wires `agentbox serve`: config, state, storage, drivers,
// the sandbox service and the API listeners, and shuts them down in order.
// Sandboxes outlive the daemon: a restarted daemon re-adopts them.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/posture"
	"github.com/agentbox/agentbox/internal/registry"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/server"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/version"

	// The isolation tiers.
	_ "github.com/agentbox/agentbox/drivers/container"
	_ "github.com/agentbox/agentbox/drivers/gvisor"
	_ "github.com/agentbox/agentbox/drivers/microvm"
)

// Run serves until ctx is done or SIGINT/SIGTERM arrives.
func Run(ctx context.Context, configPath string) error {
	cfg, err := config.Load(configPath)
	if err != nil {
		return err
	}
	log := newLogger(cfg.LogLevel)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Serve(ctx, &cfg, log)
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// Serve runs the daemon with cfg until ctx is done: a node, or a fleet
// gateway (gateway.go).
func Serve(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	if cfg.IsGateway() {
		return serveGateway(ctx, cfg, log)
	}
	if os.Geteuid() != 0 {
		return errors.New("agentbox serve must run as root: it creates namespaces, cgroups and mounts")
	}
	closeInheritedOnExec() // fds_linux.go
	var gatewayKey string
	if f := cfg.Fleet.GatewayKeyFile; f != "" { // read first: a bad one stops the start early
		k, err := config.ReadFleetKey("fleet.gateway_key_file", f)
		if err != nil {
			return err
		}
		gatewayKey = k
	}
	for _, d := range []string{cfg.DataDir, cfg.RunDir, filepath.Dir(cfg.Socket)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
		// Sandbox processes (an unprivileged host uid) must traverse these
		// to reach their own layers and run dirs, and nothing more.
		_ = os.Chmod(d, 0o711)
	}
	kn, err := joinKube(ctx, cfg, log) // settles an "auto" node_id before anything uses it (kube.go)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.StatePath())
	if err != nil {
		return fmt.Errorf("opening state: %w", err)
	}
	defer st.Close()
	secret, created, err := auth.EnsureAdminKey(ctx, st, cfg.DataDir)
	if err != nil {
		return fmt.Errorf("admin key: %w", err)
	}
	if created {
		log.Info("generated the admin API key", "file", cfg.AdminKeyPath())
	}
	_ = secret
	pool, err := storage.Open(ctx, storage.Options{
		DataDir:  cfg.DataDir,
		SizeGB:   int(cfg.StorageSizeGB),
		UIDBase:  cfg.UIDBase,
		UIDCount: cfg.UIDCount,
		Logger:   log,
	})
	if err != nil {
		return fmt.Errorf("opening storage: %w", err)
	}
	defer pool.Close()

	if err := raiseHostLimits(cfg, log); err != nil { // hostlimits_linux.go
		return err
	}
	if cfg.CgroupFavorDynmods {
		favorDynmods(log) // cheap cgroup migrations (favordynmods_linux.go)
	}
	guestBin, err := cfg.ResolveGuestBinary()
	if err != nil {
		return err
	}
	lxcfs := ensureLxcfs(ctx, cfg.LxcfsDir, cfg.RunDir, log) // lxcfs_linux.go
	if cfg.GvisorMemoryView {
		log.Warn("gvisor_memory_view is obsolete and ignored: gvisor sandboxes always show their own CPU count and memory; remove it from the configuration")
	}
	ids := openIDRanges(cfg, pool.Root(), log) // idranges_linux.go
	if ids != nil {
		defer ids.Close() // after the drivers: deferred calls run last first
		if err := reserveIDRanges(ctx, st, ids, log); err != nil {
			return fmt.Errorf("reserving the sandboxes' uid ranges: %w", err)
		}
	}
	drivers := map[string]driver.Driver{}
	unavailable := map[string]error{} // for GET /v1/info
	for _, name := range driver.Names() {
		d, err := driver.New(name, driver.Options{
			GuestBinary:  guestBin,
			UIDBase:      cfg.UIDBase,
			UIDCount:     cfg.UIDCount,
			IDRanges:     ids,
			CgroupParent: cfg.CgroupParent,
			Seccomp:      true,
			RunRoot:      cfg.RunDir,
			Prespawn:     cfg.PrespawnInits,
			LxcfsDir:     lxcfs,
			CacheDir:     filepath.Join(cfg.DataDir, "cache", name),
			Logger:       log.With("driver", name),
		})
		if err != nil {
			log.Warn("isolation tier unavailable", "driver", name, "err", err)
			unavailable[name] = err
			continue
		}
		drivers[name] = d
		if c, ok := d.(io.Closer); ok {
			defer c.Close() // inits waiting for a sandbox, helper processes
		}
	}
	if len(drivers) == 0 {
		return errors.New("no isolation tier is available on this host; see the warnings above")
	}
	if _, ok := drivers[cfg.DefaultIsolation]; !ok {
		return fmt.Errorf("default_isolation %q is not available on this host", cfg.DefaultIsolation)
	}
	netm, err := network.NewManager(cfg.CgroupParent, cfg.NetworkPool(), log)
	if err != nil {
		return err
	}
	if err := netm.SetUpstreams(cfg.Network.DNSUpstream); err != nil {
		return err
	}
	defer netm.Close() // resolvers, proxies, firewall log reader
	svc := sandbox.New(sandbox.Options{Config: cfg, Store: st, Pool: pool, Drivers: drivers, Logger: log, Net: netm})
	hub := events.New()
	svc.PublishEvents(hub) // lifecycle events (observe.go)
	err = svc.Start(ctx)
	if ids != nil {
		ids.DropReserved() // the ranges of sandboxes not adopted
	}
	if err != nil {
		return fmt.Errorf("recovering sandboxes: %w", err)
	}
	defer svc.Close()
	// Build layers no template, sandbox or snapshot uses (a failed
	// build's cache, a removed template's) go at start.
	if _, err := svc.GCLayers(ctx); err != nil {
		log.Warn("removing unused build layers", "err", err)
	}

	authn := auth.New(st, cfg.AdminKeyPath(), log)
	if gatewayKey != "" { // a fleet's node (docs/cluster.md)
		authn.SetGatewayKey(gatewayKey)
	}
	var ranges metrics.UIDRanges
	if ids != nil {
		ranges = ids // not a nil *idrange.Pool in the interface
	}
	obs, err := startObservability(ctx, cfg, svc, pool, netm, authn, hub, ranges, log) // observe.go
	if err != nil {
		return err
	}
	defer obs.stop()
	api := server.New(server.Options{Service: svc, Pool: pool, Auth: authn, Logger: log, MaxBodyBytes: cfg.MaxRequestBodyBytes(),
		Store: st, RateLimit: cfg.Security.RateLimit, RateBurst: cfg.Security.RateBurst,
		Posture: posture.Options{CgroupParent: cfg.CgroupParent, UIDBase: cfg.UIDBase, UIDCount: cfg.UIDCount,
			HostPaths: []string{cfg.DataDir, cfg.RunDir}},
		Info:  daemonInfo(cfg, unavailable),
		Usage: obs.usage, Events: hub, E2BTemplateAliases: cfg.E2B.TemplateAliases,
		Registry: registry.New(cfg.Registry)})
	defer api.Close() // hosted MCP servers (docs/mcp.md)
	var ready func(string) error
	if kn != nil {
		ready = func(fp string) error {
			if err := kn.register(ctx, svc.DriverNames(), fp); err != nil {
				return err
			}
			return kn.watchPools(ctx, svc, log) // kube.go
		}
	}
	return listenAndServe(ctx, cfg, obs.metrics.Wrap(api), hub.Close, ready, log, // request ids, log lines, GET /metrics
		"agentbox serving", "drivers", svc.DriverNames())
}

// listenAndServe serves h on cfg's socket and TCP address until ctx is
// done. onShutdown runs when the server shuts down; ready, when not nil,
// once it serves, with the SHA-256 of its TLS certificate ("" over plain
// HTTP), and its error stops the server; what and args are the log line
// of a started server.
func listenAndServe(ctx context.Context, cfg *config.Config, h http.Handler, onShutdown func(), ready func(fingerprint string) error, log *slog.Logger, what string, args ...any) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	if onShutdown != nil {
		srv.RegisterOnShutdown(onShutdown) // event streams end (observe.go)
	}
	var lns []net.Listener
	var fingerprint string
	_ = os.Remove(cfg.Socket)
	oldMask := syscall.Umask(0o177)
	uln, err := net.Listen("unix", cfg.Socket)
	syscall.Umask(oldMask)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.Socket, err)
	}
	_ = os.Chmod(cfg.Socket, 0o600)
	lns = append(lns, uln)
	if cfg.Listen != "" {
		tc, err := tlsConfig(cfg, log)
		if err != nil {
			return err
		}
		if tc == nil && !cfg.ListenIsLoopback() {
			if !cfg.Security.InsecurePlainHTTP {
				return fmt.Errorf("listen %q is not a loopback address: serve TLS beyond loopback (security.tls = \"self-signed\", or tls_cert and tls_key) or set security.insecure_plain_http = true", cfg.Listen)
			}
			log.Warn("serving plain HTTP beyond loopback (insecure_plain_http): API keys cross the network in the clear", "listen", cfg.Listen)
		}
		tln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
		}
		if tc != nil {
			tln = tls.NewListener(tln, tc)
			fingerprint = Fingerprint(tc.Certificates[0].Certificate[0])
		}
		lns = append(lns, tln)
	}
	errc := make(chan error, len(lns))
	var addrs []string
	for _, ln := range lns {
		addrs = append(addrs, ln.Addr().String())
		go func() { errc <- srv.Serve(ln) }()
	}
	log.Info(what, append([]any{"version", version.Version, "listen", strings.Join(addrs, ","),
		"data_dir", cfg.DataDir, "admin_key", cfg.AdminKeyPath()}, args...)...)
	var failed error
	if ready != nil {
		failed = ready(fingerprint)
	}
	if failed == nil {
		select {
		case <-ctx.Done():
		case err := <-errc:
			if !errors.Is(err, http.ErrServerClosed) {
				return err
			}
		}
	}
	if cfg.IsGateway() {
		log.Info("shutting down")
	} else {
		log.Info("shutting down; sandboxes keep running and are re-adopted at the next start")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return failed
}
