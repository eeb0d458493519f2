// Package kube takes a fleet's membership from a Kubernetes cluster
// (docs/cluster.md). A node registers itself as an AgentboxNode object
// (cluster-scoped, named by its node_id, which it can claim there) and
// renews a coordination.k8s.io Lease; a gateway watches both through
// informers and hands the fleet to the gateway package. Only low-churn
// objects go to the cluster: nothing is written per sandbox, and no
// create, exec or preview request waits on the API server.
package kube

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/version"
)

// The resources agentbox reads and writes.
var (
	// NodeGVR is the AgentboxNode custom resource (deploy/crds).
	NodeGVR = schema.GroupVersionResource{Group: "agentbox.dev", Version: "v1alpha1", Resource: "agentboxnodes"}
	// LeaseGVR is the nodes' Leases.
	LeaseGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
)

// NodeIDLabel is on every node's Lease: the node_id it keeps alive.
const NodeIDLabel = "agentbox.dev/node-id"

// LeaseName is the name of node id's Lease.
func LeaseName(id string) string { return "agentbox-node-" + id }

// Client reaches one cluster, with the namespace of the Leases.
type Client struct {
	dyn dynamic.Interface
	ns  string
	log *slog.Logger
}

// New connects to the cluster [kubernetes] names: its kubeconfig, or the
// pod's service account.
func New(k config.Kubernetes, log *slog.Logger) (*Client, error) {
	var rc *rest.Config
	var err error
	if k.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			err = errors.New("not in a pod (no KUBERNETES_SERVICE_HOST): set kubernetes.kubeconfig to a kubeconfig file")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	return NewForConfig(rc, k.KubeNamespace(), log)
}

// NewForConfig is New with the REST config given.
func NewForConfig(rc *rest.Config, namespace string, log *slog.Logger) (*Client, error) {
	if log == nil {
		log = slog.Default()
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "agentbox/" + version.Version
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	return &Client{dyn: dyn, ns: namespace, log: log}, nil
}

// Node is what a node registers of itself.
type Node struct {
	// ID is its node_id, the object's name.
	ID string
	// Host is the Kubernetes node (or host) it runs on: NODE_NAME, else
	// the host name; DataDir its data_dir. An id stays with both: its
	// sandboxes live there.
	Host, DataDir string
	// URL is its API as gateways reach it; Fingerprint the SHA-256 of its
	// TLS certificate (hex), "" over plain HTTP.
	URL, Fingerprint string
	// Tiers are the isolation tiers it offers.
	Tiers []string
}

// HostName is the name a node registers as its host: NODE_NAME (the
// downward API's spec.nodeName in the DaemonSet), else the host name.
func HostName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}

func (n Node) object() *unstructured.Unstructured {
	tiers := make([]any, len(n.Tiers))
	for i, t := range n.Tiers {
		tiers[i] = t
	}
	spec := map[string]any{"host": n.Host, "dataDir": n.DataDir, "url": n.URL, "tiers": tiers, "version": version.Version}
	if n.Fingerprint != "" {
		spec["fingerprint"] = n.Fingerprint
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": NodeGVR.GroupVersion().String(),
		"kind":       "AgentboxNode",
		"metadata":   map[string]any{"name": n.ID},
		"spec":       spec,
	}}
}

