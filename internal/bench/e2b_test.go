package bench

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestE2BLineScript reads a script's samples from its last line, and turns
// a failing script into a line with an error and a note, not a failed run.
func TestE2BLineScript(t *testing.T) {
	r := &runner{report: &Report{}}
	res := r.script(context.Background(), "x", t.TempDir(), []string{"sh", "-c", `echo warming up; echo '{"samples_ms":[30,10,20]}'`}, nil)
	if res.N != 3 || res.P50 != 20 || res.Max != 30 || res.Errors != 0 {
		t.Fatalf("script result = %+v", res)
	}
	res = r.script(context.Background(), "x", t.TempDir(), []string{"sh", "-c", "echo no SDK here >&2; exit 3"}, nil)
	if res.N != 0 || res.Errors != 1 || !strings.Contains(res.Note, "no SDK here") {
		t.Fatalf("failing script result = %+v", res)
	}
}

// TestE2BLineMissingPackages: without the npm packages the line is
// skipped with a note that says how to install them.
func TestE2BLineMissingPackages(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bench.mjs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := &runner{report: &Report{}, templates: []string{"base"}, opts: Options{
		Only: regexp.MustCompile("js-sdk"),
		E2B:  E2BOptions{Dir: dir, URL: "http://127.0.0.1:1", Key: "k"},
	}}
	r.e2b(context.Background())
	if len(r.report.Results) != 0 || len(r.report.Notes) != 1 || !strings.Contains(r.report.Notes[0], "npm ci") {
		t.Fatalf("results %+v, notes %q", r.report.Results, r.report.Notes)
	}
}
