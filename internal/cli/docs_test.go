package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/doctest"
)

// inlineCommand finds a command line of the CLI in an inline code span,
// blockCommand one in a code block: at the start of a line (after a
// prompt), after a pipe or in $(...).
var (
	inlineCommand = regexp.MustCompile("`agentbox ([a-z][a-z-]*(?: [a-z][a-z-]*)*)")
	blockCommand  = regexp.MustCompile(`(?m)(?:^[#$] |^|\| |\$\()agentbox ([a-z][a-z-]*(?: [a-z][a-z-]*)*)`)
)

// TestDocsNameRealCommands: every `agentbox VERB ...` in README.md, docs/
// and examples/ is a command this CLI has (a doc naming `agentbox health`,
// which never existed, fails here).
func TestDocsNameRealCommands(t *testing.T) {
	files, err := doctest.Files("../..")
	if err != nil {
		t.Fatal(err)
	}
	root := NewRoot(Options{Daemon: "agentboxd"})
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		type found struct {
			words []string
			line  int
		}
		var all []found
		for _, m := range inlineCommand.FindAllStringSubmatchIndex(string(b), -1) {
			all = append(all, found{strings.Fields(string(b[m[2]:m[3]])), 1 + strings.Count(string(b[:m[0]]), "\n")})
		}
		blocks, _ := doctest.Parse(f, string(b)) // TestDocsAreMarked reports marks
		for _, bl := range blocks {
			if bl.Kind == doctest.Output {
				continue
			}
			for _, m := range blockCommand.FindAllStringSubmatchIndex(bl.Text, -1) {
				all = append(all, found{strings.Fields(bl.Text[m[2]:m[3]]), bl.Line + 1 + strings.Count(bl.Text[:m[0]], "\n")})
			}
		}
		for _, fd := range all {
			words, line := fd.words, fd.line
			seen++
			c, rest, err := root.Find(words)
			if err != nil || c == root {
				t.Errorf("%s:%d: `agentbox %s` is not a command of this CLI (see agentbox --help)", f, line, strings.Join(words, " "))
				continue
			}
			// A command with subcommands takes no free word after it.
			if c.HasSubCommands() && len(rest) > 0 && !c.Runnable() {
				t.Errorf("%s:%d: `agentbox %s`: %s has no subcommand %q", f, line, strings.Join(words, " "), c.CommandPath(), rest[0])
			}
		}
	}
	if seen < 50 {
		t.Fatalf("found only %d agentbox commands in the docs; is the pattern still right?", seen)
	}
}
