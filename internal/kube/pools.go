package kube

import (
	"context"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/agentbox/agentbox/internal/config"
)

// PoolGVR is the AgentboxWarmPool custom resource (deploy/crds): a warm
// pool every node of the fleet keeps, as a [[pool]] of its config.
var PoolGVR = schema.GroupVersionResource{Group: "agentbox.dev", Version: "v1alpha1", Resource: "agentboxwarmpools"}

// Pool is one AgentboxWarmPool: its object name and the pool as a node's
// config would give it (defaults unfilled).
type Pool struct {
	Name string
	Pool config.WarmPool
}

// WatchPools watches the fleet's AgentboxWarmPools and calls set with all
// of them, by name, once they are read (before it returns) and at every
// change until ctx is done.
func (c *Client) WatchPools(ctx context.Context, set func([]Pool)) error {
	inf := informer(c.dyn.Resource(PoolGVR).Namespace(c.ns), "")
	return c.follow(ctx, "AgentboxWarmPools", 0, func() { set(pools(inf.GetStore().List())) }, inf)
}

func pools(objs []any) []Pool {
	var out []Pool
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var p config.WarmPool
		str := func(f string) string { s, _, _ := unstructured.NestedString(u.Object, "spec", f); return s }
		num := func(f string) int64 { n, _, _ := unstructured.NestedInt64(u.Object, "spec", f); return n }
		p.Template, p.Isolation, p.Egress, p.Code = str("template"), str("isolation"), str("egress"), str("code")
		p.Size = int(num("size"))
		p.MemoryMB, p.DiskMB, p.Pids = num("memoryMB"), num("diskMB"), num("pids")
		if s := str("cpu"); s != "" {
			p.CPU, _ = strconv.ParseFloat(s, 64)
		}
		p.Desktop, _, _ = unstructured.NestedBool(u.Object, "spec", "desktop")
		out = append(out, Pool{Name: u.GetName(), Pool: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
