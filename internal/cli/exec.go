package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// execFlags are the flags of exec, shared by run.
type execFlags struct {
	timeout     string
	env         []string
	cwd         string
	user        string
	interactive bool
}

func (f *execFlags) register(fs *pflag.FlagSet, withEnv bool) {
	fs.StringVar(&f.timeout, "timeout", "", "kill the command after this long, e.g. 30s or 5m (exit status 124)")
	if withEnv {
		fs.StringArrayVar(&f.env, "env", nil, "environment variable KEY=VALUE of the command (repeatable)")
	}
	fs.StringVar(&f.cwd, "cwd", "", "working directory inside the sandbox (default: the template's)")
	fs.StringVarP(&f.user, "user", "u", "", "user name or uid to run as (default: the template's)")
	fs.BoolVarP(&f.interactive, "interactive", "i", false, "forward this terminal's stdin to the command")
}

func (f *execFlags) request(cmd []string) (api.ExecRequest, error) {
	req := api.ExecRequest{Cmd: cmd, Cwd: f.cwd, User: f.user}
	if f.timeout != "" {
		d, err := parseDuration("timeout", f.timeout)
		if err != nil {
			return req, err
		}
		req.TimeoutMs = d.Milliseconds()
	}
	var err error
	if req.Env, err = parseKV("env", f.env); err != nil {
		return req, err
	}
	return req, nil
}

// splitExecArgs splits `ID -- CMD [ARGS...]` (the -- may be left out when
// the command has no flags of its own).
func splitExecArgs(dash int, args []string) (id string, cmd []string, err error) {
	switch {
	case len(args) == 0:
		return "", nil, usageErrorf("exec wants a sandbox id and a command: agentbox exec ID -- CMD [ARGS...]")
	case dash == 0:
		return "", nil, usageErrorf("exec wants the sandbox id before --: agentbox exec ID -- CMD [ARGS...]")
	case dash > 1:
		return "", nil, usageErrorf("exec wants exactly one sandbox id before --, got %q", args[:dash])
	case len(args) < 2:
		return "", nil, usageErrorf("exec wants a command after the sandbox id: agentbox exec %s -- CMD [ARGS...]", args[0])
	}
	return args[0], args[1:], nil
}

func newExecCommand(g *globals) *cobra.Command {
	var f execFlags
	var tty, detach bool
	var tag string
	c := &cobra.Command{
		Use:   "exec [flags] ID -- CMD [ARGS...]",
		Short: "Run a command in a sandbox, streaming its output",
		Long: `Run a command in a sandbox. Its stdout and stderr stream to this terminal as
they come, and agentbox exits with the command's exit status (128+N when a
signal N killed it, 124 when --timeout did).

The command is an argv, run without a shell: a single argument with spaces
is still one argument. Use sh -c for a shell:
  agentbox exec ID -- sh -c 'ls | wc -l'`,
		Args: minArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			id, cmd, err := splitExecArgs(c.ArgsLenAtDash(), args)
			if err != nil {
				return err
			}
			req, err := f.request(cmd)
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			if tag != "" && !detach {
				return usageErrorf("--tag names a background process: use it with -d")
			}
			switch {
			case detach:
				return startDetached(c, cl, id, req, tag)
			case tty:
				return runTerminal(c, cl, id, api.CreatePTYRequest{Cmd: req.Cmd, Env: req.Env, Cwd: req.Cwd, User: req.User})
			}
			return streamExec(c, cl, id, req, f.interactive)
		},
	}
	f.register(c.Flags(), true)
	c.Flags().BoolVarP(&tty, "tty", "t", false, "run the command on a terminal, interactively (see agentbox shell)")
	c.Flags().BoolVarP(&detach, "detach", "d", false, "start the command in the background and print its pid (see ps, logs, kill)")
	c.Flags().StringVar(&tag, "tag", "", "with -d: a name for the process that ps, logs and kill take instead of its pid")
	return c
}

// streamExec runs req and returns an *ExitError carrying the command's
// exit status when it is not zero.
func streamExec(c *cobra.Command, cl *client.Client, id string, req api.ExecRequest, interactive bool) error {
	var stdin io.Reader
	if interactive {
		stdin = c.InOrStdin()
	}
	ev, err := cl.ExecStream(c.Context(), id, req, stdin, c.OutOrStdout(), c.ErrOrStderr())
	if err != nil {
		return err
	}
	code, msg := exitStatusOf(ev, time.Duration(req.TimeoutMs)*time.Millisecond)
	if ev.Truncated {
		fmt.Fprintln(c.ErrOrStderr(), "agentbox: the command's output went past the cap and was cut")
	}
	if code == 0 && msg == "" {
		return nil
	}
	return &ExitError{Code: code, Message: msg}
}

// exitStatusOf maps an exit event to a shell-style exit status: the code,
// 128+N for signal N, 124 for a timeout (with a message), 137 with a
// message for an OOM kill.
func exitStatusOf(ev *api.ExecEvent, timeout time.Duration) (int, string) {
	if ev.OOMKilled {
		return 137, "the command was killed for running out of memory (the sandbox's memory limit; create it with more, e.g. --memory 2G)"
	}
	if ev.TimedOut {
		if timeout > 0 {
			return 124, fmt.Sprintf("the command timed out after %s and was killed", timeout)
		}
		return 124, "the command timed out and was killed"
	}
	if ev.Signal != "" {
		if n, ok := signalNumbers[ev.Signal]; ok {
			return 128 + n, ""
		}
		return 128 + 9, fmt.Sprintf("the command was killed by %s", ev.Signal)
	}
	if ev.ExitCode == nil {
		return 1, "the command ended without an exit status"
	}
	return *ev.ExitCode, ""
}

// signalNumbers are Linux's signal numbers (the sandbox is always Linux,
// whatever this client runs on).
var signalNumbers = map[string]int{
	"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5,
	"SIGABRT": 6, "SIGBUS": 7, "SIGFPE": 8, "SIGKILL": 9, "SIGUSR1": 10,
	"SIGSEGV": 11, "SIGUSR2": 12, "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15,
	"SIGSTKFLT": 16, "SIGCHLD": 17, "SIGCONT": 18, "SIGSTOP": 19, "SIGTSTP": 20,
	"SIGTTIN": 21, "SIGTTOU": 22, "SIGURG": 23, "SIGXCPU": 24, "SIGXFSZ": 25,
	"SIGVTALRM": 26, "SIGPROF": 27, "SIGWINCH": 28, "SIGIO": 29, "SIGPWR": 30,
	"SIGSYS": 31,
}
