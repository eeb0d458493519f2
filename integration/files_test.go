package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

func TestFilesRoundTrip(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", DiskMB: 512})
	ctx := context.Background()

	t.Run("binary", func(t *testing.T) {
		data := make([]byte, 70000)
		_, _ = rand.Read(data)
		if _, err := env.client.WriteFile(ctx, id, "/tmp/a/b/bin", bytes.NewReader(data), 0o640); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, id, "/tmp/a/b/bin"); !bytes.Equal(got, data) {
			t.Fatal("content differs")
		}
		st, err := env.client.Stat(ctx, id, "/tmp/a/b/bin")
		if err != nil || st.Mode != "0640" || st.Size != 70000 || st.Type != api.FileTypeFile {
			t.Fatalf("stat = %+v, %v", st, err)
		}
		// The sandbox sees the same bytes.
		sum := fmt.Sprintf("%x", sha256.Sum256(data))
		if inside := mustSh(t, id, "sha256sum /tmp/a/b/bin | cut -d' ' -f1"); inside != sum {
			t.Fatalf("inside sha %s, want %s", inside, sum)
		}
	})

	t.Run("100MiB", func(t *testing.T) {
		const size = 100 << 20
		h := sha256.New()
		src := io.TeeReader(io.LimitReader(rand.Reader, size), h)
		if _, err := env.client.WriteFile(ctx, id, "/tmp/big", src, 0o644); err != nil {
			t.Fatal(err)
		}
		want := h.Sum(nil)
		rc, err := env.client.ReadFile(ctx, id, "/tmp/big")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		h2 := sha256.New()
		n, err := io.Copy(h2, rc)
		if err != nil || n != size || !bytes.Equal(h2.Sum(nil), want) {
			t.Fatalf("read back %d bytes (%v), hash match %v", n, err, bytes.Equal(h2.Sum(nil), want))
		}
		mustSh(t, id, "rm /tmp/big")
	})

	t.Run("dirs and listing", func(t *testing.T) {
		if _, err := env.client.Mkdir(ctx, id, "/work/x/y/z", 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			p := fmt.Sprintf("/work/x/f%d", i)
			if _, err := env.client.WriteFile(ctx, id, p, strings.NewReader(p), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		ents, err := env.client.ListFiles(ctx, id, "/work/x", 1)
		if err != nil || len(ents) != 4 {
			t.Fatalf("list = %v, %v; want 4 entries", ents, err)
		}
		deep, err := env.client.ListFiles(ctx, id, "/work", 5)
		if err != nil || len(deep) != 6 {
			t.Fatalf("deep list = %d entries, %v", len(deep), err)
		}
		if err := env.client.Rename(ctx, id, "/work/x/f0", "/work/x/y/moved"); err != nil {
			t.Fatal(err)
		}
		if got := string(readAll(t, id, "/work/x/y/moved")); got != "/work/x/f0" {
			t.Fatalf("moved content %q", got)
		}
		if err := env.client.Remove(ctx, id, "/work/x", false); !errors.Is(err, errdefs.ErrFailedPrecondition) && !errors.Is(err, errdefs.ErrAlreadyExists) && err == nil {
			t.Fatalf("non-recursive remove of a non-empty dir: %v", err)
		}
		if err := env.client.Remove(ctx, id, "/work/x", true); err != nil {
			t.Fatal(err)
		}
		if _, err := env.client.Stat(ctx, id, "/work/x"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("stat after remove: %v", err)
		}
		if _, err := env.client.ReadFile(ctx, id, "/nope"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("read missing: %v", err)
		}
	})

	t.Run("archive deep tree", func(t *testing.T) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		path := ""
		for i := 0; i < 30; i++ {
			path += fmt.Sprintf("d%d/", i)
			_ = tw.WriteHeader(&tar.Header{Name: path, Typeflag: tar.TypeDir, Mode: 0o755})
			_ = tw.WriteHeader(&tar.Header{Name: path + "f", Typeflag: tar.TypeReg, Mode: 0o754, Size: 3})
			_, _ = tw.Write([]byte("abc"))
		}
		_ = tw.Close()
		if err := env.client.UploadArchive(ctx, id, "/deep", &buf); err != nil {
			t.Fatal(err)
		}
		if got := mustSh(t, id, "find /deep -type f | wc -l"); got != "30" {
			t.Fatalf("%s files in the sandbox, want 30", got)
		}
		if got := mustSh(t, id, "stat -c %a /deep/d0/f"); got != "754" {
			t.Fatalf("mode %s, want 754", got)
		}
		rc, err := env.client.DownloadArchive(ctx, id, "/deep")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		tr := tar.NewReader(rc)
		files := 0
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				files++
			}
		}
		if files != 30 {
			t.Fatalf("downloaded %d files, want 30", files)
		}
	})
}
