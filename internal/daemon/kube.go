package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/gateway"
	"github.com/agentbox/agentbox/internal/kube"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// kubeNode is a node's membership in a Kubernetes fleet ([kubernetes],
// docs/cluster.md): its id claimed through the cluster when node_id is
// "auto", and its registration once it serves.
type kubeNode struct {
	c    *kube.Client
	node kube.Node
	cfg  *config.Config
}

// joinKube connects to the cluster and settles the node's id (cfg.NodeID
// is the claimed one afterwards). nil without [kubernetes].
func joinKube(ctx context.Context, cfg *config.Config, log *slog.Logger) (*kubeNode, error) {
	if !cfg.Kubernetes.Enabled {
		return nil, nil
	}
	c, err := kube.New(cfg.Kubernetes, log.With("kubernetes", cfg.Kubernetes.KubeNamespace()))
	if err != nil {
		return nil, err
	}
	u, err := advertiseURL(cfg)
	if err != nil {
		return nil, err
	}
	k := &kubeNode{c: c, cfg: cfg, node: kube.Node{ID: cfg.NodeID, Host: kube.HostName(), DataDir: cfg.DataDir, URL: u}}
	if cfg.NodeID == config.NodeIDAuto {
		id, err := c.ClaimNodeID(ctx, filepath.Join(cfg.DataDir, "node_id"), k.node)
		if err != nil {
			return nil, err
		}
		cfg.NodeID, k.node.ID = id, id
	}
	return k, nil
}

// advertiseURL is the URL the node registers: kubernetes.advertise_url,
// else the pod's address (POD_IP) with listen's port, https when the API
// serves TLS.
func advertiseURL(cfg *config.Config) (string, error) {
	if u := cfg.Kubernetes.AdvertiseURL; u != "" {
		return u, nil
	}
	ip := os.Getenv("POD_IP")
	_, port, err := net.SplitHostPort(cfg.Listen)
	if ip == "" || cfg.Listen == "" || err != nil {
		return "", fmt.Errorf("kubernetes: the node's URL for gateways is unknown: set kubernetes.advertise_url, or POD_IP (the DaemonSet in deploy/ does) and listen (HOST:PORT)")
	}
	scheme := "https"
	if cfg.TLSMode() == "off" {
		scheme = "http"
	}
	return (&url.URL{Scheme: scheme, Host: net.JoinHostPort(ip, port)}).String(), nil
}

// register publishes the node, its tiers and certificate once it serves,
// and renews its Lease until ctx is done.
func (k *kubeNode) register(ctx context.Context, tiers []string, fingerprint string) error {
	n := k.node
	n.Tiers, n.Fingerprint = tiers, fingerprint
	return k.c.Register(ctx, n, k.cfg.Kubernetes.LeaseDuration)
}

// watchPools makes the node's warm pools its config's [[pool]] plus the
// cluster's AgentboxWarmPools, now and at every change, until ctx is
// done. A cluster pool the config has already (or that is not a valid
// pool here) is left out, with a warning.
func (k *kubeNode) watchPools(ctx context.Context, svc *sandbox.Service, log *slog.Logger) error {
	return k.c.WatchPools(ctx, func(ps []kube.Pool) {
		all := k.cfg.WarmPools()
		seen := map[string]bool{}
		for _, p := range all {
			seen[config.PoolKey(p)] = true
		}
		for _, cp := range ps {
			p, err := k.cfg.ResolvePool("AgentboxWarmPool "+cp.Name, cp.Pool)
			switch {
			case err != nil:
				log.Warn("warm pool from kubernetes left out", "pool", cp.Name, "err", err)
				continue
			case seen[config.PoolKey(p)]:
				log.Warn("warm pool from kubernetes left out: the node's config has the same pool", "pool", cp.Name)
				continue
			}
			seen[config.PoolKey(p)] = true
			all = append(all, p)
		}
		svc.SetPools(all)
		log.Info("warm pools", "config", len(k.cfg.Pools), "kubernetes", len(all)-len(k.cfg.Pools))
	})
}

// watchKube makes the gateway's fleet the config's nodes plus the
// cluster's, and its template catalog the cluster's AgentboxTemplates,
// now and at every change, until ctx is done. A node in both is the
// config's.
func watchKube(ctx context.Context, cfg *config.Config, gw *gateway.Gateway, log *slog.Logger) error {
	c, err := kube.New(cfg.Kubernetes, log.With("kubernetes", cfg.Kubernetes.KubeNamespace()))
	if err != nil {
		return err
	}
	static := map[string]bool{}
	for _, n := range cfg.Fleet.Nodes {
		static[n.ID] = true
	}
	if err := c.WatchTemplates(ctx, func(refs map[string]string) {
		gw.SetTemplateCatalog(refs)
		log.Info("template catalog from kubernetes", "templates", len(refs))
	}); err != nil {
		return err
	}
	return c.WatchMembers(ctx, func(ms []kube.Member) {
		all := make([]gateway.Member, 0, len(cfg.Fleet.Nodes)+len(ms))
		for _, n := range cfg.Fleet.Nodes {
			all = append(all, gateway.Member{FleetNode: n, Source: gateway.SourceConfig})
		}
		for _, m := range ms {
			if static[m.ID] {
				log.Warn("AgentboxNode has the id of a [[fleet.node]]; the config's is used", "node", m.ID)
				continue
			}
			all = append(all, gateway.Member{FleetNode: config.FleetNode{ID: m.ID, URL: m.URL, Fingerprint: m.Fingerprint},
				Source: gateway.SourceKubernetes, Down: m.Down})
		}
		if err := gw.SetMembers(all); err != nil {
			log.Error("the cluster's fleet is not usable; keeping the previous one", "err", err)
			return
		}
		for _, m := range ms {
			if m.Down != "" {
				log.Info("fleet node held down", "node", m.ID, "why", m.Down)
			}
		}
		log.Info("fleet membership from kubernetes", "nodes", len(ms))
	})
}

// syncTenants makes the gateway's tenants and keys the cluster's and
// keeps them so; the gateway's own admin key (secret) stays its own.
func syncTenants(ctx context.Context, cfg *config.Config, st *store.Store, secret string, log *slog.Logger) (gateway.SharedTenants, error) {
	c, err := kube.New(cfg.Kubernetes, log.With("kubernetes", cfg.Kubernetes.KubeNamespace()))
	if err != nil {
		return nil, err
	}
	k, err := st.KeyByHash(ctx, auth.Hash(secret))
	if err != nil {
		return nil, fmt.Errorf("the gateway's admin key: %w", err)
	}
	t, err := c.SyncTenants(ctx, st, k.ID)
	if err != nil {
		return nil, err
	}
	log.Info("tenants and API keys from kubernetes", "namespace", cfg.Kubernetes.KubeNamespace())
	return t, nil
}
