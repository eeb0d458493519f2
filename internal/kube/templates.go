package kube

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// TemplateGVR is the AgentboxTemplate custom resource (deploy/crds): a
// template of the fleet's catalog, an OCI image any node pulls on first
// use.
var TemplateGVR = schema.GroupVersionResource{Group: "agentbox.dev", Version: "v1alpha1", Resource: "agentboxtemplates"}

// WatchTemplates watches the fleet's AgentboxTemplates and calls set with
// the catalog (template name -> image reference) once it is read (before
// it returns) and at every change until ctx is done. Two objects naming
// one template: the first by object name wins.
func (c *Client) WatchTemplates(ctx context.Context, set func(map[string]string)) error {
	inf := informer(c.dyn.Resource(TemplateGVR).Namespace(c.ns), "")
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { poke() },
		UpdateFunc: func(any, any) { poke() }, DeleteFunc: func(any) { poke() }}); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		return fmt.Errorf("kubernetes: the AgentboxTemplates (namespace %s) did not sync within a minute: is the CRD installed (deploy/crds) and may the gateway's service account list them (deploy/rbac.yaml)?", c.ns)
	}
	set(catalog(inf.GetStore().List()))
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				set(catalog(inf.GetStore().List()))
			}
		}
	}()
	return nil
}

func catalog(objs []any) map[string]string {
	out := map[string]string{}
	owner := map[string]string{}
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		name, _, _ := unstructured.NestedString(u.Object, "spec", "name")
		ref, _, _ := unstructured.NestedString(u.Object, "spec", "ref")
		if name == "" || ref == "" {
			continue
		}
		if prev, dup := owner[name]; dup && prev < u.GetName() {
			continue
		}
		owner[name], out[name] = u.GetName(), ref
	}
	return out
}
