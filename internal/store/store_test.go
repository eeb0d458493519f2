package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
)

func openTest(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ptr[T any](v T) *T { return &v }

func sampleRecord(id string) *SandboxRecord {
	exp := time.Now().Add(10 * time.Minute)
	return &SandboxRecord{
		ID:              id,
		Tenant:          "acme",
		State:           api.StateCreating,
		Template:        "base",
		TemplateVersion: "v3",
		Isolation:       "container",
		Spec:            api.CreateSandboxRequest{Template: "base", Isolation: "container", TTLSeconds: 600, CPU: 1, MemoryMB: 512, Env: map[string]string{"A": "1"}},
		Resources:       api.Resources{CPU: 1, MemoryMB: 512, DiskMB: 1024, Pids: 512},
		Env:             map[string]string{"A": "1"},
		Metadata:        map[string]string{"owner": "bob", "a.b": "dots", `q"k`: "quote"},
		ExpiresAt:       &exp,
	}
}

func TestSandboxCRUD(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)

	rec := sampleRecord("sb1")
	if err := s.CreateSandbox(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if rec.CreatedAt.IsZero() || !rec.UpdatedAt.Equal(rec.CreatedAt) {
		t.Errorf("CreatedAt %v UpdatedAt %v: want set and equal", rec.CreatedAt, rec.UpdatedAt)
	}
	got, err := s.GetSandbox(ctx, "sb1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("GetSandbox:\n got %+v\nwant %+v", got, rec)
	}

	err = s.CreateSandbox(ctx, sampleRecord("sb1"))
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("duplicate CreateSandbox = %v, want ErrAlreadyExists", err)
	}

	h := &driver.Handle{ID: "sb1", Pid: 4242, PidStart: 99, Socket: "/run/agentbox/sb1/guest.sock", Private: []byte(`{"cgroup":"x"}`)}
	err = s.UpdateSandbox(ctx, "sb1", func(r *SandboxRecord) error {
		r.State = api.StateRunning
		r.Handle = h
		r.ExpiresAt = nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err = s.GetSandbox(ctx, "sb1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.StateRunning || !reflect.DeepEqual(got.Handle, h) || got.ExpiresAt != nil {
		t.Errorf("after update: state %q handle %+v expires %v", got.State, got.Handle, got.ExpiresAt)
	}
	if !got.CreatedAt.Equal(rec.CreatedAt) || got.UpdatedAt.Before(rec.UpdatedAt) {
		t.Errorf("after update: created %v (want %v), updated %v", got.CreatedAt, rec.CreatedAt, got.UpdatedAt)
	}

	// An error from fn writes nothing and comes back as is.
	errBoom := errors.New("boom")
	err = s.UpdateSandbox(ctx, "sb1", func(r *SandboxRecord) error {
		r.State = api.StateFailed
		return errBoom
	})
	if err != errBoom {
		t.Errorf("UpdateSandbox with failing fn = %v, want %v", err, errBoom)
	}
	if got, _ := s.GetSandbox(ctx, "sb1"); got.State != api.StateRunning {
		t.Errorf("state after failed update = %q, want running", got.State)
	}
	err = s.UpdateSandbox(ctx, "sb1", func(r *SandboxRecord) error { r.ID = "other"; return nil })
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("changing the id = %v, want ErrInvalidArgument", err)
	}

	if err := s.DeleteSandbox(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"get":    func() error { _, err := s.GetSandbox(ctx, "sb1"); return err }(),
		"update": s.UpdateSandbox(ctx, "sb1", func(*SandboxRecord) error { return nil }),
		"delete": s.DeleteSandbox(ctx, "sb1"),
	} {
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s after delete = %v, want ErrNotFound", name, err)
		}
	}
}

func TestCreateSandboxValidates(t *testing.T) {
	s := openTest(t)
	for _, rec := range []*SandboxRecord{{}, {ID: "x", State: "running"}, {ID: "x", Tenant: "t"}} {
		if err := s.CreateSandbox(context.Background(), rec); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CreateSandbox(%+v) = %v, want ErrInvalidArgument", rec, err)
		}
	}
}

func TestNilMapsRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	rec := &SandboxRecord{ID: "bare", Tenant: "t", State: api.StateCreating}
	if err := s.CreateSandbox(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, "bare")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("got %+v, want %+v", got, rec)
	}
}

