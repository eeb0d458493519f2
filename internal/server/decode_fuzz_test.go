package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// fuzzDecode feeds body to the server's JSON decoding into a fresh *T and
// checks: every failure is a 4xx invalid_argument error (never a panic or
// a 5xx), and every success round-trips (what was accepted re-encodes to a
// body that decodes and encodes again to the same bytes).
func fuzzDecode[T any](t *testing.T, body []byte) { fuzzDecodeAs(t, reflect.TypeFor[T](), body) }

// fuzzDecodeAs is fuzzDecode for a type known at run time (one of
// api.RequestBodies').
func fuzzDecodeAs(t *testing.T, typ reflect.Type, body []byte) {
	s := &Server{maxBody: 64 << 10}
	v := reflect.New(typ).Interface()
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/v1/sandboxes", bytes.NewReader(body))
	err := s.decode(w, r, v)
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
	w2 := reflect.New(typ).Interface()
	r2 := httptest.NewRequest("POST", "/", bytes.NewReader(again))
	if err := s.decode(httptest.NewRecorder(), r2, w2); err != nil {
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

// jsonBodies are the routes whose request body is one JSON object, with
// the API type it decodes into, from api.RequestBodies.
var jsonBodies = func() map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for p, b := range api.RequestBodies {
		if typ := reflect.TypeOf(b); typ.Kind() == reflect.Pointer {
			m[p] = typ.Elem()
		}
	}
	return m
}()

// Every route that takes a body is either fuzzed by FuzzDecodeRequest or
// says what it takes instead: a new JSON route joins the fuzzing.
func TestJSONBodyRoutesFuzzed(t *testing.T) {
	for _, r := range api.Routes {
		if r.Method != "POST" && r.Method != "PUT" && r.Method != "PATCH" {
			continue
		}
		if _, ok := api.RequestBodies[r.Pattern()]; !ok {
			t.Errorf("%s: give its body in api.RequestBodies (api/routes.go): a nil pointer to its request type, or a RawBody saying what it takes", r.Pattern())
		}
	}
	for p, b := range api.RequestBodies {
		if !slices.ContainsFunc(api.Routes, func(r api.Route) bool { return r.Pattern() == p }) {
			t.Errorf("api.RequestBodies names %s, which is not in api.Routes", p)
		}
		switch typ := reflect.TypeOf(b); {
		case typ == reflect.TypeFor[api.RawBody]():
		case typ != nil && typ.Kind() == reflect.Pointer && typ.Elem().Kind() == reflect.Struct:
		default:
			t.Errorf("api.RequestBodies[%s] is a %v: want a nil pointer to a request struct, or a RawBody", p, typ)
		}
	}
}

// FuzzDecodeRequest: the JSON body of every route in jsonBodies, picked by
// the first byte, through fuzzDecode's checks.
func FuzzDecodeRequest(f *testing.F) {
	routes := slices.Sorted(maps.Keys(jsonBodies))
	seeds := map[string][]string{
		"POST /v1/sandboxes/{id}/snapshots":              {`{"name":"before-upgrade"}`},
		"POST /v1/sandboxes/{id}/fork":                   {`{"count":3}`, `{"count":-1}`},
		"POST /v1/sandboxes/{id}/reset":                  {`{"snapshot":"snap_1"}`},
		"POST /v1/sandboxes/{id}/egress":                 {`{"egress":"deny","allow":["10.0.0.0/8"]}`},
		"POST /v1/sandboxes/{id}/files/rename":           {`{"from":"/a","to":"/b"}`},
		"POST /v1/sandboxes/{id}/files/mkdir":            {`{"path":"/a/b","mode":"0755","user":"root"}`},
		"POST /v1/sandboxes/{id}/processes":              {`{"cmd":["sleep","1"],"tag":"web","max_buffer_bytes":1024}`},
		"POST /v1/sandboxes/{id}/processes/{ref}/signal": {`{"signal":"SIGINT"}`, `{"signal":9,"tree":true}`, `{"signal":[1]}`},
		"POST /v1/sandboxes/{id}/pty":                    {`{"cols":80,"rows":24,"shell":"bash"}`},
		"POST /v1/sandboxes/{id}/pty/{pid}/resize":       {`{"cols":1e3,"rows":-1}`},
		"POST /v1/keys":                                  {`{"tenant":"acme","name":"ci","admin":false}`},
		"POST /v1/tickets":                               {`{"path":"/v1/sandboxes/abc/pty/1/ws"}`},
		"POST /v1/tenants":                               {`{"name":"acme","quotas":{"sandboxes":10,"cpu":2.5}}`},
		"PATCH /v1/tenants/{name}":                       {`{"quotas":{"memory_mb":null,"disk_mb":0}}`},
		"PATCH /v1/sandboxes/{id}":                       {`{"ttl_seconds":60,"metadata":{"a":"b"}}`},
		"POST /v1/templates":                             {`{"name":"t","rootfs":"/x","env":{"A":"1"}}`},
		"POST /v1/sandboxes/{id}/desktop":                {`{"width":1024,"height":768,"dpi":96}`},
		"POST /v1/sandboxes/{id}/desktop/actions": {
			`{"actions":[{"type":"click","x":10,"y":20,"button":"right","double":true}]}`,
			`{"actions":[{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}]},{"type":"type","text":"Grüße ✓"},{"type":"key","keys":"ctrl+l"}],"screenshot":{"format":"jpeg","quality":50,"scale":"0.5","region":{"x":0,"y":0,"w":10,"h":10}}}`,
		},
		"POST /v1/sandboxes/{id}/desktop/launch": {`{"app":"terminal"}`, `{"cmd":["xterm"],"env":{"A":"1"},"cwd":"/tmp"}`},
		"POST /v1/sandboxes/{id}/desktop/open":   {`{"url":"http://127.0.0.1:8000/"}`},
	}
	for i, r := range routes {
		f.Add(byte(i), []byte(`{}`))
		for _, s := range seeds[r] {
			f.Add(byte(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, route byte, body []byte) {
		r := routes[int(route)%len(routes)]
		fuzzDecodeAs(t, jsonBodies[r], body)
	})
}
