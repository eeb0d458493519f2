package store

import (
	"context"
	"database/sql"
	"fmt"
)

const sandboxColumns = `id, tenant, state, template, template_version, isolation,
	spec, resources, env, metadata, handle, error, created_at, updated_at, expires_at,
	parent, snapshot, lowers`

const keyColumns = `id, tenant, name, hash, admin, created_at, last_used_at, revoked_at`

// statements are prepared once at Open. Those on the write connection are
// used inside transactions through tx.StmtContext, which reuses them.
type statements struct {
	list []*sql.Stmt

	// write connection
	insertSandbox *sql.Stmt
	getSandboxW   *sql.Stmt
	updateSandbox *sql.Stmt
	deleteSandbox *sql.Stmt
	insertKey     *sql.Stmt
	revokeKey     *sql.Stmt
	touchKey      *sql.Stmt
	insertEvent   *sql.Stmt
	insertAudit   *sql.Stmt

	// read pool
	getSandbox *sql.Stmt
	expired    *sql.Stmt
	keyByHash  *sql.Stmt
	events     *sql.Stmt
}

func (s *Store) prepare(ctx context.Context) error {
	st := &s.stmts
	for _, p := range []struct {
		db   *sql.DB
		dst  **sql.Stmt
		text string
	}{
		{s.w, &st.insertSandbox, `INSERT INTO sandboxes (id, tenant, state, template,
			template_version, isolation, spec, resources, env, metadata, handle, error,
			expires_at, parent, snapshot, lowers, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{s.w, &st.getSandboxW, `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE id = ?`},
		{s.w, &st.updateSandbox, `UPDATE sandboxes SET tenant = ?, state = ?, template = ?,
			template_version = ?, isolation = ?, spec = ?, resources = ?, env = ?, metadata = ?,
			handle = ?, error = ?, expires_at = ?, parent = ?, snapshot = ?, lowers = ?,
			updated_at = ? WHERE id = ?`},
		{s.w, &st.deleteSandbox, `DELETE FROM sandboxes WHERE id = ?`},
		{s.w, &st.insertKey, `INSERT INTO api_keys (` + keyColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`},
		{s.w, &st.revokeKey, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`},
		{s.w, &st.touchKey, `UPDATE api_keys SET last_used_at = ? WHERE id = ?`},
		{s.w, &st.insertEvent, `INSERT INTO events (sandbox_id, time, kind, message) VALUES (?, ?, ?, ?)`},
		{s.w, &st.insertAudit, `INSERT INTO audit (time, key_id, tenant, method, path, sandbox_id, status, remote)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`},

		{s.r, &st.getSandbox, `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE id = ?`},
		{s.r, &st.expired, `SELECT id FROM sandboxes WHERE expires_at <= ?
			AND (state = 'running' OR (state = 'paused'
				AND coalesce(json_extract(spec, '$.on_timeout'), '') != 'pause'))
			ORDER BY expires_at, id`},
		{s.r, &st.keyByHash, `SELECT ` + keyColumns + ` FROM api_keys WHERE hash = ? AND revoked_at IS NULL`},
		{s.r, &st.events, `SELECT id, sandbox_id, time, kind, message FROM (
			SELECT * FROM events WHERE sandbox_id = ? ORDER BY id DESC LIMIT ?) ORDER BY id`},
	} {
		stmt, err := p.db.PrepareContext(ctx, p.text)
		if err != nil {
			return dbErr(fmt.Sprintf("preparing %q", p.text), err)
		}
		*p.dst = stmt
		st.list = append(st.list, stmt)
	}
	return nil
}

func (st *statements) close() {
	for _, s := range st.list {
		s.Close()
	}
	st.list = nil
}
