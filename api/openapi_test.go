package api

import (
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// node is a YAML mapping key with its scalar value and child keys. The
// spec is YAML, and the module has no YAML library: this reads the subset
// openapi.yaml is written in (block mappings, indented by spaces, block
// scalars after "|"), skipping sequence items.
type node struct {
	value    string
	children map[string]*node
}

func parseYAMLKeys(t *testing.T, src string) *node {
	t.Helper()
	root := &node{children: map[string]*node{}}
	type frame struct {
		indent int
		n      *node
	}
	stack := []frame{{-1, root}}
	skipDeeper := -1 // inside a block scalar or a sequence item: skip lines indented more
	for i, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(line) - len(trimmed)
		if skipDeeper >= 0 {
			if indent > skipDeeper {
				continue
			}
			skipDeeper = -1
		}
		if strings.HasPrefix(trimmed, "- ") || trimmed == "-" {
			skipDeeper = indent
			continue
		}
		key, val, ok := strings.Cut(trimmed, ":")
		if !ok {
			t.Fatalf("openapi.yaml:%d: not a key: %q", i+1, line)
		}
		key = strings.Trim(key, `"'`)
		val = strings.TrimSpace(val)
		for len(stack) > 1 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		parent := stack[len(stack)-1].n
		if _, dup := parent.children[key]; dup {
			t.Errorf("openapi.yaml:%d: duplicate key %q", i+1, key)
		}
		n := &node{value: val, children: map[string]*node{}}
		parent.children[key] = n
		stack = append(stack, frame{indent, n})
		if val == "|" || val == ">" {
			skipDeeper = indent
		}
	}
	return root
}

func (n *node) get(path ...string) *node {
	for _, p := range path {
		if n == nil {
			return nil
		}
		n = n.children[p]
	}
	return n
}

func loadSpec(t *testing.T) (*node, string) {
	t.Helper()
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return parseYAMLKeys(t, string(b)), string(b)
}

var httpMethods = map[string]bool{"get": true, "put": true, "post": true, "delete": true, "patch": true, "head": true, "options": true}

// TestSpecDocumentsEveryRoute: every route the server registers is in the
// spec with its method, and the spec documents no route that does not
// exist.
func TestSpecDocumentsEveryRoute(t *testing.T) {
	spec, _ := loadSpec(t)
	paths := spec.get("paths")
	if paths == nil {
		t.Fatal("openapi.yaml has no paths")
	}
	registered := map[string]bool{}
	for _, r := range Routes {
		registered[r.Pattern()] = true
		t.Run(r.Pattern(), func(t *testing.T) {
			op := paths.get(r.Path, strings.ToLower(r.Method))
			if op == nil {
				t.Fatalf("openapi.yaml does not document %s", r.Pattern())
			}
			if op.get("responses") == nil {
				t.Errorf("%s has no responses", r.Pattern())
			}
			if op.get("responses", "default") == nil {
				t.Errorf("%s does not document its error response (default)", r.Pattern())
			}
		})
	}
	for p, item := range paths.children {
		for m := range item.children {
			if httpMethods[m] && !registered[strings.ToUpper(m)+" "+p] {
				t.Errorf("openapi.yaml documents %s %s, which is not in api.Routes", strings.ToUpper(m), p)
			}
		}
	}
}

