package sandbox

import (
	"context"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// ListFilter selects sandboxes.
type ListFilter struct {
	States   []string
	Metadata map[string]string
	// All includes destroyed sandboxes, which are hidden by default.
	All bool
	// Limit, when positive, makes ListPage return at most Limit sandboxes
	// and a cursor to the next page; Cursor is that cursor.
	Limit  int
	Cursor string
}

// MaxListLimit caps a page of the sandbox list.
const MaxListLimit = 1000

// List returns the sandboxes in scope, all of them.
func (s *Service) List(ctx context.Context, scope tenancy.Scope, f ListFilter) ([]api.Sandbox, error) {
	f.Limit, f.Cursor = 0, ""
	list, _, err := s.ListPage(ctx, scope, f)
	return list, err
}

// ListPage returns a page of the sandboxes in scope, in the order they
// were created, and the cursor of the next page ("" on the last one). A
// page costs what its own rows cost, however many sandboxes there are.
func (s *Service) ListPage(ctx context.Context, scope tenancy.Scope, f ListFilter) ([]api.Sandbox, string, error) {
	states := f.States
	if len(states) == 0 && !f.All {
		states = []string{api.StateCreating, api.StateRunning, api.StatePaused, api.StateStopped, api.StateDestroying, api.StateFailed}
	}
	if f.Limit < 0 || f.Limit > MaxListLimit {
		return nil, "", errdefs.Invalid("limit must be between 1 and %d, got %d", MaxListLimit, f.Limit)
	}
	sf := store.Filter{Scope: scope, States: states, Metadata: f.Metadata}
	if f.Cursor != "" {
		pos, err := store.ParseCursor(f.Cursor)
		if err != nil {
			return nil, "", err
		}
		sf.After = &pos
	}
	if f.Limit > 0 {
		sf.Limit = f.Limit + 1 // one more says whether a next page exists
	}
	recs, err := s.st.ListSandboxes(ctx, sf)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if f.Limit > 0 && len(recs) > f.Limit {
		recs = recs[:f.Limit]
		last := recs[len(recs)-1]
		next = store.Position{CreatedAt: last.CreatedAt, ID: last.ID}.Cursor()
	}
	out := make([]api.Sandbox, 0, len(recs))
	for _, r := range recs {
		out = append(out, *s.withDisk(toAPI(r)))
	}
	return out, next, nil
}
