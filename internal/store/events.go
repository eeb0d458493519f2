package store

import (
	"context"
	"errors"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

// Event is one entry of a sandbox's append-only log.
type Event struct {
	ID        int64
	SandboxID string
	Time      time.Time
	Kind      string // e.g. "created", "state", "expired", "oom"
	Message   string
}

// AddEvent appends e to its sandbox's log; a zero Time means now. The
// sandbox must exist (errdefs.ErrNotFound otherwise); its events go when
// it is deleted.
func (s *Store) AddEvent(ctx context.Context, e Event) error {
	if e.SandboxID == "" || e.Kind == "" {
		return errdefs.Invalid("event needs a sandbox id and a kind")
	}
	if e.Time.IsZero() {
		e.Time = now()
	}
	if _, err := s.stmts.insertEvent.ExecContext(ctx, e.SandboxID, toMS(e.Time), e.Kind, e.Message); err != nil {
		if err := dbErr("adding event", err); !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		return errdefs.NotFound("adding event: sandbox %s not found", e.SandboxID)
	}
	return nil
}

// Events returns the last limit events of a sandbox (all when limit <= 0),
// oldest first.
func (s *Store) Events(ctx context.Context, sandboxID string, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.stmts.events.QueryContext(ctx, sandboxID, limit)
	if err != nil {
		return nil, dbErr("reading events", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var (
			e  Event
			ms int64
		)
		if err := rows.Scan(&e.ID, &e.SandboxID, &ms, &e.Kind, &e.Message); err != nil {
			return nil, dbErr("reading events", err)
		}
		e.Time = fromMS(ms)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("reading events", err)
	}
	return out, nil
}
