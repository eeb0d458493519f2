package files

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

func TestBinaryRoundTrip(t *testing.T) {
	e := newEnv(t, Options{DefaultUser: "user"})
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(i * 7)
	}
	fi := decode[api.FileInfo](t, expect(t, e.put("/home/user/bin.dat", data), 200, ""))
	if fi.Size != int64(len(data)) || fi.Mode != "0644" || fi.UID != 1000 || fi.GID != 1000 || fi.Type != api.FileTypeFile {
		t.Errorf("FileInfo = %+v, want size %d, mode 0644, uid/gid 1000, file", fi, len(data))
	}
	resp := e.get("/home/user/bin.dat")
	got := expect(t, resp, 200, "")
	if !bytes.Equal(got, data) {
		t.Fatalf("downloaded %d bytes differ from the %d uploaded", len(got), len(data))
	}
	if cl := resp.Header.Get("Content-Length"); cl != "3145745" {
		t.Errorf("Content-Length = %q", cl)
	}
	// Parents created by the upload belong to the user.
	var st syscall.Stat_t
	if err := syscall.Stat(e.host("home/user"), &st); err != nil || st.Uid != 1000 || st.Mode&0o777 != 0o755 {
		t.Errorf("parent home/user: uid %d mode %o err %v; want 1000 0755", st.Uid, st.Mode&0o777, err)
	}

	// Overwrite in place with a shorter body: truncated, same inode.
	before := st
	syscall.Stat(e.host("home/user/bin.dat"), &before)
	expect(t, e.put("/home/user/bin.dat", []byte("short")), 200, "")
	if got := expect(t, e.get("/home/user/bin.dat"), 200, ""); string(got) != "short" {
		t.Errorf("after overwrite got %q", got)
	}
	var after syscall.Stat_t
	syscall.Stat(e.host("home/user/bin.dat"), &after)
	if after.Ino != before.Ino {
		t.Errorf("overwrite replaced the inode; PUT writes in place")
	}
}

// rng is a deterministic stream of pseudo-random bytes.
type rng struct{ r *rand.ChaCha8 }

func (g rng) Read(p []byte) (int, error) { return g.r.Read(p) }

func TestLargeRoundTripBoundedMemory(t *testing.T) {
	e := newEnv(t, Options{})
	const size = 100 << 20
	seed := [32]byte{1, 2, 3}
	want := sha256.New()
	io.Copy(want, io.LimitReader(rng{rand.NewChaCha8(seed)}, size))

	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()

	resp := e.do("PUT", "/files", q("path", "/big.bin"), io.LimitReader(rng{rand.NewChaCha8(seed)}, size))
	expect(t, resp, 200, "")
	resp = e.get("/big.bin")
	if resp.StatusCode != 200 {
		t.Fatalf("GET status %d", resp.StatusCode)
	}
	got := sha256.New()
	n, err := io.Copy(got, resp.Body)
	if err != nil || n != size {
		t.Fatalf("downloaded %d bytes, err %v", n, err)
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&m1)
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatal("100 MiB round trip: content differs")
	}
	alloc := m1.TotalAlloc - m0.TotalAlloc
	t.Logf("100 MiB up and down in %v (%.0f MiB/s), %d KiB allocated", elapsed, 200/elapsed.Seconds(), alloc>>10)
	// Client and server together; buffering the body anywhere would
	// allocate at least 100 MiB.
	if alloc > 24<<20 {
		t.Errorf("round trip allocated %d MiB; streaming should stay far below the 100 MiB moved", alloc>>20)
	}
	if elapsed > 60*time.Second { // sanity only: allocation is the verdict
		t.Errorf("round trip took %v", elapsed)
	}
}

