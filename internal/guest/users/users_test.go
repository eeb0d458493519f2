package users

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
)

const testPasswd = `root:x:0:0:root:/root:/bin/bash
# a comment
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
broken:x:notanumber:1::/:/bin/sh
short:x:5
user:x:1000:1000:User,,,:/home/user:/bin/bash
`

const testGroup = `root:x:0:
daemon:x:1:
sudo:x:27:user
docker:x:999:daemon, user
dup:x:27:user
users:x:100:other,user
`

func writeRoot(t *testing.T, passwd, group string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if passwd != "" {
		if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(passwd), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if group != "" {
		if err := os.WriteFile(filepath.Join(root, "etc/group"), []byte(group), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestLookupIn(t *testing.T) {
	root := writeRoot(t, testPasswd, testGroup)
	tests := []struct {
		name string
		in   string
		want User
	}{
		{"empty is root", "", User{Name: "root", UID: 0, GID: 0, Home: "/root", Shell: "/bin/bash"}},
		{"root by name", "root", User{Name: "root", UID: 0, GID: 0, Home: "/root", Shell: "/bin/bash"}},
		{"by name with groups", "user", User{Name: "user", UID: 1000, GID: 1000, Groups: []int{27, 999, 100}, Home: "/home/user", Shell: "/bin/bash"}},
		{"by uid", "1000", User{Name: "user", UID: 1000, GID: 1000, Groups: []int{27, 999, 100}, Home: "/home/user", Shell: "/bin/bash"}},
		{"daemon", "daemon", User{Name: "daemon", UID: 1, GID: 1, Groups: []int{999}, Home: "/usr/sbin", Shell: "/usr/sbin/nologin"}},
		{"numeric without entry", "4242", User{Name: "4242", UID: 4242, GID: 4242, Home: "/", Shell: "/bin/sh"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LookupIn(root, tt.in)
			if err != nil {
				t.Fatalf("LookupIn(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("LookupIn(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestLookupInErrors(t *testing.T) {
	root := writeRoot(t, testPasswd, testGroup)
	tests := []struct {
		name    string
		in      string
		wantMsg string
	}{
		{"unknown", "bob", `user "bob" not found in /etc/passwd; create it in the template or pass a numeric uid`},
		{"unparsable entry is skipped", "broken", `user "broken" not found`},
		{"colon", "a:b", "not a valid user name"},
		{"out of range", "99999999999", "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LookupIn(root, tt.in)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("LookupIn(%q) error = %v, want invalid argument", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
		})
	}
}

func TestLookupInMissingFiles(t *testing.T) {
	root := writeRoot(t, "", "")
	got, err := LookupIn(root, "")
	if err != nil {
		t.Fatal(err)
	}
	want := User{Name: "root", Home: "/root", Shell: "/bin/sh"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, err := LookupIn(root, "root"); err != nil || got.UID != 0 {
		t.Errorf("LookupIn(root) = %+v, %v; want uid 0", got, err)
	}
	if _, err := LookupIn(root, "user"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("named user without passwd: err = %v, want invalid argument", err)
	}
}

// A hostile sandbox can point /etc/passwd anywhere; symlinks resolve inside
// the root, and a fifo must not block the lookup.
func TestLookupInHostileFiles(t *testing.T) {
	t.Run("absolute symlink stays in root", func(t *testing.T) {
		root := writeRoot(t, "", testGroup)
		inside := "user:x:1234:1234::/in:/bin/sh\n"
		if err := os.WriteFile(filepath.Join(root, "etc/real"), []byte(inside), 0o644); err != nil {
			t.Fatal(err)
		}
		// /etc/real inside the root; on the host /etc/real does not exist
		// (and if it did, it must not be read).
		if err := os.Symlink("/etc/real", filepath.Join(root, "etc/passwd")); err != nil {
			t.Fatal(err)
		}
		got, err := LookupIn(root, "user")
		if err != nil || got.UID != 1234 {
			t.Fatalf("LookupIn = %+v, %v; want uid 1234 from the root's own file", got, err)
		}
	})
	t.Run("relative symlink out of root", func(t *testing.T) {
		outer := t.TempDir()
		root := filepath.Join(outer, "root")
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(outer, "secret"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(outer, "secret/passwd"), []byte("spy:x:66:66::/:/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Outside the root this would reach outer/secret/passwd.
		if err := os.Symlink("../../secret/passwd", filepath.Join(root, "etc/passwd")); err != nil {
			t.Fatal(err)
		}
		if u, err := LookupIn(root, "spy"); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("LookupIn(spy) = %+v, %v; a file outside the root was read", u, err)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		root := writeRoot(t, "", "")
		if err := syscall.Mkfifo(filepath.Join(root, "etc/passwd"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LookupIn(root, "user")
		if !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("err = %v, want failed precondition", err)
		}
	})
}

func TestLookupCurrentRoot(t *testing.T) {
	u, err := Lookup("")
	if err != nil {
		t.Fatal(err)
	}
	if u.UID != 0 || u.Name != "root" {
		t.Errorf("Lookup(\"\") = %+v, want root", u)
	}
}
