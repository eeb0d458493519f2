package cli

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

func TestLogLines(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// stdout "a1\na2\npart" from offset 10, stderr "b1\nb2\n" from 0;
	// "a2\n" came in two reads, around b1.
	out := &api.ProcessOutput{
		Stdout: []byte("a1\na2\npart"), StdoutOffset: 20,
		Stderr: []byte("b1\nb2\n"), StderrOffset: 6,
		Chunks: []api.OutputChunk{
			{Stream: "stdout", Offset: 10, Length: 4, Time: at(1)}, // "a1\na"
			{Stream: "stderr", Offset: 0, Length: 3, Time: at(2)},  // "b1\n"
			{Stream: "stdout", Offset: 14, Length: 2, Time: at(3)}, // "2\n"
			{Stream: "stdout", Offset: 16, Length: 4, Time: at(4)}, // "part"
			{Stream: "stderr", Offset: 3, Length: 3, Time: at(5)},  // "b2\n"
		},
	}
	got := logLines(out, -1)
	want := []struct {
		s    int
		line string
		t    int
	}{{0, "a1\n", 1}, {1, "b1\n", 2}, {0, "a2\n", 3}, {0, "part", 4}, {1, "b2\n", 5}}
	if len(got) != len(want) {
		t.Fatalf("got %d lines: %+v", len(got), got)
	}
	for i, w := range want {
		if got[i].stream != w.s || string(got[i].data) != w.line || !got[i].t.Equal(at(w.t)) {
			t.Errorf("line %d = %d %q %v, want %d %q %v", i, got[i].stream, got[i].data, got[i].t, w.s, w.line, at(w.t))
		}
	}
	tail := logLines(out, 1)
	if len(tail) != 2 || string(tail[0].data) != "part" || string(tail[1].data) != "b2\n" {
		t.Errorf("tail 1: %+v", tail)
	}

	// Both streams into one writer, as with 2>&1; --since drops a1.
	var o bytes.Buffer
	p := &logPrinter{w: [2]io.Writer{&o, &o}, stamps: true, since: at(2), bol: [2]bool{true, true}}
	for _, l := range got {
		p.write(l.stream, l.data, l.t)
	}
	p.write(0, []byte("ial\nnext\n"), at(6))
	wantOut := "2026-01-02T03:04:07.000000000Z b1\n" +
		"2026-01-02T03:04:08.000000000Z a2\n" +
		"2026-01-02T03:04:09.000000000Z part" +
		"2026-01-02T03:04:10.000000000Z b2\n" +
		"ial\n" +
		"2026-01-02T03:04:11.000000000Z next\n"
	if o.String() != wantOut {
		t.Errorf("printed:\n%s\nwant:\n%s", o.String(), wantOut)
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"10m":                         now.Add(-10 * time.Minute),
		"90":                          now.Add(-90 * time.Second),
		"1d2h":                        now.Add(-26 * time.Hour),
		"2026-01-01T00:00:00Z":        time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		"2026-01-01T00:00:00.5+01:00": time.Date(2025, 12, 31, 23, 0, 0, 5e8, time.UTC),
	} {
		got, err := parseSince(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "-5m", "2026-01-01"} {
		if _, err := parseSince(in, now); err == nil {
			t.Errorf("parseSince(%q) accepted", in)
		}
	}
}
