package sandbox

import (
	"context"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// EgressLog returns the egress log of a sandbox in scope: the decisions of its resolver and SNI/Host proxy, oldest
// first (docs/network.md). A sandbox without egress has an empty log.
func (s *Service) EgressLog(ctx context.Context, scope tenancy.Scope, id string) (*api.EgressLog, error) {
	if _, err := s.visible(ctx, scope, id); err != nil {
		return nil, err
	}
	if s.net == nil {
		return &api.EgressLog{Entries: []api.EgressLogEntry{}}, nil
	}
	l := s.net.EgressLog(id)
	return &l, nil
}
