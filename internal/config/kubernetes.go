package config

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// NodeIDAuto is node_id's value for a node that picks its own id: with
// [kubernetes] on, it claims a free one through the cluster (an
// AgentboxNode object of that name) at its first start and keeps it in
// data_dir/node_id (docs/cluster.md).
const NodeIDAuto = "auto"

// Kubernetes ([kubernetes], docs/cluster.md) takes a fleet's membership
// from a Kubernetes cluster: each node registers an AgentboxNode object
// and renews a Lease; a gateway watches both. Nothing per sandbox is
// written to the cluster.
type Kubernetes struct {
	// Enabled (enabled): register (node) or watch (gateway). Default
	// false.
	Enabled bool `toml:"enabled"`
	// Kubeconfig (kubeconfig): a kubeconfig file; "" (the default) is the
	// pod's service account (in-cluster).
	Kubeconfig string `toml:"kubeconfig"`
	// Namespace (namespace) holds the nodes' Leases. "" (the default):
	// the pod's namespace (POD_NAMESPACE, else the service account's),
	// else "agentbox".
	Namespace string `toml:"namespace"`
	// AdvertiseURL (advertise_url), on a node: the API's URL as the
	// gateways reach it. "" (the default): http(s)://$POD_IP:<listen's
	// port>, https when [security] has TLS.
	AdvertiseURL string `toml:"advertise_url"`
	// LeaseDuration (lease_duration), on a node: how long its Lease holds
	// without a renewal; it renews every quarter of it. A gateway takes a
	// node whose Lease has expired out of placement. Default "40s" (the
	// kubelet's); 2s to 10m.
	LeaseDuration time.Duration `toml:"lease_duration"`
	// Tenants (tenants), on a gateway: its tenants and API keys are the
	// cluster's AgentboxTenant and AgentboxAPIKey objects, which every
	// gateway replica copies into its store and writes through; the
	// cluster is the truth (tenants and keys only in the store are
	// removed at start), but for the gateway's own admin key. Default
	// false: each gateway's store is its own.
	Tenants bool `toml:"tenants"`
}

// k8sNameRE is a DNS-1123 label, what a namespace name must be.
var k8sNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// KubeNamespace is the namespace of the nodes' Leases: the configured
// one, the pod's, or "agentbox".
func (k Kubernetes) KubeNamespace() string {
	if k.Namespace != "" {
		return k.Namespace
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && k8sNameRE.Match(b) {
		return string(b)
	}
	return "agentbox"
}

// validateKubernetes adds [kubernetes]'s problems to v.
func (c Config) validateKubernetes(v *validator) {
	k := c.Kubernetes
	if !k.Enabled {
		if c.NodeID == NodeIDAuto {
			v.addf("node_id = \"auto\" claims an id through the Kubernetes cluster: set [kubernetes] enabled = true, or give the node an id of its own (3 characters of a-z and 2-7)")
		}
		return
	}
	if k.Kubeconfig != "" && !filepath.IsAbs(k.Kubeconfig) {
		v.addf("kubernetes.kubeconfig must be an absolute path, or \"\" for the pod's service account; got %q", k.Kubeconfig)
	}
	if k.Namespace != "" && !k8sNameRE.MatchString(k.Namespace) {
		v.addf("kubernetes.namespace must be a Kubernetes namespace name (lowercase letters, digits and '-', at most 63), got %q", k.Namespace)
	}
	if k.LeaseDuration < 2*time.Second || k.LeaseDuration > 10*time.Minute {
		v.addf("kubernetes.lease_duration must be between 2s and 10m, got %s", k.LeaseDuration)
	}
	if k.Tenants && c.Role != RoleGateway {
		v.addf("kubernetes.tenants is a gateway's setting (its tenants and keys from the cluster); remove it from the node's config")
	}
	if c.Role == RoleGateway {
		if k.AdvertiseURL != "" {
			v.addf("kubernetes.advertise_url is a node's setting (the URL it registers); remove it from the gateway's config")
		}
		return
	}
	if c.NodeID == "" {
		v.addf("a node in a Kubernetes fleet needs node_id: \"auto\" (claimed through the cluster, kept in data_dir) or an id of its own")
	}
	if k.AdvertiseURL != "" {
		u, err := url.Parse(k.AdvertiseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			v.addf("kubernetes.advertise_url must be the node's API as http://HOST:PORT or https://HOST:PORT, got %q", k.AdvertiseURL)
		}
	}
}
