package guest

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// BenchmarkExecTrue is an /exec round trip of /bin/true through the
// handler (no socket): its cost beyond BenchmarkForkExecFloor is ours.
func BenchmarkExecTrue(b *testing.B) {
	requireRoot(b)
	s := NewServer(Config{})
	h := s.Handler()
	body := []byte(`{"cmd":["/bin/true"]}`)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/exec", bytes.NewReader(body)))
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkExecTrueSocket is the same over a real unix socket.
func BenchmarkExecTrueSocket(b *testing.B) {
	g := newTestGuest(b, Config{})
	b.ReportAllocs()
	for b.Loop() {
		g.mustExec(b, api.ExecRequest{Cmd: []string{"/bin/true"}})
	}
}

// BenchmarkExecTrueCgroupV1 adds the per-exec v1 cgroups (pids, freezer).
func BenchmarkExecTrueCgroupV1(b *testing.B) {
	dirs, _ := testCgroupsV1(b)
	s := NewServer(Config{Cgroups: dirs})
	h := s.Handler()
	body := []byte(`{"cmd":["/bin/true"]}`)
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/exec", bytes.NewReader(body)))
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkForkExecFloor is a bare fork+exec+reap of /bin/true.
func BenchmarkForkExecFloor(b *testing.B) {
	r := theReaper()
	attr := &syscall.ProcAttr{Files: []uintptr{0, 1, 2}}
	for b.Loop() {
		_, ch, err := r.start("/bin/true", []string{"/bin/true"}, attr)
		if err != nil {
			b.Fatal(err)
		}
		<-ch
	}
}
