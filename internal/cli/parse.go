package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// sizeUnits maps a size suffix (lowercase) to bytes. Like docker, the
// short forms are binary: 2G is 2 GiB.
var sizeUnits = map[string]float64{
	"":  1 << 20, // plain numbers are MiB
	"b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

// parseSizeMB parses a size such as 512M, 2G, 1GiB, 1.5g or 256 (MiB) into
// whole MiB, rounding up. flag names the flag for the error message.
func parseSizeMB(flag, s string) (int64, error) {
	bad := func() (int64, error) {
		return 0, usageErrorf("--%s wants a size like 512M, 2G or 1GiB (plain numbers are MiB), got %q", flag, s)
	}
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return bad()
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return bad()
	}
	mb := math.Ceil(v * mult / (1 << 20))
	if mb <= 0 {
		return 0, usageErrorf("--%s must be more than zero, got %q", flag, s)
	}
	if mb > math.MaxInt32 {
		return 0, usageErrorf("--%s %q is too large", flag, s)
	}
	return int64(mb), nil
}

// parseDuration parses a Go duration ("90s", "1h30m"), a number of days
// with an optional rest ("2d", "1d12h"), or a plain number of seconds.
func parseDuration(flag, s string) (time.Duration, error) {
	bad := func() (time.Duration, error) {
		return 0, usageErrorf("--%s wants a duration like 30s, 10m, 2h or 1d (plain numbers are seconds), got %q", flag, s)
	}
	t := strings.TrimSpace(s)
	if t == "" {
		return bad()
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n < 0 || n > math.MaxInt64/int64(time.Second) {
			return bad()
		}
		return time.Duration(n) * time.Second, nil
	}
	var days time.Duration
	if i := strings.IndexByte(t, 'd'); i > 0 {
		n, err := strconv.ParseInt(t[:i], 10, 64)
		if err != nil || n < 0 || n > 100000 {
			return bad()
		}
		days = time.Duration(n) * 24 * time.Hour
		t = t[i+1:]
		if t == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(t)
	if err != nil || d < 0 {
		return bad()
	}
	return days + d, nil
}

// parseTTLSeconds parses a TTL for the API: "none", "never" or "off" mean
// no TTL (-1); otherwise a positive duration, rounded up to whole seconds.
func parseTTLSeconds(flag, s string) (int64, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "none", "never", "off":
		return -1, nil
	}
	d, err := parseDuration(flag, s)
	if err != nil {
		return 0, usageErrorf("--%s wants a duration like 30m, 2h or 1d, or \"none\" for no TTL, got %q", flag, s)
	}
	if d <= 0 {
		return 0, usageErrorf("--%s must be more than zero (use \"none\" for no TTL), got %q", flag, s)
	}
	return int64((d + time.Second - 1) / time.Second), nil
}

// parseKV parses repeated KEY=VALUE flags into a map; later keys win.
func parseKV(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--%s wants KEY=VALUE, got %q", flag, p)
		}
		m[k] = v
	}
	return m, nil
}

// formatAge writes a duration the way ls shows ages: 45s, 12m, 5h, 3d.
func formatAge(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// sizeMBFlag is a flag holding a size in MiB, given like --memory 16G
// (parseSizeMB), or 0.
type sizeMBFlag int64

func (f *sizeMBFlag) String() string { return strconv.FormatInt(int64(*f), 10) }
func (f *sizeMBFlag) Type() string   { return "SIZE" }
func (f *sizeMBFlag) Set(s string) error {
	if strings.TrimSpace(s) == "0" {
		*f = 0
		return nil
	}
	mb, err := parseSizeMB("size", s)
	if err != nil {
		return fmt.Errorf("want a size like 512M, 16G or 1TiB (plain numbers are MiB; 0: no limit), got %q", s)
	}
	*f = sizeMBFlag(mb)
	return nil
}
