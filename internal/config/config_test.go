package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
}

func TestLoadMissingFileGivesDefaults(t *testing.T) {
	got, err := Load(filepath.Join(t.TempDir(), "nope.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, Default()) {
		t.Errorf("got %+v, want defaults %+v", got, Default())
	}
}

func TestLoadUnreadableFile(t *testing.T) {
	// A directory where the file should be is an error, not defaults.
	if _, err := Load(t.TempDir()); err == nil {
		t.Fatal("Load(directory) succeeded; want an error")
	}
}

// The shipped example is the defaults, written out.
func TestExampleFileIsDefaults(t *testing.T) {
	got, err := Load("../../docs/agentbox.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, Default()) {
		t.Errorf("example differs from Default():\n got %+v\nwant %+v", got, Default())
	}
}

// Every key is documented in docs/config.md and appears in the example.
func TestEveryKeyDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../docs/agentbox.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	ct := reflect.TypeOf(Config{})
	for i := 0; i < ct.NumField(); i++ {
		keys = append(keys, ct.Field(i).Tag.Get("toml"))
	}
	st := reflect.TypeOf(Sandbox{})
	for i := 0; i < st.NumField(); i++ {
		keys = append(keys, st.Field(i).Tag.Get("toml"))
	}
	sec := reflect.TypeOf(Security{})
	for i := 0; i < sec.NumField(); i++ {
		keys = append(keys, sec.Field(i).Tag.Get("toml"))
	}
	nt := reflect.TypeOf(Network{})
	for i := 0; i < nt.NumField(); i++ {
		keys = append(keys, nt.Field(i).Tag.Get("toml"))
	}
	mt := reflect.TypeOf(Metrics{})
	for i := 0; i < mt.NumField(); i++ {
		keys = append(keys, mt.Field(i).Tag.Get("toml"))
	}
	et := reflect.TypeOf(E2B{})
	for i := 0; i < et.NumField(); i++ {
		keys = append(keys, et.Field(i).Tag.Get("toml"))
	}
	tt := reflect.TypeOf(Tracing{})
	for i := 0; i < tt.NumField(); i++ {
		keys = append(keys, tt.Field(i).Tag.Get("toml"))
	}
	rt := reflect.TypeOf(Registry{})
	for i := 0; i < rt.NumField(); i++ {
		keys = append(keys, rt.Field(i).Tag.Get("toml"))
	}
	ft := reflect.TypeOf(Fleet{})
	for i := 0; i < ft.NumField(); i++ {
		keys = append(keys, ft.Field(i).Tag.Get("toml"))
	}
	kt := reflect.TypeOf(Kubernetes{})
	for i := 0; i < kt.NumField(); i++ {
		keys = append(keys, kt.Field(i).Tag.Get("toml"))
	}
	for _, k := range keys {
		if k == "node" { // [[fleet.node]], a table in the example's comments
			if !strings.Contains(string(example), "[[fleet.node]]") {
				t.Errorf("[[fleet.node]] missing from docs/agentbox.example.toml")
			}
			k = "node"
		} else if k == "defaults" || k == "limits" || k == "network" || k == "security" || k == "metrics" || k == "e2b" || k == "tracing" || k == "registry" || k == "fleet" || k == "kubernetes" {
			k = "[" + k + "]"
		} else if !strings.Contains(string(example), "\n"+k+" = ") {
			t.Errorf("key %q missing from docs/agentbox.example.toml", k)
		}
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("key %q missing from docs/config.md", k)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		check   func(t *testing.T, c Config)
		wantErr string // substring; "" means success
	}{
		{
			name: "empty file",
			text: "",
			check: func(t *testing.T, c Config) {
				if !reflect.DeepEqual(c, Default()) {
					t.Errorf("got %+v, want defaults", c)
				}
			},
		},
		{
			name: "overrides",
			text: `
data_dir = "/srv/ab"
listen = ""
log_level = "debug"
reap_interval = "250ms"
[defaults]
ttl = "30m"
cpu = 0.5
memory_mb = 256
[limits]
ttl = "1h"
cpu = 4
`,
			check: func(t *testing.T, c Config) {
				want := Default()
				want.DataDir = "/srv/ab"
				want.Listen = ""
				want.LogLevel = "debug"
				want.ReapInterval = 250 * time.Millisecond
				want.Defaults.TTL = 30 * time.Minute
				want.Defaults.CPU = 0.5
				want.Defaults.MemoryMB = 256
				want.Limits.TTL = time.Hour
				want.Limits.CPU = 4
				if !reflect.DeepEqual(c, want) {
					t.Errorf("got  %+v\nwant %+v", c, want)
				}
				if got := c.StatePath(); got != "/srv/ab/state.db" {
					t.Errorf("StatePath = %q", got)
				}
				if got := c.AdminKeyPath(); got != "/srv/ab/admin.key" {
					t.Errorf("AdminKeyPath = %q", got)
				}
			},
		},
		{
			name: "limits cpu 0 means host cpus",
			text: "[limits]\ncpu = 0\n",
			check: func(t *testing.T, c Config) {
				if c.Limits.CPU != hostCPUs() || c.Limits.CPU < 1 {
					t.Errorf("limits.cpu = %g, want %g", c.Limits.CPU, hostCPUs())
				}
			},
		},
		{
			name: "limits ttl 0 means no limit",
			text: "[limits]\nttl = \"0\"\n",
			check: func(t *testing.T, c Config) {
				if c.Limits.TTL != 0 {
					t.Errorf("limits.ttl = %s, want 0 (no limit)", c.Limits.TTL)
				}
			},
		},
		{name: "unknown top-level key", text: "datadir = \"/x\"\n", wantErr: "unknown key datadir"},
		{name: "unknown nested key", text: "[defaults]\nmemory = 5\n", wantErr: "unknown key defaults.memory"},
		{name: "unknown table", text: "[network]\nx = 1\n", wantErr: "unknown key network"},
		{name: "two unknown keys", text: "a = 1\nb = 2\n", wantErr: "unknown keys a, b"},
		{name: "syntax error", text: "data_dir = \n", wantErr: "line 1"},
		{name: "wrong type", text: "uid_base = \"lots\"\n", wantErr: "uid_base"},
		{name: "integer duration", text: "[defaults]\nttl = 600\n", wantErr: `defaults.ttl must be a duration string such as "10m"`},
		{name: "bad duration", text: "reap_interval = \"soon\"\n", wantErr: "(key reap_interval): invalid duration: \"soon\""},
		{name: "memory limit below default", text: "[limits]\nmemory_mb = 256\n",
			wantErr: "limits.memory_mb must be >= defaults.memory_mb (512), got 256"},
		{name: "ttl limit below default", text: "[defaults]\nttl = \"2h\"\n[limits]\nttl = \"1h\"\n",
			wantErr: "limits.ttl must be >= defaults.ttl (2h), got 1h"},
		{name: "cpu limit below default", text: "[defaults]\ncpu = 2\n[limits]\ncpu = 1\n",
			wantErr: "limits.cpu must be >= defaults.cpu (2), got 1"},
		{name: "disk limit below default", text: "[limits]\ndisk_mb = 100\n", wantErr: "limits.disk_mb must be >= defaults.disk_mb (1024), got 100"},
		{name: "pids limit below default", text: "[limits]\npids = 10\n", wantErr: "limits.pids must be >= defaults.pids (512), got 10"},
		{name: "tiny memory", text: "[defaults]\nmemory_mb = 1\n", wantErr: "defaults.memory_mb must be >= 64, got 1"},
		{name: "zero cpu", text: "[defaults]\ncpu = 0\n", wantErr: "defaults.cpu must be >="},
		{name: "zero ttl", text: "[defaults]\nttl = \"0s\"\n", wantErr: "defaults.ttl must be >= 1s"},
		{name: "relative data dir", text: "data_dir = \"var/lib\"\n", wantErr: "data_dir must be an absolute path"},
		{name: "empty socket", text: "socket = \"\"\n", wantErr: "socket must be an absolute path"},
		{name: "bad listen", text: "listen = \"7423\"\n", wantErr: "listen must be host:port"},
		{name: "bad listen port", text: "listen = \"127.0.0.1:http\"\n", wantErr: "listen port must be a number"},
		{name: "bad log level", text: "log_level = \"verbose\"\n", wantErr: "log_level must be one of debug, info, warn, error"},
		{name: "bad isolation", text: "default_isolation = \"\"\n", wantErr: "default_isolation must be a name"},
		{name: "bad template", text: "default_template = \"../etc\"\n", wantErr: "default_template must be a name"},
		{name: "relative guest binary", text: "guest_binary = \"agentbox-guest\"\n", wantErr: "guest_binary must be an absolute path"},
		{name: "uid base maps host users", text: "uid_base = 1000\n", wantErr: "uid_base must be >= 65536"},
		{name: "uid range overflows", text: "uid_base = 4294967000\n", wantErr: "uid_base + uid_count - 1 must be <="},
		{name: "zero uid count", text: "uid_count = 0\n", wantErr: "uid_count must be >= 1"},
		{name: "cgroup escape", text: "cgroup_parent = \"../x\"\n", wantErr: "cgroup_parent must be a clean relative"},
		{name: "absolute cgroup", text: "cgroup_parent = \"/agentbox\"\n", wantErr: "cgroup_parent must be a clean relative"},
		{name: "zero storage", text: "storage_size_gb = 0\n", wantErr: "storage_size_gb must be >= 1"},
		{name: "fast reaper", text: "reap_interval = \"1ms\"\n", wantErr: "reap_interval must be between 10ms and 1m"},
		{name: "zero body", text: "max_request_body_mb = 0\n", wantErr: "max_request_body_mb must be between 1 and 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("/etc/agentbox/config.toml", tt.text)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				tt.check(t, c)
				return
			}
			if err == nil {
				t.Fatalf("Parse succeeded; want error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), "/etc/agentbox/config.toml") {
				t.Errorf("error %q does not name the file", err)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %v is not ErrInvalidArgument", err)
			}
		})
	}
}

