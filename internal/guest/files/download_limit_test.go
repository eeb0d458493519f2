package files

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestDownloadLimit: with max_bytes (set by the daemon) a file or an
// archive over the limit is a 413 naming it before any byte, a sparse
// file counting at its full size; under the limit it downloads whole.
func TestDownloadLimit(t *testing.T) {
	e := newEnv(t, Options{})
	mustMkdir(t, e.host("d"))
	f, err := os.Create(e.host("d/sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mustWrite(t, e.host("small/a"), strings.Repeat("x", 4096))
	for _, tt := range []struct {
		name, route, query string
		status             int
		size               int64
	}{
		{"sparse terabyte", "/files", "path=/d/sparse&max_bytes=1048576", http.StatusRequestEntityTooLarge, -1},
		{"archive of it", "/files/archive", "path=/d&max_bytes=1048576", http.StatusRequestEntityTooLarge, -1},
		{"the file itself archived", "/files/archive", "path=/d/sparse&max_bytes=1048576", http.StatusRequestEntityTooLarge, -1},
		{"small file", "/files", "path=/small/a&max_bytes=1048576", http.StatusOK, 4096},
		{"small archive", "/files/archive", "path=/small&max_bytes=1048576", http.StatusOK, 512 + 4096 + 1024},
		{"no limit", "/files", "path=/small/a", http.StatusOK, 4096},
		{"bad limit", "/files", "path=/small/a&max_bytes=x", http.StatusBadRequest, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := e.do(http.MethodGet, tt.route, tt.query, nil)
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.status == http.StatusRequestEntityTooLarge && !strings.Contains(string(body), "download limit") {
				t.Errorf("the error does not name the download limit: %s", body)
			}
			if tt.size >= 0 && int64(len(body)) != tt.size {
				t.Errorf("got %d bytes, want %d", len(body), tt.size)
			}
		})
	}
}
