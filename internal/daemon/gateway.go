package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/gateway"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/store"
)

// serveGateway runs a fleet gateway (role = "gateway", docs/cluster.md):
// the store of tenants and API keys in data_dir (with the admin key file
// a node makes, so the CLI works against a gateway as against a node),
// the API on socket and listen, and the gateway's handler. No driver,
// storage, cgroup, network, lxcfs or warm pool: a gateway runs no
// sandbox, and needs no root beyond what its paths ask.
func serveGateway(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	key, err := config.ReadFleetKey("fleet.key_file", cfg.Fleet.KeyFile)
	if err != nil {
		return err
	}
	for _, d := range []string{cfg.DataDir, filepath.Dir(cfg.Socket)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	st, err := store.Open(ctx, cfg.StatePath())
	if err != nil {
		return fmt.Errorf("opening state: %w", err)
	}
	defer st.Close()
	secret, created, err := auth.EnsureAdminKey(ctx, st, cfg.DataDir)
	if err != nil {
		return fmt.Errorf("admin key: %w", err)
	} else if created {
		log.Info("generated the admin API key", "file", cfg.AdminKeyPath())
	}
	var shared gateway.SharedTenants
	if cfg.Kubernetes.Enabled && cfg.Kubernetes.Tenants { // tenants and keys from the cluster (kube.go)
		if shared, err = syncTenants(ctx, cfg, st, secret, log); err != nil {
			return err
		}
	}
	authn := auth.New(st, cfg.AdminKeyPath(), log)
	info := daemonInfo(cfg, nil)
	info.Tiers, info.RunDir = nil, "" // the nodes' (GET /v1/info merges them)
	gw, err := gateway.New(gateway.Options{
		Nodes: cfg.Fleet.Nodes, Key: key, PollInterval: cfg.Fleet.PollInterval, Candidates: cfg.Fleet.Candidates, Registry: cfg.Fleet.Registry,
		Store: st, Auth: authn, MaxBodyBytes: cfg.MaxRequestBodyBytes(), PreviewDomain: cfg.Network.PreviewDomain,
		RateLimit: cfg.Security.RateLimit, RateBurst: cfg.Security.RateBurst, Info: info, Logger: log.With("role", "gateway"),
		E2BTemplateAliases: cfg.E2B.TemplateAliases, Shared: shared,
	})
	if err != nil {
		return err
	}
	gw.Start(ctx)
	defer gw.Close()
	if cfg.Kubernetes.Enabled { // the cluster's nodes too (kube.go)
		if err := watchKube(ctx, cfg, gw, log); err != nil {
			return err
		}
	}
	for _, n := range gw.Nodes() {
		if n.Available {
			log.Info("fleet node available", "node", n.ID, "url", n.URL)
		} else {
			log.Warn("fleet node unavailable", "node", n.ID, "url", n.URL, "err", n.LastError)
		}
	}
	m := metrics.New(metrics.Options{Auth: authn, ScrapeToken: cfg.Metrics.ScrapeToken, Logger: log})
	return listenAndServe(ctx, cfg, m.Wrap(gw), nil, nil, log, "agentbox gateway serving", "nodes", len(gw.Nodes()))
}
