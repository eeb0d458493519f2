package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// fuzzDecode feeds body to the server's JSON decoding into a fresh *T and
// checks: every failure is a 4xx invalid_argument error (never a panic or
// a 5xx), and every success round-trips (what was accepted re-encodes to a
// body that decodes and encodes again to the same bytes).
func fuzzDecode[T any](t *testing.T, body []byte) {
	s := &Server{maxBody: 64 << 10}
	var v T
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/v1/sandboxes", bytes.NewReader(body))
	err := s.decode(w, r, &v)
	if err != nil {
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("decode error %v is not invalid_argument", err)
		}
		if code, status := errdefs.Code(err); status != 400 {
			t.Fatalf("decode error %v answers %d %s, want 400", err, status, code)
		}
		return
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted %q but cannot re-encode it: %v", body, err)
	}
	var w2 T
	r2 := httptest.NewRequest("POST", "/", bytes.NewReader(again))
	if err := s.decode(httptest.NewRecorder(), r2, &w2); err != nil {
		t.Fatalf("re-encoded %s of accepted %q does not decode: %v", again, body, err)
	}
	// Compare encodings: an empty map and an absent one both encode as
	// absent (omitempty), which is the same request.
	if third, _ := json.Marshal(w2); !bytes.Equal(again, third) {
		t.Fatalf("round trip changed the value: %s -> %s", again, third)
	}
}

func FuzzDecodeCreateSandbox(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"template":"base","cpu":0.5,"memory_mb":256,"disk_mb":512,"pids":64,"ttl_seconds":-1}`,
		`{"env":{"A":"b"},"metadata":{"k":"v"},"on_timeout":"pause","auto_resume":true}`,
		`{"snapshot":"snap_1","network":{}}`,
		`{"cpu":"1"}`, `{"memory_mb":1e309}`, `{"bogus":1}`, `{} {}`, `[`, `null`, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { fuzzDecode[api.CreateSandboxRequest](t, body) })
}

func FuzzDecodeExec(f *testing.F) {
	for _, s := range []string{
		`{"cmd":["ls","-l"],"env":{"A":"b"},"cwd":"/tmp","timeout_ms":5}`,
		`{"shell":"echo hi","stdin":"aGk=","max_output_bytes":10,"user":"user"}`,
		`{"cmd":[""],"env":{"A=B":"\u0000"}}`, `{"stdin":"!!"}`, `{"cmd":"ls"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { fuzzDecode[api.ExecRequest](t, body) })
}
