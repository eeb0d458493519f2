package sandbox

import (
	"context"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// EgressLog returns the egress log of a tenant's sandbox ("" = any, for
// admins): the decisions of its resolver and SNI/Host proxy, oldest
// first (docs/network.md). A sandbox without egress has an empty log.
func (s *Service) EgressLog(ctx context.Context, tenant, id string) (*api.EgressLog, error) {
	rec, err := s.st.GetSandbox(ctx, id)
	if err != nil || (tenant != "" && rec.Tenant != tenant) {
		return nil, errdefs.NotFound("sandbox %q not found; list yours with `agentbox ls`", id)
	}
	if s.net == nil {
		return &api.EgressLog{Entries: []api.EgressLogEntry{}}, nil
	}
	l := s.net.EgressLog(id)
	return &l, nil
}
