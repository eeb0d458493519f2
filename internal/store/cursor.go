package store

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

// A list cursor is the position of a page's last sandbox, opaque to
// clients: base64url of "1:<created_at unix ms>:<id>". The position is
// the list's order itself, not a row of this store, so a fleet gateway
// merging the lists of several nodes (internal/gateway) hands out cursors
// that every node reads the same way.

// Cursor returns p as a list cursor.
func (p Position) Cursor() string {
	return base64.RawURLEncoding.EncodeToString([]byte("1:" + strconv.FormatInt(p.CreatedAt.UnixMilli(), 10) + ":" + p.ID))
}

// ParseCursor reads a cursor Cursor made.
func ParseCursor(c string) (Position, error) {
	bad := errdefs.Invalid("cursor %q is not one this daemon gave: pass the next_cursor of the previous page unchanged, or no cursor for the first page", c)
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return Position{}, bad
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[0] != "1" || parts[2] == "" {
		return Position{}, bad
	}
	ms, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || ms < 0 {
		return Position{}, bad
	}
	return Position{CreatedAt: time.UnixMilli(ms).UTC(), ID: parts[2]}, nil
}

// Before reports whether p comes before q in the list's order: by
// created_at (ms, as stored), then id.
func (p Position) Before(q Position) bool {
	a, b := p.CreatedAt.UnixMilli(), q.CreatedAt.UnixMilli()
	if a != b {
		return a < b
	}
	return p.ID < q.ID
}
