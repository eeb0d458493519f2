package cli

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// NameKey is the metadata key that holds a sandbox's name (create --name).
// Wherever the CLI takes a sandbox id it also takes the sandbox's name or
// a unique prefix of its id, as docker does.
const NameKey = "name"

// fullID is the form of the ids the daemon hands out (12 characters, or
// 15 on a node of a fleet: docs/cluster.md): a full id is used as it is,
// without a lookup.
var fullID = regexp.MustCompile(`^([a-z2-7]{3})?[a-z2-7]{12}$`)

// sandboxArgs says, per command path, which positional arguments name a
// sandbox: the first, or all.
var sandboxArgs = map[string]string{
	"agentbox exec": "first", "agentbox shell": "first", "agentbox inspect": "first",
	"agentbox ttl": "first", "agentbox ps": "first", "agentbox logs": "first",
	"agentbox kill": "first", "agentbox pause": "first", "agentbox resume": "first",
	"agentbox snapshot": "first", "agentbox fork": "first", "agentbox reset": "first",
	"agentbox url": "first", "agentbox attach": "first", "agentbox egress": "first", "agentbox egress log": "first",
	"agentbox rm": "all", "agentbox cp": "cp",
	"agentbox desktop start": "first", "agentbox desktop status": "first", "agentbox desktop stop": "first",
	"agentbox desktop screenshot": "first", "agentbox desktop click": "first", "agentbox desktop move": "first",
	"agentbox desktop drag": "first", "agentbox desktop scroll": "first", "agentbox desktop type": "first",
	"agentbox desktop key": "first", "agentbox desktop actions": "first", "agentbox desktop windows": "first",
	"agentbox desktop cursor": "first", "agentbox desktop launch": "first", "agentbox desktop open": "first",
	"agentbox desktop url": "first",
}

// resolveSandboxArgs rewrites, in place, the arguments of c that name a
// sandbox by name or id prefix into full ids. cobra hands RunE the same
// slice.
func resolveSandboxArgs(c *cobra.Command, g *globals, args []string) error {
	which := sandboxArgs[c.CommandPath()]
	if which == "" || len(args) == 0 {
		return nil
	}
	var idx []int
	switch which {
	case "first":
		idx = []int{0}
	case "all":
		for i := range args {
			idx = append(idx, i)
		}
	case "cp":
		for i, a := range args {
			if p, err := parseCpArg(a); err == nil && p.remote() {
				idx = append(idx, i)
			}
		}
	}
	var r *resolver
	for _, i := range idx {
		ref, rest := args[i], ""
		if which == "cp" {
			ref, rest, _ = strings.Cut(args[i], ":")
			rest = ":" + rest
		}
		if ref == "" || fullID.MatchString(ref) {
			continue
		}
		if r == nil {
			cl, err := g.client()
			if err != nil {
				return err
			}
			r = &resolver{ctx: c.Context(), cl: cl}
		}
		id, err := r.resolve(ref)
		if err != nil {
			return err
		}
		args[i] = id + rest
	}
	return nil
}

// resolver finds sandboxes by name or id prefix, listing them once.
type resolver struct {
	ctx  context.Context
	cl   *client.Client
	list []api.Sandbox
	done bool
}

// resolve returns the id of the sandbox ref names: its id, its name, or a
// prefix of one id only. A ref that matches nothing is returned as it is,
// for the daemon to answer not found.
func (r *resolver) resolve(ref string) (string, error) {
	if !r.done {
		list, err := r.cl.ListSandboxes(r.ctx, client.ListOptions{})
		if err != nil {
			return "", err
		}
		r.list, r.done = list, true
	}
	var byName, byPrefix []string
	for _, sb := range r.list {
		switch {
		case sb.ID == ref:
			return ref, nil
		case sb.Metadata[NameKey] == ref:
			byName = append(byName, sb.ID)
		case strings.HasPrefix(sb.ID, ref):
			byPrefix = append(byPrefix, sb.ID)
		}
	}
	switch {
	case len(byName) == 1:
		return byName[0], nil
	case len(byName) > 1:
		sort.Strings(byName)
		return "", fmt.Errorf("%d sandboxes are named %q (%s); use an id", len(byName), ref, strings.Join(byName, ", "))
	case len(byPrefix) == 1:
		return byPrefix[0], nil
	case len(byPrefix) > 1:
		sort.Strings(byPrefix)
		return "", fmt.Errorf("%q is the start of %d sandbox ids (%s); give more of the id", ref, len(byPrefix), strings.Join(byPrefix, ", "))
	}
	return ref, nil
}
