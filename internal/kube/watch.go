package kube

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Member is one node of the fleet as the cluster has it.
type Member struct {
	ID, URL, Fingerprint string
	// Down is "" while the node's Lease is renewed, else why the gateway
	// holds it out of placement and routing.
	Down string
}

// WatchMembers watches the AgentboxNodes and the nodes' Leases and calls
// set with the fleet (by id) once the caches have synced, before it
// returns, then from a goroutine at every change, and when a Lease
// expires, until ctx is done. A node is down while its Lease is missing
// or older than its duration: the mechanism the kubelet's node Leases
// use, so a node that dies leaves placement within one lease_duration
// even where the gateway could still connect to it.
func (c *Client) WatchMembers(ctx context.Context, set func([]Member)) error {
	nodes := informer(c.dyn.Resource(NodeGVR), "")
	leases := informer(c.dyn.Resource(LeaseGVR).Namespace(c.ns), NodeIDLabel)
	seen := renewals{}
	var last []Member
	first := true
	// A second's tick: a Lease expires without an event.
	return c.follow(ctx, "AgentboxNodes and Leases", time.Second, func() {
		m := seen.members(nodes.GetStore().List(), leases.GetStore().List(), time.Now())
		if first || !slices.Equal(m, last) {
			set(m)
			first, last = false, m
		}
	}, nodes, leases)
}

// renewals is when this gateway saw each node's Lease renewed: the time
// it read a renewTime it had not seen, by its own clock. A Lease expires
// a duration after that, as the Kubernetes node lifecycle controller
// judges kubelets' Leases, so that the nodes' clocks need not agree with
// the gateway's. (A node dead before the gateway started looks renewed
// once, at the first read, and is held down a duration later; its failed
// polls take it down before that.)
type renewals map[string]renewal

type renewal struct {
	renewTime string
	at        time.Time
}

// members is the fleet from the informers' objects at now.
func (seen renewals) members(nodeObjs, leaseObjs []any, now time.Time) []Member {
	type lease struct {
		renewTime string
		dur       time.Duration
	}
	byID := map[string]lease{}
	for _, o := range leaseObjs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		id := u.GetLabels()[NodeIDLabel]
		if u.GetName() != LeaseName(id) {
			continue
		}
		rt, _, _ := unstructured.NestedString(u.Object, "spec", "renewTime")
		secs, _, _ := unstructured.NestedInt64(u.Object, "spec", "leaseDurationSeconds")
		if rt == "" || secs <= 0 {
			continue
		}
		byID[id] = lease{rt, time.Duration(secs) * time.Second}
		if seen[id].renewTime != rt {
			seen[id] = renewal{rt, now}
		}
	}
	for id := range seen {
		if _, ok := byID[id]; !ok {
			delete(seen, id)
		}
	}
	var out []Member
	for _, o := range nodeObjs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		m := Member{ID: u.GetName()}
		m.URL, _, _ = unstructured.NestedString(u.Object, "spec", "url")
		m.Fingerprint, _, _ = unstructured.NestedString(u.Object, "spec", "fingerprint")
		if m.URL == "" {
			continue // claimed, not yet serving
		}
		switch l, ok := byID[m.ID]; {
		case !ok:
			m.Down = fmt.Sprintf("no Lease %s: the node has not registered, or its Lease was deleted", LeaseName(m.ID))
		case now.Sub(seen[m.ID].at) > l.dur:
			m.Down = fmt.Sprintf("its Lease %s expired: not renewed for %s (its renewTime %s, by the node's clock)", LeaseName(m.ID), l.dur, l.renewTime)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
