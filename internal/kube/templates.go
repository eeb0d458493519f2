package kube

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	return c.follow(ctx, "AgentboxTemplates", 0, func() { set(catalog(inf.GetStore().List())) }, inf)
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
