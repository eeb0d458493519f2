// Package doctest reads the code blocks of agentbox's Markdown docs
// (README.md, docs/*.md, examples/*.md) and the marks that say what the
// doc tests do with each (docs/doctest.md). Every fenced block carries a
// mark on the line before it:
//
//	<!-- doctest: run -->             run it (sh, console, python)
//	<!-- doctest: output -->          the output of the run block before it
//	<!-- doctest: skip REASON -->     not run, and why
//
// and a hidden setup step may precede a block:
//
//	<!-- doctest: setup
//	printf 'a,b\n1,2\n' > data.csv
//	-->
//
// Parse refuses a block without a mark, a skip without a reason, and an
// output block that follows no run block, so a doc cannot drift out of
// the tests silently. integration/doctest_test.go runs the run blocks
// against a test daemon.
package doctest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Kinds of Block.
const (
	Run    = "run"
	Output = "output"
	Skip   = "skip"
	Setup  = "setup" // a hidden step from a setup comment, not a fence
)

// Block is one fenced code block of a doc, or a setup comment.
type Block struct {
	File string // relative to the repository root
	Line int    // 1-based line of the opening fence (or comment)
	Lang string // the fence's info string: sh, console, python, ...
	Text string // the block's content, with a final newline
	Kind string // Run, Output, Skip or Setup
	// Reason says why a Skip block is not run.
	Reason string
	// Want is, for a Run block, the Output block after it (nil if none).
	Want *Block
}

// Files lists the docs the doc tests cover, relative to root: README.md,
// docs/*.md and examples/*.md.
func Files(root string) ([]string, error) {
	files := []string{"README.md"}
	for _, glob := range []string{"docs/*.md", "examples/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			return nil, err
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, rel)
		}
	}
	sort.Strings(files[1:])
	return files, nil
}

// ParseFile reads and parses root/file.
func ParseFile(root, file string) ([]*Block, error) {
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	return Parse(file, string(b))
}

// Parse returns the blocks of a doc in order: each fenced block with its
// mark, and setup comments as Setup blocks. Output blocks are attached to
// the run block before them (Want) and also returned. Every problem found
// is reported, one a line, as file:line: message.
func Parse(file, src string) ([]*Block, error) {
	lines := strings.Split(src, "\n")
	var (
		blocks  []*Block
		errs    []string
		mark    *Block // the mark seen on the line before a fence
		lastRun *Block
	)
	bad := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s:%d: %s", file, line, fmt.Sprintf(format, args...)))
	}
	for i := 0; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		if strings.HasPrefix(t, "<!-- doctest:") {
			body := strings.TrimSpace(strings.TrimPrefix(t, "<!-- doctest:"))
			if strings.HasPrefix(body, Setup) && !strings.HasSuffix(body, "-->") {
				// A multi-line setup comment, up to "-->".
				start := i + 1
				var text []string
				for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "-->"; i++ {
					text = append(text, lines[i])
				}
				if i == len(lines) {
					bad(start, "setup comment without its closing -->")
					break
				}
				blocks = append(blocks, &Block{File: file, Line: start, Lang: "sh", Kind: Setup, Text: strings.Join(text, "\n") + "\n"})
				continue
			}
			if !strings.HasSuffix(body, "-->") {
				bad(i+1, "a doctest mark is one line: <!-- doctest: run|output|skip REASON -->")
				continue
			}
			body = strings.TrimSpace(strings.TrimSuffix(body, "-->"))
			kind, reason, _ := strings.Cut(body, " ")
			reason = strings.TrimSpace(reason)
			switch kind {
			case Run, Output:
				if reason != "" {
					bad(i+1, "%q takes nothing after it, got %q", kind, reason)
				}
			case Skip:
				if reason == "" {
					bad(i+1, "skip wants a reason: <!-- doctest: skip why this block is not run -->")
				}
			default:
				bad(i+1, "unknown doctest mark %q; use run, output, skip REASON or setup", kind)
				continue
			}
			mark = &Block{Kind: kind, Reason: reason, Line: i + 1}
			continue
		}
		fence, ok := fenceOf(lines[i])
		if !ok {
			if t != "" {
				mark = nil // a mark applies to the fence right after it
			}
			continue
		}
		b := &Block{File: file, Line: i + 1, Lang: strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(lines[i]), "`~"))}
		var text []string
		for i++; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == fence {
				break
			}
			text = append(text, lines[i])
		}
		if i == len(lines) {
			bad(b.Line, "code block without its closing %s", fence)
		}
		indent := len(lines[b.Line-1]) - len(strings.TrimLeft(lines[b.Line-1], " "))
		for j, l := range text {
			if len(l) >= indent && strings.TrimSpace(l[:indent]) == "" {
				text[j] = l[indent:]
			}
		}
		b.Text = strings.Join(text, "\n") + "\n"
		switch {
		case mark == nil:
			bad(b.Line, "code block without a doctest mark: put <!-- doctest: run --> (or output, or skip REASON) on the line before it (docs/doctest.md)")
			b.Kind = Skip
		default:
			b.Kind, b.Reason = mark.Kind, mark.Reason
		}
		mark = nil
		switch b.Kind {
		case Run:
			if !runnable(b.Lang) {
				bad(b.Line, "a %q block cannot run; the doc tests run sh, bash, console and python blocks", b.Lang)
			}
			lastRun = b
		case Output:
			if lastRun == nil || lastRun.Want != nil {
				bad(b.Line, "an output block must follow a run block (each run block has at most one)")
			} else {
				lastRun.Want = b
			}
			lastRun = nil
		default:
			lastRun = nil
		}
		blocks = append(blocks, b)
	}
	if len(errs) > 0 {
		return blocks, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return blocks, nil
}

// fenceOf returns the fence a line opens (``` or ~~~, possibly longer),
// if it opens one.
func fenceOf(line string) (string, bool) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return "", false
	}
	for _, c := range []string{"`", "~"} {
		n := len(t) - len(strings.TrimLeft(t, c))
		if n >= 3 {
			return strings.Repeat(c, n), true
		}
	}
	return "", false
}

func runnable(lang string) bool {
	switch lang {
	case "sh", "bash", "console", "python":
		return true
	}
	return false
}

// Commands splits a console block into its commands (lines starting with
// "# " or "$ ", the prompt taken off) and, after each, the output the doc
// shows for it (empty: none shown, nothing checked).
func Commands(text string) (cmds []string, wants []string) {
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.HasPrefix(l, "# ") || strings.HasPrefix(l, "$ ") {
			cmds = append(cmds, l[2:])
			wants = append(wants, "")
			continue
		}
		if len(cmds) == 0 {
			continue
		}
		wants[len(wants)-1] += l + "\n"
	}
	return cmds, wants
}

// Match reports whether got is the output want shows: the same lines
// (trailing spaces aside), where a line "..." stands for any number of
// lines.
func Match(want, got string) bool {
	w := splitLines(want)
	g := splitLines(got)
	return matchLines(w, g)
}

func splitLines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	ls := strings.Split(s, "\n")
	for i := range ls {
		ls[i] = strings.TrimRight(ls[i], " \t\r")
	}
	return ls
}

func matchLines(w, g []string) bool {
	for len(w) > 0 {
		if w[0] == "..." {
			for k := 0; k <= len(g); k++ {
				if matchLines(w[1:], g[k:]) {
					return true
				}
			}
			return false
		}
		if len(g) == 0 || w[0] != g[0] {
			return false
		}
		w, g = w[1:], g[1:]
	}
	return len(g) == 0
}
