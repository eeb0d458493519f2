package cli

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseSizeMB(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "512", want: 512},
		{in: "512M", want: 512},
		{in: "512MB", want: 512},
		{in: "512mib", want: 512},
		{in: "2G", want: 2048},
		{in: "2g", want: 2048},
		{in: "1GiB", want: 1024},
		{in: "1.5G", want: 1536},
		{in: "1T", want: 1 << 20},
		{in: "1536K", want: 2},
		{in: "1K", want: 1},
		{in: "abc", wantErr: `--memory wants a size like 512M, 2G or 1GiB (plain numbers are MiB), got "abc"`},
		{in: "12X", wantErr: `--memory wants a size like 512M, 2G or 1GiB (plain numbers are MiB), got "12X"`},
		{in: "G", wantErr: `--memory wants a size like 512M, 2G or 1GiB (plain numbers are MiB), got "G"`},
		{in: "-1G", wantErr: `--memory wants a size like 512M, 2G or 1GiB (plain numbers are MiB), got "-1G"`},
		{in: "0", wantErr: `--memory must be more than zero, got "0"`},
		{in: "1.2.3M", wantErr: `--memory wants a size like 512M, 2G or 1GiB (plain numbers are MiB), got "1.2.3M"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSizeMB("memory", tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("parseSizeMB(%q) = %d, %v; want error %q", tt.in, got, err, tt.wantErr)
				}
				var ue usageError
				if !errors.As(err, &ue) {
					t.Errorf("error %v is not a usage error", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("parseSizeMB(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "30", want: 30 * time.Second},
		{in: "90s", want: 90 * time.Second},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "500ms", want: 500 * time.Millisecond},
		{in: "1d", want: 24 * time.Hour},
		{in: "2d12h", want: 60 * time.Hour},
		{in: "", wantErr: true},
		{in: "soon", wantErr: true},
		{in: "-5s", wantErr: true},
		{in: "-5", wantErr: true},
		{in: "xd", wantErr: true},
		{in: "1d1x", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseDuration("timeout", tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parseDuration(%q) = %v, want an error", tt.in, got)
				}
				want := `--timeout wants a duration like 30s, 10m, 2h or 1d (plain numbers are seconds), got "` + tt.in + `"`
				if err.Error() != want {
					t.Errorf("error = %q, want %q", err, want)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("parseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseTTLSeconds(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "none", want: -1},
		{in: "Never", want: -1},
		{in: "1h", want: 3600},
		{in: "1500ms", want: 2},
		{in: "60", want: 60},
		{in: "0", wantErr: true},
		{in: "0s", wantErr: true},
		{in: "forever", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseTTLSeconds("ttl", tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseTTLSeconds(%q) = %d, %v; want %d (error %v)", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseKV(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    map[string]string
		wantErr string
	}{
		{name: "none", in: nil, want: nil},
		{name: "pairs", in: []string{"A=1", "B=x=y", "C="}, want: map[string]string{"A": "1", "B": "x=y", "C": ""}},
		{name: "later wins", in: []string{"A=1", "A=2"}, want: map[string]string{"A": "2"}},
		{name: "no equals", in: []string{"A=1", "FOO"}, wantErr: `--env wants KEY=VALUE, got "FOO"`},
		{name: "empty key", in: []string{"=v"}, wantErr: `--env wants KEY=VALUE, got "=v"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseKV("env", tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("parseKV(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got) != len(tt.want) {
				t.Fatalf("parseKV(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestFormatAge(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{45 * time.Second, "45s"},
		{12 * time.Minute, "12m"},
		{5 * time.Hour, "5h"},
		{47 * time.Hour, "47h"},
		{72 * time.Hour, "3d"},
	}
	for _, tt := range tests {
		if got := formatAge(tt.d); got != tt.want {
			t.Errorf("formatAge(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestParseCpArg(t *testing.T) {
	tests := []struct {
		in      string
		want    cpArg
		wantErr string
	}{
		{in: "sb-1:/work/a.txt", want: cpArg{id: "sb-1", path: "/work/a.txt"}},
		{in: "sb-1:rel/path", want: cpArg{id: "sb-1", path: "rel/path"}},
		{in: "sb-1:/", want: cpArg{id: "sb-1", path: "/"}},
		{in: "./local", want: cpArg{path: "./local"}},
		{in: "/abs/file", want: cpArg{path: "/abs/file"}},
		{in: "./a:b", want: cpArg{path: "./a:b"}},
		{in: "dir/a:b", want: cpArg{path: "dir/a:b"}},
		{in: "-", want: cpArg{path: "-"}},
		{in: "plain", want: cpArg{path: "plain"}},
		{in: "sb-1:", wantErr: `"sb-1:" names a sandbox but no path; use sb-1:/path`},
		{in: ":/x", wantErr: `":/x" has no sandbox id before the colon; use ID:/path`},
		{in: "", wantErr: "cp wants non-empty paths: agentbox cp SRC DST, with ID:/path on one side"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseCpArg(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("parseCpArg(%q) = %+v, %v; want error %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("parseCpArg(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestSplitExecArgs(t *testing.T) {
	tests := []struct {
		name    string
		dash    int
		args    []string
		id      string
		cmd     []string
		wantErr bool
	}{
		{name: "with dash", dash: 1, args: []string{"sb", "ls", "-la"}, id: "sb", cmd: []string{"ls", "-la"}},
		{name: "one arg with spaces stays one", dash: 1, args: []string{"sb", "echo hi"}, id: "sb", cmd: []string{"echo hi"}},
		{name: "without dash", dash: -1, args: []string{"sb", "uname"}, id: "sb", cmd: []string{"uname"}},
		{name: "no command", dash: 1, args: []string{"sb"}, wantErr: true},
		{name: "no id", dash: 0, args: []string{"ls"}, wantErr: true},
		{name: "two ids", dash: 2, args: []string{"a", "b", "ls"}, wantErr: true},
		{name: "nothing", dash: -1, args: nil, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, cmd, err := splitExecArgs(tt.dash, tt.args)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("splitExecArgs = %q, %q; want an error", id, cmd)
				}
				return
			}
			if err != nil || id != tt.id || len(cmd) != len(tt.cmd) {
				t.Fatalf("splitExecArgs = %q, %q, %v; want %q, %q", id, cmd, err, tt.id, tt.cmd)
			}
			for i := range cmd {
				if cmd[i] != tt.cmd[i] {
					t.Errorf("cmd[%d] = %q, want %q", i, cmd[i], tt.cmd[i])
				}
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{30 * time.Second, "30s"},
		{10 * time.Minute, "10m"},
		{90 * time.Minute, "1h30m"},
		{24 * time.Hour, "24h"},
		{84 * time.Hour, "3d12h"},
		{72 * time.Hour, "3d"},
	}
	for _, tt := range tests {
		if got := formatDuration(tt.d); got != tt.want {
			t.Errorf("formatDuration(%s) = %q, want %q", tt.d, got, tt.want)
		}
		// What it writes parses back to the same duration.
		if back, err := parseDuration("ttl", formatDuration(tt.d)); err != nil || back != tt.d {
			t.Errorf("parseDuration(%q) = %s, %v; want %s", formatDuration(tt.d), back, err, tt.d)
		}
	}
}

func TestSizeMBFlag(t *testing.T) {
	for in, want := range map[string]int64{"1G": 1024, "512M": 512, "256": 256, "0": 0, "1.5GiB": 1536} {
		var f sizeMBFlag
		if err := f.Set(in); err != nil || int64(f) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, f, err, want)
		}
	}
	for _, in := range []string{"1Q", "-1G", "", "lots"} {
		var f sizeMBFlag
		if err := f.Set(in); err == nil || !strings.Contains(err.Error(), "want a size like") {
			t.Errorf("Set(%q): %v, want a size error", in, err)
		}
	}
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"sh -c sleep 1":                  "sh -c sleep 1",
		"sh -c for i in 1 2\ndo echo\tx": `sh -c for i in 1 2\ndo echo\tx`,
		"python3 -c print('é')":          "python3 -c print('é')",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLastLines(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\n", 5, "a\nb\n"},
		{"a\nb\n", 0, ""},
		{"", 3, ""},
	}
	for _, tt := range tests {
		if got := string(lastLines([]byte(tt.in), tt.n)); got != tt.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
