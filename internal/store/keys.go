package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

// KeyRecord is one API key. The secret itself is never stored, only its
// sha256.
type KeyRecord struct {
	ID         string // public id, e.g. "key_0123456789ab"
	Tenant     string
	Name       string
	Hash       []byte
	Admin      bool
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// KeysVersion is a number that changes whenever a write may have changed
// what KeyByHash returns: after every write of the store but an audit
// record, an event and a key's last use (which cannot), and at Close. A
// caller that caches KeyByHash's answers may use one only while
// KeysVersion returns the number it read before that lookup: then no
// revocation has committed since (TestKeysVersion).
func (s *Store) KeysVersion() uint64 { return s.keysVersion.Load() }

// changed moves KeysVersion on. Writes call it once they returned,
// committed or not (a failed one costs a cache miss, never a stale hit).
func (s *Store) changed() { s.keysVersion.Add(1) }

// CreateKey inserts k; a zero CreatedAt becomes now (written back to k). A
// duplicate id or hash is an error wrapping errdefs.ErrAlreadyExists.
func (s *Store) CreateKey(ctx context.Context, k *KeyRecord) error {
	if k.ID == "" || k.Tenant == "" || len(k.Hash) == 0 {
		return errdefs.Invalid("API key record needs an id, a tenant and a hash")
	}
	defer s.changed()
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now()
	} else {
		k.CreatedAt = fromMS(toMS(k.CreatedAt))
	}
	_, err := s.stmts.insertKey.ExecContext(ctx, k.ID, k.Tenant, k.Name, k.Hash, k.Admin,
		toMS(k.CreatedAt), toNullMS(k.LastUsedAt), toNullMS(k.RevokedAt))
	if err != nil {
		if err := dbErr("inserting API key", err); !errors.Is(err, errdefs.ErrAlreadyExists) {
			return err
		}
		return errdefs.New(errdefs.ErrAlreadyExists, "API key %s already exists", k.ID)
	}
	return nil
}

// KeyByHash returns the unrevoked key whose hash is hash, or an error
// wrapping errdefs.ErrNotFound.
func (s *Store) KeyByHash(ctx context.Context, hash []byte) (*KeyRecord, error) {
	k, err := scanKey(s.stmts.keyByHash.QueryRowContext(ctx, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("API key not found")
	}
	return k, err
}

func scanKey(row scanner) (*KeyRecord, error) {
	var (
		k             KeyRecord
		created       int64
		used, revoked sql.NullInt64
	)
	err := row.Scan(&k.ID, &k.Tenant, &k.Name, &k.Hash, &k.Admin, &created, &used, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	if err != nil {
		return nil, dbErr("reading API key", err)
	}
	k.CreatedAt, k.LastUsedAt, k.RevokedAt = fromMS(created), fromNullMS(used), fromNullMS(revoked)
	return &k, nil
}

// ListKeys returns the keys of tenant ("" for all tenants), revoked ones
// included, oldest first.
func (s *Store) ListKeys(ctx context.Context, tenant string) ([]*KeyRecord, error) {
	q := "SELECT " + keyColumns + " FROM api_keys"
	var args []any
	if tenant != "" {
		q += " WHERE tenant = ?"
		args = append(args, tenant)
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY created_at, id", args...)
	if err != nil {
		return nil, dbErr("listing API keys", err)
	}
	defer rows.Close()
	var out []*KeyRecord
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("listing API keys", err)
	}
	return out, nil
}

// RevokeKey marks the key revoked; KeyByHash no longer returns it.
// Revoking a revoked key keeps its first revocation time. A missing key is
// an error wrapping errdefs.ErrNotFound.
func (s *Store) RevokeKey(ctx context.Context, id string) error {
	defer s.changed()
	res, err := s.stmts.revokeKey.ExecContext(ctx, toMS(now()), id)
	if err != nil {
		return dbErr("revoking API key "+id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("API key %s not found", id)
	}
	return nil
}

// TouchKey records that the key was used at t.
func (s *Store) TouchKey(ctx context.Context, id string, t time.Time) error {
	if _, err := s.stmts.touchKey.ExecContext(ctx, toMS(t), id); err != nil {
		return dbErr("recording use of API key "+id, err)
	}
	return nil
}
