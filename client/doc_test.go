package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/sdk-go.md names every exported function and method of the package,
// so the page cannot fall behind the SDK.
func TestDocsNameEveryMethod(t *testing.T) {
	doc, err := os.ReadFile("../docs/sdk-go.md")
	if err != nil {
		t.Fatalf("reading the Go SDK's page: %v", err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !fn.Name.IsExported() || !receiverExported(fn) {
				continue
			}
			seen++
			if !strings.Contains(string(doc), fn.Name.Name+"(") {
				t.Errorf("docs/sdk-go.md does not mention %s (%s); add it to its group", fn.Name.Name, fset.Position(fn.Pos()))
			}
		}
	}
	if seen < 50 {
		t.Fatalf("found only %d exported functions in client/", seen)
	}
}

func receiverExported(fn *ast.FuncDecl) bool {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return true
	}
	typ := fn.Recv.List[0].Type
	if st, ok := typ.(*ast.StarExpr); ok {
		typ = st.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}
