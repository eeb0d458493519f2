package store

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKeysVersion: revoking a key, deleting its tenant and closing the
// store move KeysVersion on; the writes every request makes (audit, last
// use) do not, or a cache of keys would never hit.
func TestKeysVersion(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	if err := s.CreateTenant(ctx, &TenantRecord{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	k := &KeyRecord{ID: "key_000000000001", Tenant: "acme", Hash: []byte("h1")}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	moves := func(what string, want bool, fn func() error) {
		t.Helper()
		v := s.KeysVersion()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := s.KeysVersion() != v; got != want {
			t.Errorf("%s: KeysVersion moved = %v, want %v", what, got, want)
		}
	}
	moves("AppendAudit", false, func() error {
		return s.AppendAudit(ctx, []AuditRecord{{Time: time.Now(), Method: "POST", Path: "/v1/x", Status: 200}})
	})
	moves("TouchKey", false, func() error { return s.TouchKey(ctx, k.ID, time.Now()) })
	moves("RevokeKey", true, func() error { return s.RevokeKey(ctx, k.ID) })
	k2 := &KeyRecord{ID: "key_000000000002", Tenant: "acme", Hash: []byte("h2")}
	moves("CreateKey", true, func() error { return s.CreateKey(ctx, k2) })
	moves("DeleteTenant", true, func() error { return s.DeleteTenant(ctx, "acme") })
	moves("Close", true, s.Close)
}

// TestWritesMoveKeysVersion holds the rule KeysVersion's cache users rely
// on: every function of this package that executes a statement calls
// changed (directly or through writeTx), but for the few writes that
// cannot change a key.
func TestWritesMoveKeysVersion(t *testing.T) {
	exempt := map[string]bool{"AppendAudit": true, "insertAudit": true, "AddEvent": true, "TouchKey": true}
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || exempt[fn.Name.Name] || fn.Name.Name == "writeTx" {
				continue
			}
			var execs, bumps bool
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					switch sel.Sel.Name {
					case "ExecContext", "Exec":
						execs = true
					case "changed", "writeTx":
						bumps = true
					}
				}
				return true
			})
			if execs && !bumps {
				t.Errorf("%s: %s writes without moving KeysVersion (defer s.changed())", fset.Position(fn.Pos()), fn.Name.Name)
			}
		}
	}
}
