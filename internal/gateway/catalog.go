package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/api"
)

// SetTemplateCatalog makes refs the fleet's template catalog: template
// name -> OCI reference (HOST[:PORT]/REPO:TAG or @DIGEST), from a
// cluster's AgentboxTemplates. A create naming a template no node has is
// placed as usual and its node pulls the catalog's image first, as a
// public template (the admin's); a node that has the template already
// uses its own.
func (g *Gateway) SetTemplateCatalog(refs map[string]string) {
	c := make(map[string]string, len(refs))
	for k, v := range refs {
		c[k] = v
	}
	g.catalog.Store(&c)
}

// catalogRef is the catalog's reference for template name, "" if none.
func (g *Gateway) catalogRef(name string) string {
	if c := g.catalog.Load(); c != nil {
		return (*c)[name]
	}
	return ""
}

// pullFromCatalog pulls template name onto n from the catalog (once,
// however many creates wait): true when the catalog has it.
func (g *Gateway) pullFromCatalog(ctx context.Context, n *node, name string) (bool, error) {
	ref := g.catalogRef(name)
	if ref == "" {
		return false, nil
	}
	_, err := g.mv.flights.do("catalog/"+n.id+"/"+name+"/"+ref, func() (string, error) {
		if n.hasTemplate(name) {
			return "", nil
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pullTimeout)
		defer cancel()
		start := time.Now()
		if err := g.call(ctx, n, asAdmin, "POST", "/v1/templates/pull", api.PullRequest{Ref: ref, Name: name}, nil); err != nil {
			return "", fmt.Errorf("pulling template %s onto node %s from its AgentboxTemplate's image %s: %w", name, n.id, ref, err)
		}
		n.addTemplate(name)
		g.log.Info("template pulled from the cluster's catalog", "template", name, "node", n.id, "ref", ref, "took", time.Since(start).Round(time.Millisecond))
		return "", nil
	})
	return true, err
}
