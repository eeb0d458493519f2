package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/agentbox/agentbox/errdefs"
)

// Load reads the config file at path ("" means DefaultPath) over the
// defaults and validates the result. A missing file is not an error: it
// yields Default(). Unknown keys, durations written as numbers and values
// out of range are errors wrapping errdefs.ErrInvalidArgument whose
// message names the file and the key.
func Load(path string) (Config, error) {
	if path == "" {
		path = DefaultPath
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Default(), nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	return Parse(path, string(data))
}

// Parse decodes TOML text over the defaults and validates the result; name
// (usually the file's path) is used in error messages.
func Parse(name, text string) (Config, error) {
	cfg := Default()
	// Limits.CPU defaults to the host's CPU count; "cpu = 0" in [limits]
	// asks for the same.
	md, err := toml.Decode(text, &cfg)
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			if perr.LastKey != "" {
				return Config{}, errdefs.Invalid("%s: line %d (key %s): %s", name, perr.Position.Line, perr.LastKey, perr.Message)
			}
			return Config{}, errdefs.Invalid("%s: line %d: %s", name, perr.Position.Line, perr.Message)
		}
		return Config{}, errdefs.Invalid("%s: %v", name, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		// An unknown table also reports each key inside it; name the
		// table only.
		seen := map[string]bool{}
		var keys []string
		for _, k := range und {
			if len(k) > 1 && seen[k[:len(k)-1].String()] {
				seen[k.String()] = true
				continue
			}
			seen[k.String()] = true
			keys = append(keys, k.String())
		}
		noun := "key"
		if len(keys) > 1 {
			noun = "keys"
		}
		return Config{}, errdefs.Invalid("%s: unknown %s %s; see docs/config.md for the valid keys",
			name, noun, strings.Join(keys, ", "))
	}
	for _, key := range durationKeys {
		if md.IsDefined(key...) && md.Type(key...) != "String" {
			return Config{}, errdefs.Invalid("%s: %s must be a duration string such as \"10m\" or \"1s\"",
				name, strings.Join(key, "."))
		}
	}
	if cfg.Limits.CPU == 0 {
		cfg.Limits.CPU = hostCPUs()
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	return cfg, nil
}

// durationKeys are the keys decoded into time.Duration. The TOML decoder
// would read a bare integer as nanoseconds, which is never what a user
// means, so Parse insists on strings.
var durationKeys = [][]string{
	{"reap_interval"},
	{"defaults", "ttl"},
	{"limits", "ttl"},
	{"fleet", "poll_interval"},
}

// fmtDuration prints a duration the way users write it ("10m", not
// "10m0s").
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
