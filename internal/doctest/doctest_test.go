package doctest

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	src := "# Doc\n\n<!-- doctest: run -->\n```sh\necho hi\n```\n\n<!-- doctest: output -->\n```\nhi\n```\n" +
		"<!-- doctest: setup\ntouch f\n-->\n<!-- doctest: skip needs a GPU -->\n```python\nimport torch\n```\n" +
		"- a list\n\n  <!-- doctest: run -->\n  ```console\n  # echo a\n  a\n  ```\n"
	blocks, err := Parse("d.md", src)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, b := range blocks {
		kinds = append(kinds, b.Kind)
	}
	if got := strings.Join(kinds, ","); got != "run,output,setup,skip,run" {
		t.Fatalf("kinds %s", got)
	}
	if blocks[0].Want != blocks[1] || blocks[0].Text != "echo hi\n" || blocks[0].Line != 4 {
		t.Errorf("run block %+v", blocks[0])
	}
	if blocks[2].Text != "touch f\n" || blocks[3].Reason != "needs a GPU" {
		t.Errorf("setup %+v, skip %+v", blocks[2], blocks[3])
	}
	if blocks[4].Text != "# echo a\na\n" || blocks[4].Lang != "console" {
		t.Errorf("indented block %q", blocks[4].Text)
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"no mark", "text\n```sh\nls\n```\n", "d.md:2: code block without a doctest mark"},
		{"mark not right before", "<!-- doctest: run -->\nsome text\n```sh\nls\n```\n", "d.md:3: code block without a doctest mark"},
		{"skip without reason", "<!-- doctest: skip -->\n```sh\nls\n```\n", "d.md:1: skip wants a reason"},
		{"unknown mark", "<!-- doctest: maybe -->\n```sh\nls\n```\n", `unknown doctest mark "maybe"`},
		{"output alone", "<!-- doctest: output -->\n```\nx\n```\n", "an output block must follow a run block"},
		{"run a go block", "<!-- doctest: run -->\n```go\nx := 1\n```\n", `a "go" block cannot run`},
		{"unclosed", "<!-- doctest: run -->\n```sh\nls\n", "code block without its closing ```"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("d.md", tt.src)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestCommandsAndMatch(t *testing.T) {
	cmds, wants := Commands("# echo 5050\n5050\n# ls\n$ echo a; echo b\na\nb\n")
	if strings.Join(cmds, "|") != "echo 5050|ls|echo a; echo b" || wants[0] != "5050\n" || wants[1] != "" || wants[2] != "a\nb\n" {
		t.Fatalf("cmds %q wants %q", cmds, wants)
	}
	for _, tt := range []struct {
		want, got string
		ok        bool
	}{
		{"a\nb\n", "a\nb\n", true},
		{"a\nb\n", "a  \nb", true},
		{"a\n...\nz\n", "a\nb\nc\nz\n", true},
		{"a\n...\n", "a\n", true},
		{"a\nb\n", "a\nc\n", false},
		{"a\n", "a\nb\n", false},
	} {
		if Match(tt.want, tt.got) != tt.ok {
			t.Errorf("Match(%q, %q) = %v", tt.want, tt.got, !tt.ok)
		}
	}
}

// TestDocsAreMarked holds every code block of README.md, docs/ and
// examples/ to the convention: run (and then run by
// integration/TestDocs), output, or skip with a reason.
func TestDocsAreMarked(t *testing.T) {
	files, err := Files("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found only %v", files)
	}
	for _, f := range files {
		if _, err := ParseFile("../..", f); err != nil {
			t.Error(err)
		}
	}
}
