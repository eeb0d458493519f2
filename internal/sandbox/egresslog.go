package sandbox

import (
	"context"

	"github.com/agentbox/agentbox/api"
)

// EgressLog returns the egress log of a tenant's sandbox ("" = any, for
// admins): the decisions of its resolver and SNI/Host proxy, oldest
// first (docs/network.md). A sandbox without egress has an empty log.
func (s *Service) EgressLog(ctx context.Context, tenant, id string) (*api.EgressLog, error) {
	if _, err := s.visible(ctx, tenant, id); err != nil {
		return nil, err
	}
	if s.net == nil {
		return &api.EgressLog{Entries: []api.EgressLogEntry{}}, nil
	}
	l := s.net.EgressLog(id)
	return &l, nil
}