// ClaimNodeID returns the node's id: the one kept in idFile; else the id
// of an AgentboxNode already registered for n.Host and n.DataDir (a data
// dir that was wiped); else a free one it claims by creating its
// AgentboxNode (the API server makes the name unique in the cluster).
// The id is then kept in idFile.
func (c *Client) ClaimNodeID(ctx context.Context, idFile string, n Node) (string, error) {
	if b, err := os.ReadFile(idFile); err == nil {
		id := strings.TrimSpace(string(b))
		if len(id) != api.NodeIDLen || !api.InIDAlphabet(id) {
			return "", fmt.Errorf("%s holds %q, not a node id: remove it to claim a new id (this node's sandboxes and snapshots keep the old one in their ids)", idFile, id)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	list, err := c.dyn.Resource(NodeGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", c.explain("listing AgentboxNodes", err)
	}
	id := ""
	for _, o := range list.Items {
		if sameHome(o.Object, n) {
			id = o.GetName()
			break
		}
	}
	for try := 0; id == "" && try < 32; try++ {
		n.ID = randomID()
		_, err := c.dyn.Resource(NodeGVR).Create(ctx, n.object(), metav1.CreateOptions{})
		switch {
		case err == nil:
			id = n.ID
		case apierrors.IsAlreadyExists(err):
			continue // taken: draw again
		default:
			return "", c.explain("claiming a node id", err)
		}
	}
	if id == "" {
		return "", errors.New("kubernetes: no free node id found in 32 draws; the fleet is near 32,768 nodes, or AgentboxNodes of gone hosts should be deleted")
	}
	if err := writeFile(idFile, id+"\n"); err != nil {
		return "", err
	}
	c.log.Info("claimed node id through the cluster", "node", id, "host", n.Host, "kept_in", idFile)
	return id, nil
}

// sameHome reports whether an AgentboxNode's spec names n's host and
// data dir.
func sameHome(obj map[string]any, n Node) bool {
	h, _, _ := unstructured.NestedString(obj, "spec", "host")
	d, _, _ := unstructured.NestedString(obj, "spec", "dataDir")
	return h == n.Host && d == n.DataDir
}

func randomID() string {
	b := make([]byte, api.NodeIDLen)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = api.IDAlphabet[int(b[i])%len(api.IDAlphabet)]
	}
	return string(b)
}

func writeFile(path, s string) error {
	tmp := path + ".tmp"
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// explain wraps an API error with what to do about the common ones.
func (c *Client) explain(what string, err error) error {
	switch {
	case apierrors.IsNotFound(err) && strings.Contains(err.Error(), "the server could not find the requested resource"):
		return fmt.Errorf("kubernetes: %s: the AgentboxNode resource is not installed: apply deploy/crds (kubectl apply -k deploy/): %w", what, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("kubernetes: %s: forbidden: give the service account the roles in deploy/rbac.yaml: %w", what, err)
	}
	return fmt.Errorf("kubernetes: %s: %w", what, err)
}

// Register makes or updates the node's AgentboxNode and takes its Lease,
// then renews the Lease every quarter of d until ctx is done (a failed
// renewal is logged and tried again at the next tick). It returns once
// the node is registered. An id registered by another host is refused:
// two nodes with one id would get each other's requests.
func (c *Client) Register(ctx context.Context, n Node, d time.Duration) error {
	if err := c.upsertNode(ctx, n); err != nil {
		return err
	}
	if err := c.renew(ctx, n, d); err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(d / 4)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := c.renew(ctx, n, d)
			switch {
			case err != nil && ctx.Err() == nil:
				c.log.Warn("renewing the node's Lease failed; gateways take the node out of placement when it expires", "lease", LeaseName(n.ID), "err", err)
				failing = true
			case err == nil && failing:
				c.log.Info("the node's Lease is renewed again", "lease", LeaseName(n.ID))
				failing = false
			}
		}
	}()
	return nil
}

func (c *Client) upsertNode(ctx context.Context, n Node) error {
	res := c.dyn.Resource(NodeGVR)
	want := n.object()
	cur, err := res.Get(ctx, n.ID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = res.Create(ctx, want, metav1.CreateOptions{})
		if err != nil {
			return c.explain("registering AgentboxNode "+n.ID, err)
		}
		return nil
	}
	if err != nil {
		return c.explain("reading AgentboxNode "+n.ID, err)
	}
	if h, _, _ := unstructured.NestedString(cur.Object, "spec", "host"); h != "" && !sameHome(cur.Object, n) {
		d, _, _ := unstructured.NestedString(cur.Object, "spec", "dataDir")
		return fmt.Errorf("kubernetes: node id %s is registered by the node on host %q with data_dir %q, and this is %q with %q: two nodes with one id would get each other's requests; give this node another node_id, or if that node is gone for good delete its registration (kubectl delete agentboxnode %s)", n.ID, h, d, n.Host, n.DataDir, n.ID)
	}
	cur.Object["spec"] = want.Object["spec"]
	if _, err := res.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return c.explain("updating AgentboxNode "+n.ID, err)
	}
	return nil
}

// renew takes or renews the node's Lease.
func (c *Client) renew(ctx context.Context, n Node, d time.Duration) error {
	res := c.dyn.Resource(LeaseGVR).Namespace(c.ns)
	now := metav1.NewMicroTime(time.Now()).UTC().Format(microTime)
	spec := map[string]any{"holderIdentity": n.Host, "leaseDurationSeconds": int64(d / time.Second), "renewTime": now}
	cur, err := res.Get(ctx, LeaseName(n.ID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		spec["acquireTime"] = now
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
			"metadata": map[string]any{"name": LeaseName(n.ID), "namespace": c.ns,
				"labels": map[string]any{NodeIDLabel: n.ID, "app.kubernetes.io/name": "agentbox"}},
			"spec": spec,
		}}
		_, err = res.Create(ctx, obj, metav1.CreateOptions{})
		return c.explainLease(err)
	}
	if err != nil {
		return c.explainLease(err)
	}
	old, _, _ := unstructured.NestedMap(cur.Object, "spec")
	if at, ok := old["acquireTime"]; ok && old["holderIdentity"] == n.Host {
		spec["acquireTime"] = at
	} else {
		spec["acquireTime"] = now
	}
	cur.Object["spec"] = spec
	_, err = res.Update(ctx, cur, metav1.UpdateOptions{})
	return c.explainLease(err)
}

func (c *Client) explainLease(err error) error {
	if err == nil {
		return nil
	}
	if apierrors.IsNotFound(err) && strings.Contains(err.Error(), "namespaces") {
		return fmt.Errorf("kubernetes: the Leases' namespace %q does not exist: create it, or set kubernetes.namespace: %w", c.ns, err)
	}
	return c.explain("the node's Lease in namespace "+c.ns, err)
}

// microTime is the wire form of a Lease's times (metav1.MicroTime).
const microTime = "2006-01-02T15:04:05.000000Z07:00"
