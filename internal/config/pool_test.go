package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestWarmPools(t *testing.T) {
	cfg, err := Parse("t.toml", `
[[pool]]
size = 3

[[pool]]
template = "python"
size = 1
memory_mb = 256
egress = "internet"
`)
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.WarmPools()
	want := []WarmPool{
		{Template: "base", Isolation: "container", Size: 3, CPU: 1, MemoryMB: 512, DiskMB: 1024, Pids: 512, Egress: "none"},
		{Template: "python", Isolation: "container", Size: 1, CPU: 1, MemoryMB: 256, DiskMB: 1024, Pids: 512, Egress: "internet"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WarmPools() = %+v\nwant %+v", got, want)
	}
}

func TestWarmPoolsInvalid(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{"no size", "[[pool]]\ntemplate = \"base\"", "pool[0].size must be between 1 and 256, got 0"},
		{"too big", "[[pool]]\nsize = 1000", "pool[0].size must be between 1 and 256"},
		{"egress", "[[pool]]\nsize = 1\negress = \"custom\"", `pool[0].egress must be "none" or "internet"`},
		{"memory over limit", "[[pool]]\nsize = 1\nmemory_mb = 999999", "pool[0].memory_mb must be between"},
		{"duplicate", "[[pool]]\nsize = 1\n[[pool]]\nsize = 2", "pool[1] repeats pool[0]"},
		{"bad template", "[[pool]]\nsize = 1\ntemplate = \"Bad Name\"", "pool[0].template must be a name"},
		{"unknown key", "[[pool]]\nsize = 1\nsizes = 2", "pool.sizes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.toml", tt.text)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// Every [[pool]] key is documented in docs/config.md and the example.
func TestWarmPoolKeysDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../docs/agentbox.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	pt := reflect.TypeOf(WarmPool{})
	for i := 0; i < pt.NumField(); i++ {
		k := pt.Field(i).Tag.Get("toml")
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("[[pool]] key %q missing from docs/config.md", k)
		}
		if !strings.Contains(string(example), "\n# "+k+" = ") {
			t.Errorf("[[pool]] key %q missing from docs/agentbox.example.toml", k)
		}
	}
}
