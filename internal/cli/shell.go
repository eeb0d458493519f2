package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

func newShellCommand(g *globals) *cobra.Command {
	var f execFlags
	c := &cobra.Command{
		Use:   "shell [flags] ID",
		Short: "Open an interactive terminal in a sandbox",
		Long: `Open an interactive terminal in a sandbox: the user's login shell (from the
sandbox's /etc/passwd, else /bin/sh) on a pseudo-terminal, with this
terminal in raw mode, so tab completion, colours, Ctrl-C and full-screen
programs work as locally. The window size follows this terminal's. agentbox
exits with the shell's exit status.`,
		Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			req, err := f.request(nil)
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			return runTerminal(c, cl, args[0], api.CreatePTYRequest{Env: req.Env, Cwd: req.Cwd, User: req.User})
		},
	}
	f.register(c.Flags(), true)
	c.Flags().Lookup("interactive").Hidden = true
	c.Flags().Lookup("timeout").Hidden = true
	return c
}

// runTerminal starts req on a new PTY in the sandbox and connects this
// process's terminal to it until the program ends; its exit status
// becomes ours.
func runTerminal(c *cobra.Command, cl *client.Client, id string, req api.CreatePTYRequest) error {
	return connectTerminal(c, cl, id, req, 0)
}

// connectTerminal is runTerminal, or with attach > 0 connects to the
// running terminal session of that pid instead of starting one.
func connectTerminal(c *cobra.Command, cl *client.Client, id string, req api.CreatePTYRequest, attach int) error {
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.Context()))
	defer cancel()
	in, out := c.InOrStdin(), c.OutOrStdout()
	fd := -1
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd = int(f.Fd())
		if w, h, err := term.GetSize(fd); err == nil {
			req.Cols, req.Rows = w, h
		}
	}
	if fd < 0 {
		// Without a terminal nothing could end the session but the
		// sandbox's TTL: refuse at once.
		if attach > 0 {
			return usageErrorf("attach needs a terminal on stdin, and stdin is not one; `agentbox kill %s %d` ends the session", id, attach)
		}
		if len(req.Cmd) == 0 {
			return usageErrorf("%s needs a terminal on stdin, and stdin is not one; to run a command without a terminal use `agentbox exec %s -- CMD` (-i passes stdin)", c.CommandPath(), id)
		}
		return usageErrorf("exec -t needs a terminal on stdin, and stdin is not one; drop -t (and add -i to pass stdin): `agentbox exec -i %s -- %s`", id, strings.Join(req.Cmd, " "))
	}
	sess := &api.PTYSession{Pid: attach}
	if attach == 0 {
		var err error
		if sess, err = cl.CreatePTY(ctx, id, req); err != nil {
			return err
		}
	}
	conn, err := cl.AttachPTY(ctx, id, sess.Pid)
	if err != nil {
		return err
	}
	defer conn.Close()
	if attach > 0 && req.Cols > 0 {
		conn.Resize(req.Cols, req.Rows) // the session takes this terminal's size
	}
	if fd >= 0 {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("putting the terminal in raw mode: %w", err)
		}
		defer term.Restore(fd, old)
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-winch:
					if w, h, err := term.GetSize(fd); err == nil {
						conn.Resize(w, h)
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	// The TTL would end the session without a word: say so a minute
	// ahead. The goroutine ends with ctx.
	go warnBeforeExpiry(ctx, cl, id, c.ErrOrStderr(), time.Minute)
	// Keystrokes go to the terminal; this goroutine may stay blocked in
	// Read after the end, which is harmless as the process exits.
	go io.Copy(conn, in)
	_, err = io.Copy(out, conn)
	if code := conn.ExitCode(); code != nil {
		if *code != 0 {
			return &ExitError{Code: *code}
		}
		return nil
	}
	if err == nil {
		err = errors.New("the terminal connection closed before the program ended")
	}
	return fmt.Errorf("terminal of pid %d: %w (it keeps running; `agentbox attach %s %d` goes back to it, `agentbox kill %s %d` ends it)", sess.Pid, err, id, sess.Pid, id, sess.Pid)
}

// warnBeforeExpiry writes a warning on w when sandbox id has less than
// ahead left before its TTL ends it, looking again when the time comes
// (the TTL may have been extended meanwhile). It returns when ctx ends,
// after the warning, or when the sandbox has no TTL.
func warnBeforeExpiry(ctx context.Context, cl *client.Client, id string, w io.Writer, ahead time.Duration) {
	for {
		sb, err := cl.GetSandbox(ctx, id)
		if err != nil || sb.ExpiresAt == nil {
			return
		}
		left := time.Until(*sb.ExpiresAt)
		if left <= ahead+5*time.Second {
			fmt.Fprintf(w, "\r\nagentbox: sandbox %s expires in %s (its TTL); extend it with `agentbox ttl %s 1h`\r\n", id, left.Round(time.Second), id)
			return
		}
		t := time.NewTimer(left - ahead)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func newAttachCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "attach ID PID",
		Short: "Connect this terminal to a running terminal session (shell, exec -t) by its pid",
		Long: `Connect this terminal to a terminal session that runs in a sandbox (one
that agentbox shell or exec -t started, or the API's PTY routes), by the
pid its error or the API gave. It exits with the session's exit status
when the program ends.`,
		Args: exactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			pid, err := strconv.Atoi(args[1])
			if err != nil || pid <= 0 {
				return usageErrorf("attach wants the session's pid, a positive number, got %q", args[1])
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			return connectTerminal(c, cl, args[0], api.CreatePTYRequest{}, pid)
		},
	}
}