func TestValidateReportsAllProblems(t *testing.T) {
	c := Default()
	c.LogLevel = "loud"
	c.Limits.Pids = 1
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate succeeded")
	}
	for _, want := range []string{"log_level", "limits.pids"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestLoadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte("[limits]\nmemory_mb = 256\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p+": limits.memory_mb") {
		t.Fatalf("Load = %v; want an error naming %s and the key", err, p)
	}
}

func TestResolveGuestBinary(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "guest")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		wantErr string
	}{
		{"executable", exe, ""},
		{"missing", filepath.Join(dir, "missing"), "no such file"},
		{"not executable", plain, "not executable"},
		{"directory", dir, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.GuestBinary = tt.path
			got, err := c.ResolveGuestBinary()
			if tt.wantErr == "" {
				if err != nil || got != tt.path {
					t.Fatalf("got %q, %v; want %q", got, err, tt.path)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("got %q, %v; want a precondition error containing %q", got, err, tt.wantErr)
			}
		})
	}
	t.Run("search next to executable", func(t *testing.T) {
		self, err := os.Executable()
		if err != nil {
			t.Skip("os.Executable:", err)
		}
		next := filepath.Join(filepath.Dir(self), "agentbox-guest")
		if err := os.WriteFile(next, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(next)
		got, err := Default().ResolveGuestBinary()
		if err != nil || got != next {
			t.Fatalf("got %q, %v; want %q", got, err, next)
		}
	})
}
