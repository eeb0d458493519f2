package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/build"
)

func newTemplateBuildCommand(g *globals) *cobra.Command {
	var name, contextDir string
	var quiet bool
	c := &cobra.Command{
		Use:   "build SPEC.yaml --name NAME [--context DIR]",
		Short: "Build a template from a YAML build spec, each step in a sandbox and cached as a layer",
		Long: `Build a new template version from a build spec (see docs/templates.md):

  from: base
  network: internet        # for apt/pip/npm; default none
  steps:
    - apt: [curl]
    - copy: app /srv/app
    - workdir: /srv/app
    - run: make
    - env: {PORT: "8000"}
    - start: python3 -m http.server $PORT
    - ready: {port: 8000, timeout: 20s}

Each run, copy, apt, pip and npm step runs in a fresh sandbox and becomes a
layer, cached by its parent, the step and the files it copies: a rebuild
reruns only from the first changed step. copy reads from the build context:
--context DIR, or the spec's directory when the spec has copy steps or
starts from an image file (from: app.tar, a docker save archive or OCI
layout tar in the context).`,
		Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if name == "" {
				return usageErrorf("template build needs --name NAME")
			}
			data, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("reading the build spec: %w", err)
			}
			spec, err := build.Parse(data)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if contextDir == "" && spec.FromImage() {
				contextDir = filepath.Dir(args[0])
			}
			if contextDir == "" {
				for _, st := range spec.Steps {
					if st.Kind == build.KindCopy {
						contextDir = filepath.Dir(args[0])
						break
					}
				}
			}
			var bctx io.Reader
			if contextDir != "" {
				fi, err := os.Stat(contextDir)
				if err != nil || !fi.IsDir() {
					return usageErrorf("--context %s is not a directory", contextDir)
				}
				pr, pw := io.Pipe()
				go func() { pw.CloseWithError(writeTar(pw, contextDir, c.ErrOrStderr())) }()
				defer pr.Close()
				bctx = pr
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			start := time.Now()
			t, err := cl.BuildTemplate(c.Context(), name, data, bctx, buildRenderer(c.ErrOrStderr(), quiet))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "built %s version %s (%d layers on %s) in %s\n", t.Name, t.Version, len(t.Layers), t.From, time.Since(start).Round(time.Millisecond))
			fmt.Fprintf(c.OutOrStdout(), "%s %s\n", t.Name, t.Version)
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", "template name")
	c.Flags().StringVar(&contextDir, "context", "", "build context directory (copy steps read from it)")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "do not print the steps' output")
	return c
}

// buildRenderer prints build events as a step-by-step log.
func buildRenderer(w io.Writer, quiet bool) func(api.BuildEvent) {
	return func(ev api.BuildEvent) {
		switch ev.Type {
		case api.BuildEventStep:
			cached := ""
			if ev.Cached {
				cached = " (cached)"
			}
			fmt.Fprintf(w, "step %d/%d: %s%s\n", ev.Step, ev.Steps, ev.Text, cached)
		case api.BuildEventOutput:
			if !quiet {
				fmt.Fprintf(w, "  | %s\n", ev.Text)
			}
		case api.BuildEventStepDone:
			if ev.ExitCode != nil && *ev.ExitCode != 0 {
				fmt.Fprintf(w, "  step %d failed: exit code %d after %s\n", ev.Step, *ev.ExitCode, time.Duration(ev.DurationMs*float64(time.Millisecond)).Round(time.Millisecond))
			} else if !ev.Cached && ev.Layer != "" {
				fmt.Fprintf(w, "  done in %s, layer %s\n", time.Duration(ev.DurationMs*float64(time.Millisecond)).Round(time.Millisecond), ev.Layer)
			}
		}
	}
}

// progressReader reports, at most once a second, how much of size bytes
// has been read.
type progressReader struct {
	r     io.Reader
	size  int64
	done  int64
	w     io.Writer
	what  string
	last  time.Time
	start time.Time
	once  sync.Once
}

func newProgressReader(r io.Reader, size int64, w io.Writer, what string) *progressReader {
	return &progressReader{r: r, size: size, w: w, what: what, last: time.Now(), start: time.Now()}
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.done += int64(n)
	if time.Since(p.last) >= time.Second || (err == io.EOF && time.Since(p.start) >= time.Second) {
		p.last = time.Now()
		pct := 100.0
		if p.size > 0 {
			pct = float64(p.done) * 100 / float64(p.size)
		}
		fmt.Fprintf(p.w, "%s %s of %s (%.0f%%)\n", p.what, formatBytes(p.done), formatBytes(p.size), pct)
		if err == io.EOF {
			p.once.Do(func() { fmt.Fprintln(p.w, "upload done; the daemon is importing the layers...") })
		}
	}
	return n, err
}

// printBuildInfo adds to template inspect what builds set: versions, the
// base, the layers, start and ready.
func printBuildInfo(out io.Writer, t *api.Template) {
	if len(t.Versions) > 0 {
		fmt.Fprintf(out, "versions: %s\n", strings.Join(t.Versions, " "))
	}
	if t.From != "" {
		fmt.Fprintf(out, "from:     %s\n", t.From)
	}
	switch {
	case len(t.LayerInfo) > 0:
		fmt.Fprintln(out, "layers:   (top first)")
		for _, l := range t.LayerInfo {
			fmt.Fprintf(out, "  %s  %8s  %s\n", l.ID, formatBytes(l.SizeBytes), l.Step)
		}
	case len(t.Layers) > 0:
		fmt.Fprintln(out, "layers:   (top first)")
		for _, l := range t.Layers {
			fmt.Fprintf(out, "  %s\n", l)
		}
	}
	if t.Start != "" {
		fmt.Fprintf(out, "start:    %s\n", t.Start)
	}
	if r := t.Ready; r != nil {
		what := fmt.Sprintf("port %d", r.Port)
		if r.Cmd != "" {
			what = "cmd " + r.Cmd
		}
		fmt.Fprintf(out, "ready:    %s within %s\n", what, time.Duration(r.TimeoutMs)*time.Millisecond)
	}
}
