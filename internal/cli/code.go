package cli

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

func newCodeCommand(g *globals) *cobra.Command {
	var code, ctxID, lang, timeout, outDir string
	var env []string
	c := &cobra.Command{
		Use:   "code [flags] ID [-c CODE | FILE]",
		Short: "Run code in a sandbox's Jupyter kernel (a stateful code interpreter)",
		Long: `Run code in a code context of a sandbox: a Jupyter kernel that keeps its
state (variables, imports) between runs. Output streams to this terminal;
results print as text, and images (PNG, JPEG, SVG, PDF) are saved to files
in --out-dir, whose names are printed. The exit status is 1 when the code
raised an error.

  agentbox code ID -c 'import pandas as pd; pd.__version__'
  agentbox code ID analysis.py
  agentbox code ID            an interactive REPL (a line ending in ':' or
                              '\' continues until an empty line)

See docs/interpreter.md.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageErrorf("code wants a sandbox id and at most one file: %s", c.UseLine())
			}
			if len(args) == 2 && code != "" {
				return usageErrorf("give -c CODE or FILE, not both")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			req := api.RunCodeRequest{Context: ctxID, Language: lang}
			if timeout != "" {
				d, err := parseDuration("timeout", timeout)
				if err != nil {
					return err
				}
				req.TimeoutMs = d.Milliseconds()
			}
			var err error
			if req.Env, err = parseKV("env", env); err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			p := &codePrinter{out: c.OutOrStdout(), errOut: c.ErrOrStderr(), dir: outDir}
			switch {
			case code != "":
				req.Code = code
			case len(args) == 2:
				var b []byte
				if args[1] == "-" {
					b, err = io.ReadAll(c.InOrStdin())
				} else {
					b, err = os.ReadFile(args[1])
				}
				if err != nil {
					return fmt.Errorf("reading the code: %w", err)
				}
				req.Code = string(b)
			default:
				return codeREPL(c, cl, args[0], req, p)
			}
			ex, err := p.run(c, cl, args[0], req)
			if err != nil {
				return err
			}
			if ex.Error != nil || ex.Status != api.CodeStatusOK {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&code, "code", "c", "", "the code to run")
	c.Flags().StringVar(&ctxID, "context", "", "code context id (default: the language's default context)")
	c.Flags().StringVarP(&lang, "language", "l", "", "language of the default context to use (default python)")
	c.Flags().StringVar(&timeout, "timeout", "", "interrupt the run after this long, e.g. 30s (default 5m)")
	c.Flags().StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE for this run (repeatable)")
	c.Flags().StringVar(&outDir, "out-dir", ".", "directory where images and PDFs are saved")
	return c
}

// codePrinter prints a run's events as they come.
type codePrinter struct {
	out, errOut io.Writer
	dir         string
	saved       int
}

func (p *codePrinter) run(c *cobra.Command, cl *client.Client, id string, req api.RunCodeRequest) (*api.Execution, error) {
	ex, err := cl.RunCode(c.Context(), id, req, p.event)
	if err != nil {
		return nil, err
	}
	if ex.Restarted {
		fmt.Fprintln(p.errOut, "agentbox: the kernel was restarted: earlier state (variables, imports) is lost")
	}
	switch ex.Status {
	case api.CodeStatusTimeout:
		fmt.Fprintln(p.errOut, "agentbox: the run timed out and was interrupted")
	case api.CodeStatusKernelDied:
		fmt.Fprintln(p.errOut, "agentbox: the kernel died; the next run starts a fresh one")
	}
	return ex, nil
}

func (p *codePrinter) event(ev api.CodeEvent) {
	switch ev.Type {
	case api.CodeEventStdout:
		io.WriteString(p.out, ev.Text)
	case api.CodeEventStderr:
		io.WriteString(p.errOut, ev.Text)
	case api.CodeEventError:
		tb := ev.Traceback
		if tb == "" {
			tb = ev.Name + ": " + ev.Value
		}
		fmt.Fprintln(p.errOut, tb)
	case api.CodeEventResult:
		r := ev.Result()
		files := 0
		for _, f := range []struct{ data, ext string }{{r.PNG, "png"}, {r.JPEG, "jpg"}, {r.PDF, "pdf"}} {
			if f.data != "" && p.save(f.ext, f.data, true) {
				files++
			}
		}
		if r.SVG != "" && p.save("svg", r.SVG, false) {
			files++
		}
		if files == 0 && r.Text != "" {
			fmt.Fprintln(p.out, r.Text)
		}
	}
}

// save writes one image to the next free out-N.ext and prints its name.
func (p *codePrinter) save(ext, data string, b64 bool) bool {
	b := []byte(data)
	if b64 {
		var err error
		if b, err = base64.StdEncoding.DecodeString(data); err != nil {
			fmt.Fprintf(p.errOut, "agentbox: a %s result is not base64: %v\n", ext, err)
			return false
		}
	}
	for {
		p.saved++
		name := filepath.Join(p.dir, fmt.Sprintf("out-%d.%s", p.saved, ext))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if os.IsExist(err) {
			continue
		}
		if err == nil {
			_, err = f.Write(b)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(p.errOut, "agentbox: saving a %s result: %v\n", ext, err)
			return false
		}
		fmt.Fprintf(p.out, "[%s saved to %s]\n", ext, name)
		return true
	}
}

// codeREPL reads cells from stdin and runs each; a line ending in ':' or
// '\' starts a block that an empty line ends.
func codeREPL(c *cobra.Command, cl *client.Client, id string, req api.RunCodeRequest, p *codePrinter) error {
	in := c.InOrStdin()
	prompt := false
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		prompt = true
		fmt.Fprintln(p.out, "agentbox code: a line ending in ':' or '\\' continues until an empty line; Ctrl-D quits")
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var cell []string
	for {
		if prompt {
			if len(cell) == 0 {
				fmt.Fprint(p.out, ">>> ")
			} else {
				fmt.Fprint(p.out, "... ")
			}
		}
		if !sc.Scan() {
			break
		}
		line := sc.Text()
		if len(cell) > 0 && strings.TrimSpace(line) != "" {
			cell = append(cell, line)
			continue
		}
		if len(cell) == 0 {
			if strings.TrimSpace(line) == "" {
				continue
			}
			cell = append(cell, strings.TrimSuffix(line, "\\"))
			if strings.HasSuffix(line, ":") || strings.HasSuffix(line, "\\") {
				continue
			}
		}
		req.Code = strings.Join(cell, "\n")
		cell = nil
		if _, err := p.run(c, cl, id, req); err != nil {
			fmt.Fprintf(p.errOut, "agentbox: %v\n", err)
		}
	}
	if len(cell) > 0 {
		req.Code = strings.Join(cell, "\n")
		if _, err := p.run(c, cl, id, req); err != nil {
			return err
		}
	}
	return sc.Err()
}