func TestPutModeAndUser(t *testing.T) {
	e := newEnv(t, Options{})
	tests := []struct {
		name, path, mode, user string
		wantMode, wantUID      uint32
	}{
		{"default", "/a.txt", "", "", 0o644, 0},
		{"exec for user", "/x/y/run.sh", "0755", "user", 0o755, 1000},
		{"setuid stripped for user", "/suid-user", "4755", "1000", 0o755, 1000},
		{"setuid kept for root", "/suid-root", "4755", "root", 0o4755, 0},
		{"numeric uid without entry", "/n", "0600", "4242", 0o600, 4242},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{}
			if tt.mode != "" {
				args = append(args, "mode", tt.mode)
			}
			if tt.user != "" {
				args = append(args, "user", tt.user)
			}
			expect(t, e.put(tt.path, []byte("x"), args...), 200, "")
			var st syscall.Stat_t
			if err := syscall.Stat(e.host(tt.path), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&0o7777 != tt.wantMode {
				t.Errorf("mode = %o, want %o", st.Mode&0o7777, tt.wantMode)
			}
			if st.Uid != tt.wantUID {
				t.Errorf("uid = %d, want %d", st.Uid, tt.wantUID)
			}
		})
	}
	t.Run("bad mode", func(t *testing.T) {
		expect(t, e.put("/m", nil, "mode", "999"), 400, "octal mode")
	})
	t.Run("unknown user", func(t *testing.T) {
		expect(t, e.put("/m", nil, "user", "bob"), 400, `user "bob" not found in /etc/passwd`)
	})
	t.Run("onto a directory", func(t *testing.T) {
		expect(t, e.put("/etc", nil), 409, "is a directory")
	})
}

func TestMkdirRenameStat(t *testing.T) {
	e := newEnv(t, Options{})
	fi := decode[api.FileInfo](t, expect(t, e.postJSON("/files/mkdir", api.MkdirRequest{Path: "/p/q/r", Mode: "0700", User: "user"}), 200, ""))
	if fi.Type != api.FileTypeDir || fi.Mode != "0700" || fi.UID != 1000 || fi.Name != "r" {
		t.Errorf("mkdir FileInfo = %+v", fi)
	}
	if st, err := os.Stat(e.host("p/q")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("intermediate p/q: %v %v; want mode 0755", st.Mode(), err)
	}
	// mkdir -p is idempotent.
	expect(t, e.postJSON("/files/mkdir", api.MkdirRequest{Path: "/p/q/r"}), 200, "")
	mustWrite(t, e.host("file"), "f")
	expect(t, e.postJSON("/files/mkdir", api.MkdirRequest{Path: "/file/sub"}), 409, "not a directory")
	expect(t, e.postJSON("/files/mkdir", api.MkdirRequest{Path: "rel"}), 400, "not absolute")
	expect(t, e.do("POST", "/files/mkdir", "", bytes.NewReader([]byte(`{"path":1}`))), 400, "decoding")

	// rename
	fi = decode[api.FileInfo](t, expect(t, e.postJSON("/files/rename", api.RenameRequest{From: "/file", To: "/p/q/r/moved"}), 200, ""))
	if fi.Path != "/p/q/r/moved" || fi.Size != 1 {
		t.Errorf("rename FileInfo = %+v", fi)
	}
	if _, err := os.Stat(e.host("file")); !os.IsNotExist(err) {
		t.Errorf("source still exists after rename")
	}
	expect(t, e.postJSON("/files/rename", api.RenameRequest{From: "/nope", To: "/x"}), 404, "")
	expect(t, e.postJSON("/files/rename", api.RenameRequest{From: "/p", To: "/p/q/inside"}), 400, "into itself")
	expect(t, e.postJSON("/files/rename", api.RenameRequest{From: "/", To: "/x"}), 400, "cannot rename /")

	// stat of a symlink: lstat semantics with its target.
	if err := os.Symlink("/etc/shadow", e.host("link")); err != nil {
		t.Fatal(err)
	}
	fi = decode[api.FileInfo](t, expect(t, e.do("GET", "/files/stat", q("path", "/link"), nil), 200, ""))
	if fi.Type != api.FileTypeSymlink || fi.Target != "/etc/shadow" || fi.Name != "link" {
		t.Errorf("stat of symlink = %+v", fi)
	}
	fi = decode[api.FileInfo](t, expect(t, e.do("GET", "/files/stat", q("path", "/"), nil), 200, ""))
	if fi.Type != api.FileTypeDir {
		t.Errorf("stat of / = %+v", fi)
	}
	expect(t, e.do("GET", "/files/stat", q("path", "/missing"), nil), 404, "no such file")
}