// TestSpecSchemasMatchTypes: each schema's properties are exactly the Go
// type's json names, and its required list is exactly the fields without
// omitempty.
func TestSpecSchemasMatchTypes(t *testing.T) {
	spec, _ := loadSpec(t)
	types := map[string]any{
		"CreateSandboxRequest":   CreateSandboxRequest{},
		"Resources":              Resources{},
		"Sandbox":                Sandbox{},
		"UpdateSandboxRequest":   UpdateSandboxRequest{},
		"ListSandboxesResponse":  ListSandboxesResponse{},
		"Template":               Template{},
		"ImportTemplateRequest":  ImportTemplateRequest{},
		"PushRequest":            PushRequest{},
		"PushResponse":           PushResponse{},
		"PullRequest":            PullRequest{},
		"ListTemplatesResponse":  ListTemplatesResponse{},
		"ErrorBody":              ErrorBody{},
		"ErrorDetail":            ErrorDetail{},
		"ExecRequest":            ExecRequest{},
		"StdinFrame":             StdinFrame{},
		"ExecEvent":              ExecEvent{},
		"ExecResult":             ExecResult{},
		"FileInfo":               FileInfo{},
		"ListFilesResponse":      ListFilesResponse{},
		"MkdirRequest":           MkdirRequest{},
		"RenameRequest":          RenameRequest{},
		"Health":                 Health{},
		"Info":                   Info{},
		"Tier":                   Tier{},
		"InfoLimits":             InfoLimits{},
		"PoolStatus":             PoolStatus{},
		"ListPoolsResponse":      ListPoolsResponse{},
		"Snapshot":               Snapshot{},
		"CreateSnapshotRequest":  CreateSnapshotRequest{},
		"PauseRequest":           PauseRequest{},
		"ListSnapshotsResponse":  ListSnapshotsResponse{},
		"ForkRequest":            ForkRequest{},
		"ForkResponse":           ForkResponse{},
		"ResetRequest":           ResetRequest{},
		"StartProcessRequest":    StartProcessRequest{},
		"Process":                Process{},
		"ProcessList":            ProcessList{},
		"ProcessOutput":          ProcessOutput{},
		"SignalRequest":          SignalRequest{},
		"CreatePTYRequest":       CreatePTYRequest{},
		"PTYSession":             PTYSession{},
		"PTYList":                PTYList{},
		"PTYSize":                PTYSize{},
		"PTYControl":             PTYControl{},
		"WatchEvent":             WatchEvent{},
		"Network":                Network{},
		"CreateKeyRequest":       CreateKeyRequest{},
		"TicketRequest":          TicketRequest{},
		"Ticket":                 Ticket{},
		"Key":                    Key{},
		"ListKeysResponse":       ListKeysResponse{},
		"Quotas":                 Quotas{},
		"QuotasPatch":            QuotasPatch{},
		"Tenant":                 Tenant{},
		"CreateTenantRequest":    CreateTenantRequest{},
		"UpdateTenantRequest":    UpdateTenantRequest{},
		"ListTenantsResponse":    ListTenantsResponse{},
		"AuditEntry":             AuditEntry{},
		"ListAuditResponse":      ListAuditResponse{},
		"SecurityReport":         SecurityReport{},
		"ProcessPosture":         ProcessPosture{},
		"CheckValue":             CheckValue{},
		"UsageSample":            UsageSample{},
		"SandboxMetrics":         SandboxMetrics{},
		"Event":                  Event{},
		"NodeStatus":             NodeStatus{},
		"FleetNode":              FleetNode{},
		"ListFleetNodesResponse": ListFleetNodesResponse{},
		"FleetSummary":           FleetSummary{},

		// The code interpreter (api/code.go).
		"CodeContext":              CodeContext{},
		"CodeContextList":          CodeContextList{},
		"CreateCodeContextRequest": CreateCodeContextRequest{},
		"RunCodeRequest":           RunCodeRequest{},
		"CodeResult":               CodeResult{},
		"CodeError":                CodeError{},
		"CodeLogs":                 CodeLogs{},
		"Execution":                Execution{},
		"CodeEvent":                CodeEvent{},

		// The desktop (api/desktop.go).
		"StartDesktopRequest":   StartDesktopRequest{},
		"Desktop":               Desktop{},
		"Point":                 Point{},
		"Region":                Region{},
		"DesktopAction":         DesktopAction{},
		"ScreenshotOptions":     ScreenshotOptions{},
		"DesktopActionsRequest": DesktopActionsRequest{},
		"ScreenshotData":        ScreenshotData{},
		"DesktopActionsResult":  DesktopActionsResult{},
		"DesktopWindow":         DesktopWindow{},
		"DesktopWindowList":     DesktopWindowList{},
		"DesktopLaunchRequest":  DesktopLaunchRequest{},
		"DesktopOpenRequest":    DesktopOpenRequest{},
		"DesktopStream":         DesktopStream{},
	}
	for name, v := range types {
		t.Run(name, func(t *testing.T) {
			schema := spec.get("components", "schemas", name)
			if schema == nil {
				t.Fatalf("openapi.yaml has no schema %s", name)
			}
			var wantProps, wantRequired []string
			rt := reflect.TypeOf(v)
			for i := 0; i < rt.NumField(); i++ {
				tag := rt.Field(i).Tag.Get("json")
				jsonName, opts, _ := strings.Cut(tag, ",")
				if jsonName == "-" || jsonName == "" {
					continue
				}
				wantProps = append(wantProps, jsonName)
				if !strings.Contains(opts, "omitempty") {
					wantRequired = append(wantRequired, jsonName)
				}
			}
			var gotProps []string
			for k := range schema.get("properties").children {
				gotProps = append(gotProps, k)
			}
			if g, w := sorted(gotProps), sorted(wantProps); !reflect.DeepEqual(g, w) {
				t.Errorf("properties = %v, want %v (the json tags of api.%s)", g, w, name)
			}
			var gotRequired []string
			if r := schema.get("required"); r != nil {
				for _, s := range strings.Split(strings.Trim(r.value, "[]"), ",") {
					if s = strings.TrimSpace(s); s != "" {
						gotRequired = append(gotRequired, s)
					}
				}
			}
			if g, w := sorted(gotRequired), sorted(wantRequired); !reflect.DeepEqual(g, w) {
				t.Errorf("required = %v, want %v (the fields without omitempty)", g, w)
			}
		})
	}
}

