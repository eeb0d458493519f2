package cli

import (
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

func newLogsCommand(g *globals) *cobra.Command {
	var (
		follow, stamps bool
		tail           int
		sinceFlag      string
	)
	c := &cobra.Command{
		Use:   "logs [-f] [-t] [--tail N] [--since WHEN] ID PID|TAG",
		Short: "Print a background process's output",
		Long: `Print what a background process wrote to stdout and stderr (what its ring
buffers still hold: the last 1 MiB of each by default), the two streams
interleaved line by line in the order the process wrote them. With -f,
keep following until it ends; Ctrl-C detaches and leaves it running.
--tail N prints only the last N lines of each stream held so far.
-t starts each line with the time it was written (RFC 3339, UTC,
nanoseconds). --since drops lines written before a time: a duration back
from now (10m, 1h30m; plain numbers are seconds) or an RFC 3339 time.`,
		Args: exactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			var since time.Time
			if sinceFlag != "" {
				var err error
				if since, err = parseSince(sinceFlag, time.Now()); err != nil {
					return err
				}
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			id, ref := args[0], args[1]
			out, err := cl.ProcessOutputChunks(c.Context(), id, ref, 0, 0)
			if err != nil {
				return err
			}
			if out.StdoutDropped+out.StderrDropped > 0 {
				fmt.Fprintf(c.ErrOrStderr(), "agentbox: %d bytes of older output are gone (past the ring buffer)\n", out.StdoutDropped+out.StderrDropped)
			}
			p := &logPrinter{w: [2]io.Writer{c.OutOrStdout(), c.ErrOrStderr()}, stamps: stamps, since: since, bol: [2]bool{true, true}}
			if out.Chunks == nil && len(out.Stdout)+len(out.Stderr) > 0 {
				// A daemon without output times: stdout, then stderr.
				if stamps || sinceFlag != "" {
					return fmt.Errorf("this daemon keeps no output times, so -t and --since cannot work; update it")
				}
				if tail >= 0 {
					out.Stdout, out.Stderr = lastLines(out.Stdout, tail), lastLines(out.Stderr, tail)
				}
				c.OutOrStdout().Write(out.Stdout)
				c.ErrOrStderr().Write(out.Stderr)
			} else {
				for _, l := range logLines(out, tail) {
					if err := p.write(l.stream, l.data, l.t); err != nil {
						return err
					}
				}
			}
			if !follow || out.State == api.ProcessExited {
				return nil
			}
			_, err = cl.StreamProcess(c.Context(), id, ref, client.StreamOptions{StdoutOffset: out.StdoutOffset, StderrOffset: out.StderrOffset, Chunks: true},
				func(ev *api.ExecEvent) error {
					s, t := 0, time.Now().UTC()
					if ev.Type == api.EventStderr {
						s = 1
					}
					if ev.Time != nil {
						t = *ev.Time
					}
					return p.write(s, ev.Data, t)
				})
			return err
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing output as it comes, until the process ends")
	c.Flags().IntVarP(&tail, "tail", "n", -1, "print only the last N lines of each stream held so far (then follow with -f)")
	c.Flags().BoolVarP(&stamps, "timestamps", "t", false, "start each line with the time it was written (RFC 3339, UTC)")
	c.Flags().StringVar(&sinceFlag, "since", "", "print only lines written since a time: a duration back from now (10m) or an RFC 3339 time")
	return c
}

// parseSince reads --since: an RFC 3339 time, or a duration before now
// (parseDuration's forms).
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := parseDuration("since", s)
	if err != nil {
		return time.Time{}, usageErrorf("--since wants a duration like 10m or 2h (plain numbers are seconds) or an RFC 3339 time like 2026-01-02T15:04:05Z, got %q", s)
	}
	return now.Add(-d), nil
}

// logLine is one line of one stream (0 stdout, 1 stderr), or the
// unfinished end of one, and when its last byte was written.
type logLine struct {
	stream int
	data   []byte
	t      time.Time
}

// logLines cuts a ProcessOutput with chunks into lines, both streams in
// the order written: a line goes where the chunk holding its last byte
// goes. tail >= 0 keeps the last tail lines of each stream.
func logLines(out *api.ProcessOutput, tail int) []logLine {
	data := [2][]byte{out.Stdout, out.Stderr}
	base := [2]int64{out.StdoutOffset - int64(len(out.Stdout)), out.StderrOffset - int64(len(out.Stderr))}
	lastChunk := [2]int{-1, -1}
	for k, c := range out.Chunks {
		lastChunk[streamIndex(c.Stream)] = k
	}
	var lines []logLine
	var start [2]int // where each stream's current line starts in data
	for k, c := range out.Chunks {
		s := streamIndex(c.Stream)
		lo, hi := int(c.Offset-base[s]), int(c.Offset-base[s]+c.Length)
		if lo < 0 || hi > len(data[s]) || lo > hi {
			continue // not in what was returned (cannot happen with a sound daemon)
		}
		for i := lo; i < hi; {
			j := bytes.IndexByte(data[s][i:hi], '\n')
			if j < 0 {
				break
			}
			i += j + 1
			lines = append(lines, logLine{stream: s, data: data[s][start[s]:i], t: c.Time})
			start[s] = i
		}
		if k == lastChunk[s] && start[s] < len(data[s]) {
			lines = append(lines, logLine{stream: s, data: data[s][start[s]:], t: c.Time})
			start[s] = len(data[s])
		}
	}
	if tail < 0 {
		return lines
	}
	var count [2]int
	for _, l := range lines {
		count[l.stream]++
	}
	kept := lines[:0]
	var seen [2]int
	for _, l := range lines {
		seen[l.stream]++
		if count[l.stream]-seen[l.stream] < tail {
			kept = append(kept, l)
		}
	}
	return kept
}

func streamIndex(stream string) int {
	if stream == api.EventStderr {
		return 1
	}
	return 0
}

// stampLayout is RFC 3339 with nanoseconds always written, so that
// stamps line up and sort as text.
const stampLayout = "2006-01-02T15:04:05.000000000Z07:00"

// logPrinter writes output to stdout or stderr, each line started with
// its time when stamps is set, and drops output written before since.
type logPrinter struct {
	w      [2]io.Writer
	stamps bool
	since  time.Time
	bol    [2]bool // the stream's next byte starts a line
}

func (p *logPrinter) write(s int, data []byte, t time.Time) error {
	if len(data) == 0 || (!p.since.IsZero() && t.Before(p.since)) {
		return nil
	}
	if !p.stamps {
		_, err := p.w[s].Write(data)
		return err
	}
	var b bytes.Buffer
	for len(data) > 0 {
		if p.bol[s] {
			b.WriteString(t.UTC().Format(stampLayout))
			b.WriteByte(' ')
		}
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line = data[:i+1]
		}
		b.Write(line)
		data = data[len(line):]
		p.bol[s] = line[len(line)-1] == '\n'
	}
	_, err := p.w[s].Write(b.Bytes())
	return err
}

// lastLines returns the last n lines of b (a final line without a newline
// counts as one).
func lastLines(b []byte, n int) []byte {
	if n == 0 {
		return nil
	}
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}
