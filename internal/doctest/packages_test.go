package doctest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackagesDocumented: every Go package of the module has a package
// doc comment, and docs/ARCHITECTURE.md's layout names it (a line
// "dir/..." covers the packages under dir), so the map cannot drift from
// the code silently.
func TestPackagesDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	arch, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	layout := layoutEntries(string(arch))
	if len(layout) < 10 {
		t.Fatalf("docs/ARCHITECTURE.md's ## Layout block names %d paths; is the block still there?", len(layout))
	}
	var n int
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		pkgs, err := parser.ParseDir(token.NewFileSet(), path, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		for _, p := range pkgs {
			n++
			documented := false
			for _, f := range p.Files {
				if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
					documented = true
				}
			}
			if !documented {
				t.Errorf("package %s (%s) has no doc comment: add one (a doc.go, \"// Package %s ...\") saying what it is for", p.Name, rel, p.Name)
			}
			if rel != "." && !layoutNames(layout, rel) {
				t.Errorf("%s is not in docs/ARCHITECTURE.md's ## Layout: add a line for it (or for a parent, as \"dir/...\")", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("found %d packages; is the walk at the module root?", n)
	}
}

// layoutEntries returns the paths of the first code block after
// "## Layout": the first word of each line.
func layoutEntries(doc string) []string {
	_, after, ok := strings.Cut(doc, "\n## Layout\n")
	if !ok {
		return nil
	}
	_, block, ok := strings.Cut(after, "```\n")
	if !ok {
		return nil
	}
	block, _, _ = strings.Cut(block, "```")
	var out []string
	for _, line := range strings.Split(block, "\n") {
		if line == "" || line[0] == ' ' {
			continue
		}
		out = append(out, strings.Fields(line)[0])
	}
	return out
}

func layoutNames(layout []string, dir string) bool {
	for _, e := range layout {
		e = strings.TrimSuffix(e, "/")
		if base, ok := strings.CutSuffix(e, "/..."); ok {
			if dir == base || strings.HasPrefix(dir, base+"/") {
				return true
			}
			continue
		}
		if dir == e {
			return true
		}
	}
	return false
}
