package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/agentbox/agentbox/internal/tenancy"
)

// AuditRecord is one state-changing API call: who, what, when, result.
type AuditRecord struct {
	ID        int64
	Time      time.Time
	KeyID     string // "" when the request carried no valid key
	Tenant    string
	Method    string
	Path      string
	SandboxID string
	Status    int
	Remote    string
}

// AppendAudit inserts recs in one transaction. A single record (one per
// state-changing call, written before its caller has the answer) is one
// INSERT on its own, which SQLite commits atomically: an explicit
// transaction would add a BEGIN and a COMMIT round trip to every exec.
func (s *Store) AppendAudit(ctx context.Context, recs []AuditRecord) error {
	if len(recs) == 1 {
		return s.insertAudit(ctx, s.stmts.insertAudit, recs[0])
	}
	if len(recs) == 0 {
		return nil
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		stmt := tx.StmtContext(ctx, s.stmts.insertAudit)
		for _, r := range recs {
			if err := s.insertAudit(ctx, stmt, r); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *Store) insertAudit(ctx context.Context, stmt *sql.Stmt, r AuditRecord) error {
	if _, err := stmt.ExecContext(ctx, toMS(r.Time), r.KeyID, r.Tenant, r.Method, r.Path, r.SandboxID, r.Status, r.Remote); err != nil {
		return dbErr("writing audit log", err)
	}
	return nil
}

// ListAudit returns the newest limit records in scope, newest first.
func (s *Store) ListAudit(ctx context.Context, scope tenancy.Scope, limit int) ([]AuditRecord, error) {
	q := `SELECT id, time, key_id, tenant, method, path, sandbox_id, status, remote FROM audit`
	var args []any
	if tenant, limited := scope.Tenant(); limited {
		q += ` WHERE tenant = ?`
		args = append(args, tenant)
	}
	args = append(args, limit)
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, dbErr("reading audit log", err)
	}
	defer rows.Close()
	var out []AuditRecord
	for rows.Next() {
		var (
			r  AuditRecord
			ms int64
		)
		if err := rows.Scan(&r.ID, &ms, &r.KeyID, &r.Tenant, &r.Method, &r.Path, &r.SandboxID, &r.Status, &r.Remote); err != nil {
			return nil, dbErr("reading audit log", err)
		}
		r.Time = fromMS(ms)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("reading audit log", err)
	}
	return out, nil
}