// TestSpecRefsResolve: every $ref names a component that exists.
func TestSpecRefsResolve(t *testing.T) {
	spec, src := loadSpec(t)
	refs := regexp.MustCompile(`\$ref: "#/components/([a-zA-Z]+)/([A-Za-z0-9_]+)"`).FindAllStringSubmatch(src, -1)
	if len(refs) < 20 {
		t.Fatalf("found only %d $refs; is the pattern stale?", len(refs))
	}
	for _, m := range refs {
		if spec.get("components", m[1], m[2]) == nil {
			t.Errorf("$ref to missing #/components/%s/%s", m[1], m[2])
		}
	}
	if spec.get("components", "securitySchemes", "bearerAuth", "scheme").value != "bearer" {
		t.Error("bearerAuth is not an http bearer scheme")
	}
}

// TestSpecSuccessSchemas: every route's success answers (2xx other than
// 204 No Content) say what they carry: each media type under content has a
// schema, and a JSON body's schema is a named component ($ref), so a
// client generator gets a type for it.
func TestSpecSuccessSchemas(t *testing.T) {
	spec, _ := loadSpec(t)
	for _, r := range Routes {
		op := spec.get("paths", r.Path, strings.ToLower(r.Method))
		if op == nil {
			continue // TestSpecDocumentsEveryRoute reports it
		}
		ok := 0
		for code, resp := range op.get("responses").children {
			if !strings.HasPrefix(code, "2") || code == "204" {
				continue
			}
			ok++
			content := resp.get("content")
			if content == nil || len(content.children) == 0 {
				t.Errorf("%s: response %s has no content schema", r.Pattern(), code)
				continue
			}
			for mt, m := range content.children {
				schema := m.get("schema")
				switch {
				case schema == nil:
					t.Errorf("%s: response %s (%s) has no schema", r.Pattern(), code, mt)
				case mt == "application/json" && schema.get("$ref") == nil && schema.get("type") == nil:
					t.Errorf("%s: response %s (%s) has an empty schema", r.Pattern(), code, mt)
				case mt == "application/json" && schema.get("$ref") == nil:
					t.Errorf("%s: response %s (%s) is an inline schema; name it under components/schemas", r.Pattern(), code, mt)
				}
			}
		}
		if ok == 0 && op.get("responses", "204") == nil && op.get("responses", "101") == nil {
			t.Errorf("%s documents no success response", r.Pattern())
		}
	}
}

// TestSpecIsYAML: the spec parses as YAML 1.2 in full, not only in the
// subset parseYAMLKeys reads (a description such as `"now" to start`
// once made the file unreadable to every OpenAPI tool).
func TestSpecIsYAML(t *testing.T) {
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string         `yaml:"openapi"`
		Paths   map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.yaml is not valid YAML: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") || len(doc.Paths) == 0 {
		t.Errorf("openapi.yaml: openapi %q, %d paths", doc.OpenAPI, len(doc.Paths))
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