func TestListSandboxes(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	add := func(id, tenant, state string, md map[string]string, i int) {
		t.Helper()
		r := &SandboxRecord{ID: id, Tenant: tenant, State: state, Metadata: md, CreatedAt: base.Add(time.Duration(i) * time.Second)}
		if err := s.CreateSandbox(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	add("a1", "acme", api.StateRunning, map[string]string{"env": "prod", "team": "x"}, 1)
	add("a2", "acme", api.StatePaused, map[string]string{"env": "dev", "a.b": "1"}, 2)
	add("a3", "acme", api.StateFailed, nil, 3)
	add("b1", "beta", api.StateRunning, map[string]string{"env": "prod", `we"ird`: "v"}, 0)

	all := tenancy.AllTenants()
	tests := []struct {
		name string
		f    Filter
		want []string
	}{
		{"no scope", Filter{}, nil},
		{"all", Filter{Scope: all}, []string{"b1", "a1", "a2", "a3"}},
		{"tenant", Filter{Scope: tenancy.Only("acme")}, []string{"a1", "a2", "a3"}},
		{"unknown tenant", Filter{Scope: tenancy.Only("nobody")}, nil},
		{"states", Filter{Scope: all, States: []string{api.StateRunning, api.StatePaused}}, []string{"b1", "a1", "a2"}},
		{"tenant and state", Filter{Scope: tenancy.Only("beta"), States: []string{api.StateRunning}}, []string{"b1"}},
		{"metadata", Filter{Scope: all, Metadata: map[string]string{"env": "prod"}}, []string{"b1", "a1"}},
		{"metadata all pairs", Filter{Scope: all, Metadata: map[string]string{"env": "prod", "team": "x"}}, []string{"a1"}},
		{"metadata value mismatch", Filter{Scope: all, Metadata: map[string]string{"env": "pro"}}, nil},
		{"metadata missing key", Filter{Scope: all, Metadata: map[string]string{"nope": ""}}, nil},
		{"metadata dotted key", Filter{Scope: all, Metadata: map[string]string{"a.b": "1"}}, []string{"a2"}},
		{"metadata quoted key", Filter{Scope: all, Metadata: map[string]string{`we"ird`: "v"}}, []string{"b1"}},
		{"metadata injection attempt", Filter{Scope: all, Metadata: map[string]string{"env') OR 1=1 --": "x"}}, nil},
		{"everything", Filter{Scope: tenancy.Only("acme"), States: []string{api.StatePaused}, Metadata: map[string]string{"env": "dev"}}, []string{"a2"}},
		{"limit", Filter{Scope: all, Limit: 2}, []string{"b1", "a1"}},
		{"after", Filter{Scope: all, After: &Position{CreatedAt: base.Add(time.Second), ID: "a1"}}, []string{"a2", "a3"}},
		{"after and limit", Filter{Scope: all, After: &Position{CreatedAt: base.Add(time.Second), ID: "a1"}, Limit: 1}, []string{"a2"}},
		{"after the last", Filter{Scope: all, After: &Position{CreatedAt: base.Add(3 * time.Second), ID: "a3"}}, nil},
		{"after, same time, next id", Filter{Scope: all, After: &Position{CreatedAt: base.Add(time.Second), ID: "a0"}}, []string{"a1", "a2", "a3"}},
		{"after and tenant", Filter{Scope: tenancy.Only("beta"), After: &Position{CreatedAt: base, ID: "b1"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := s.ListSandboxes(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				got = append(got, r.ID)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestExpired(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		id, state string
		exp       *time.Time
	}{
		{"past-running", api.StateRunning, ptr(now.Add(-time.Minute))},
		{"now-paused", api.StatePaused, ptr(now)},
		{"future", api.StateRunning, ptr(now.Add(time.Millisecond))},
		{"no-ttl", api.StateRunning, nil},
		{"past-stopped", api.StateStopped, ptr(now.Add(-time.Hour))},
		{"past-creating", api.StateCreating, ptr(now.Add(-time.Hour))},
		{"past-failed", api.StateFailed, ptr(now.Add(-time.Hour))},
		{"long-past-running", api.StateRunning, ptr(now.Add(-time.Hour))},
	} {
		if err := s.CreateSandbox(ctx, &SandboxRecord{ID: c.id, Tenant: "t", State: c.state, ExpiresAt: c.exp}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Expired(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"long-past-running", "past-running", "now-paused"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Expired = %v, want %v", got, want)
	}
	// The query uses the partial index on expires_at.
	var detail string
	rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN SELECT id FROM sandboxes WHERE expires_at <= ? AND state IN ('running', 'paused')", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan string
	for rows.Next() {
		var id, parent, unused int
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan += detail + "; "
	}
	if !strings.Contains(plan, "sandboxes_expires") {
		t.Errorf("Expired query plan %q does not use index sandboxes_expires", plan)
	}
}

// 16 goroutines increment a counter held in the record; a lost update or a
// SQLITE_BUSY shows as a wrong total or an error.
func TestConcurrentUpdates(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s1, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	// A second Store on the same file stands in for another process: its
	// writes contend on SQLite's lock, not on our connection pool.
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s1.CreateSandbox(ctx, &SandboxRecord{ID: "c", Tenant: "t", State: api.StateRunning, Metadata: map[string]string{}}); err != nil {
		t.Fatal(err)
	}
	const workers, each = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := 0; w < workers; w++ {
		st := s1
		if w%2 == 1 {
			st = s2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				err := st.UpdateSandbox(ctx, "c", func(r *SandboxRecord) error {
					var n int
					fmt.Sscan(r.Metadata["n"], &n)
					r.Metadata["n"] = fmt.Sprint(n + 1)
					r.Metadata[fmt.Sprintf("w%d", w)] = fmt.Sprint(i + 1)
					return nil
				})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("UpdateSandbox: %v", err)
	}
	got, err := s1.GetSandbox(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(workers * each); got.Metadata["n"] != want {
		t.Errorf("counter = %s, want %s (lost updates)", got.Metadata["n"], want)
	}
	for w := 0; w < workers; w++ {
		if v := got.Metadata[fmt.Sprintf("w%d", w)]; v != fmt.Sprint(each) {
			t.Errorf("worker %d's last write = %q, want %d", w, v, each)
		}
	}
}

func TestReopenPersists(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "state.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	rec := sampleRecord("keep")
	if err := s.CreateSandbox(ctx, rec); err != nil {
		t.Fatal(err)
	}
	key := &KeyRecord{ID: "key_000000000001", Tenant: "default", Hash: []byte("h1"), Admin: true}
	if err := s.CreateKey(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := s.AddEvent(ctx, Event{SandboxID: "keep", Kind: "created"}); err != nil {
		t.Fatal(err)
	}
	tenant := &TenantRecord{Name: "acme", Quotas: Quotas{Sandboxes: 3, CPU: 1.5}}
	if err := s.CreateTenant(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetSandbox(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("after reopen:\n got %+v\nwant %+v", got, rec)
	}
	if k, err := s.KeyByHash(ctx, []byte("h1")); err != nil || !reflect.DeepEqual(k, key) {
		t.Errorf("key after reopen = %+v, %v; want %+v", k, err, key)
	}
	if ev, err := s.Events(ctx, "keep", 0); err != nil || len(ev) != 1 {
		t.Errorf("events after reopen = %v, %v", ev, err)
	}
	if tn, err := s.GetTenant(ctx, "acme"); err != nil || !reflect.DeepEqual(tn, tenant) {
		t.Errorf("tenant after reopen = %+v, %v; want %+v", tn, err, tenant)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			continue // -wal and -shm may be gone after a clean close
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v; want no group/other access", f, fi.Mode().Perm())
		}
	}
}

func TestPragmas(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for _, c := range []struct {
		db    *sql.DB
		query string
		want  string
	}{
		{s.w, "PRAGMA journal_mode", "wal"},
		{s.w, "PRAGMA synchronous", "1"}, // NORMAL
		{s.w, "PRAGMA foreign_keys", "1"},
		{s.w, "PRAGMA busy_timeout", fmt.Sprint(busyTimeoutMs)},
		{s.r, "PRAGMA foreign_keys", "1"},
		{s.r, "PRAGMA busy_timeout", fmt.Sprint(busyTimeoutMs)},
		{s.r, "PRAGMA query_only", "1"},
		{s.w, "PRAGMA user_version", fmt.Sprint(SchemaVersion())},
	} {
		var got string
		if err := c.db.QueryRowContext(ctx, c.query).Scan(&got); err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		if got != c.want {
			t.Errorf("%s = %q, want %q", c.query, got, c.want)
		}
	}
}

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	t.Run("from empty file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var v int
		if err := s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion() {
			t.Fatalf("user_version = %d, %v; want %d", v, err, SchemaVersion())
		}
		for _, table := range []string{"sandboxes", "api_keys", "events"} {
			var n int
			if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
				t.Errorf("table %s: %v", table, err)
			}
		}
	})
	t.Run("newer file refused", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.w.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion()+1)); err != nil {
			t.Fatal(err)
		}
		s.Close()
		_, err = Open(ctx, path)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("Open of a newer schema = %v, want ErrFailedPrecondition", err)
		}
	})
	t.Run("later migration applies on top", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSandbox(ctx, sampleRecord("old")); err != nil {
			t.Fatal(err)
		}
		s.Close()
		saved := migrations
		defer func() { migrations = saved }()
		migrations = append(append([]string{}, saved...), `CREATE TABLE later (x INTEGER) STRICT;`)
		s, err = Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.w.ExecContext(ctx, "INSERT INTO later VALUES (1)"); err != nil {
			t.Errorf("new table missing: %v", err)
		}
		if _, err := s.GetSandbox(ctx, "old"); err != nil {
			t.Errorf("old data lost: %v", err)
		}
	})
	t.Run("failed migration leaves version", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		saved := migrations
		defer func() { migrations = saved }()
		migrations = append(append([]string{}, saved...), `CREATE TABLE ok (x INTEGER); THIS IS NOT SQL;`)
		if _, err := Open(ctx, path); err == nil {
			t.Fatal("Open with a broken migration succeeded")
		}
		migrations = saved
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var n int
		s.r.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'ok'").Scan(&n)
		if n != 0 {
			t.Errorf("half-applied migration left table ok behind")
		}
	})
}

func TestOpenRejectsBadPath(t *testing.T) {
	for _, p := range []string{"", "/tmp/x?mode=ro"} {
		if _, err := Open(context.Background(), p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Open(%q) = %v, want ErrInvalidArgument", p, err)
		}
	}
}
