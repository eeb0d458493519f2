package sandbox

import (
	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// resolveUserLimits fills a sandbox's per-user kernel counts: each field
// from the request, else the template, else api.DefaultUserLimits; the
// request's are checked against api.MaxUserLimits (the template's were
// when it was made).
func resolveUserLimits(tpl, req *api.UserLimits) (api.UserLimits, error) {
	if req != nil {
		if err := req.Check("user_limits"); err != nil {
			return api.UserLimits{}, errdefs.Invalid("%v", err)
		}
	}
	return api.DefaultUserLimits.Over(tpl).Over(req), nil
}