func TestList(t *testing.T) {
	e := newEnv(t, Options{})
	for _, p := range []string{"d/b.txt", "d/a.txt", "d/sub/c.txt", "d/sub/deeper/e.txt"} {
		mustWrite(t, e.host(p), "x")
	}
	os.Symlink("/", e.host("d/zlink"))
	paths := func(b []byte) []string {
		var out []string
		for _, fi := range decode[api.ListFilesResponse](t, b).Entries {
			out = append(out, fi.Path)
		}
		return out
	}
	tests := []struct {
		depth string
		want  []string
	}{
		{"", []string{"/d/a.txt", "/d/b.txt", "/d/sub", "/d/zlink"}},
		{"2", []string{"/d/a.txt", "/d/b.txt", "/d/sub", "/d/sub/c.txt", "/d/sub/deeper", "/d/zlink"}},
		{"10", []string{"/d/a.txt", "/d/b.txt", "/d/sub", "/d/sub/c.txt", "/d/sub/deeper", "/d/sub/deeper/e.txt", "/d/zlink"}},
	}
	for _, tt := range tests {
		t.Run("depth="+tt.depth, func(t *testing.T) {
			args := []string{"path", "/d"}
			if tt.depth != "" {
				args = append(args, "depth", tt.depth)
			}
			got := paths(expect(t, e.do("GET", "/files/list", q(args...), nil), 200, ""))
			if !equal(got, tt.want) {
				t.Errorf("list = %v, want %v", got, tt.want)
			}
		})
	}
	expect(t, e.do("GET", "/files/list", q("path", "/d", "depth", "11"), nil), 400, "depth must be between 1 and 10")
	expect(t, e.do("GET", "/files/list", q("path", "/d/a.txt"), nil), 409, "not a directory")
	expect(t, e.do("GET", "/files/list", q("path", "/nope"), nil), 404, "")
	// Listing through a symlink to / lists the root, not the host.
	got := paths(expect(t, e.do("GET", "/files/list", q("path", "/d/zlink"), nil), 200, ""))
	if !equal(got, []string{"/d/zlink/d", "/d/zlink/etc"}) {
		t.Errorf("list through link to / = %v", got)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDelete(t *testing.T) {
	e := newEnv(t, Options{})
	mustWrite(t, e.host("f"), "x")
	mustMkdir(t, e.host("empty"))
	mustWrite(t, e.host("tree/a/b/c"), "x")
	// A link inside the tree pointing outside the root, and one to a
	// directory of the root: recursive delete must remove the links only.
	os.Symlink(filepath.Join(e.outer, "etc"), e.host("tree/hostetc"))
	os.Symlink("/etc", e.host("tree/a/rootetc"))

	expect(t, e.do("DELETE", "/files", q("path", "/f"), nil), http.StatusNoContent, "")
	expect(t, e.do("DELETE", "/files", q("path", "/f"), nil), 404, "")
	expect(t, e.do("DELETE", "/files", q("path", "/empty"), nil), http.StatusNoContent, "")
	expect(t, e.do("DELETE", "/files", q("path", "/tree"), nil), 409, "directory not empty; pass recursive=true")
	expect(t, e.do("DELETE", "/files", q("path", "/tree", "recursive", "yes"), nil), 400, "recursive must be")
	expect(t, e.do("DELETE", "/files", q("path", "/tree", "recursive", "true"), nil), http.StatusNoContent, "")
	expect(t, e.do("DELETE", "/files", q("path", "/"), nil), 400, "refusing to delete /")
	for _, p := range []string{"f", "empty", "tree"} {
		if _, err := os.Lstat(e.host(p)); !os.IsNotExist(err) {
			t.Errorf("%s still exists", p)
		}
	}
	if _, err := os.Stat(e.host("etc/passwd")); err != nil {
		t.Errorf("recursive delete followed a symlink into /etc: %v", err)
	}
	e.checkHostUntouched()
}

func TestDiskFull(t *testing.T) {
	e := newEnv(t, Options{})
	mnt := e.host("small")
	mustMkdir(t, mnt)
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	resp := e.put("/small/fill", make([]byte, 4<<20))
	expect(t, resp, http.StatusInsufficientStorage, "disk limit reached")
}
