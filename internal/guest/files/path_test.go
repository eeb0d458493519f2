package files

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
)

func TestValidatePath(t *testing.T) {
	long := strings.Repeat("a", 300)
	tests := []struct {
		p       string
		wantErr string
	}{
		{"/", ""},
		{"/home/user/file.txt", ""},
		{"/" + strings.Repeat("a", 255), ""},
		{"", "path is required"},
		{"relative/path", "not absolute"},
		{"/a/../etc/shadow", "not clean"},
		{"/a/./b", "not clean"},
		{"//etc", "not clean"},
		{"/a/", "not clean"},
		{"/..", "not clean"},
		{"/a\x00b", "NUL byte"},
		{"/" + long, "is 300 bytes long"},
		{"/" + strings.Repeat("abcdefgh/", 600), "bytes long"},
	}
	for _, tt := range tests {
		t.Run(tt.p[:min(len(tt.p), 30)], func(t *testing.T) {
			err := ValidatePath(tt.p)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidatePath(%q) = %v, want nil", tt.p, err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ValidatePath(%q) = %v, want invalid argument containing %q", tt.p, err, tt.wantErr)
			}
		})
	}
}

func FuzzValidatePath(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "/../x", "a", "/a//b", "/a\x00", "/.", "/a/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if ValidatePath(p) != nil {
			return
		}
		r := rel(p)
		if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || len(p) > maxPathLen {
			t.Fatalf("accepted %q", p)
		}
		if strings.HasPrefix(r, "/") {
			t.Fatalf("rel(%q) = %q is absolute", p, r)
		}
		for _, c := range strings.Split(r, "/") {
			if c == ".." || (c == "." && r != ".") || c == "" || len(c) > maxNameLen {
				t.Fatalf("accepted %q with component %q", p, c)
			}
		}
	})
}
