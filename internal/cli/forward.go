package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// forwardCommand is a verb this binary does not link: it execs the
// daemon's binary (agentboxd) in this process with the same verb and
// arguments, so that the pid, the signals and the exit status stay the
// caller's, and the verb's own --help is agentboxd's.
func forwardCommand(g *globals, daemon, verb, short string) *cobra.Command {
	return &cobra.Command{
		Use:                verb,
		Short:              short,
		DisableFlagParsing: true, // every flag is agentboxd's to parse
		RunE: func(c *cobra.Command, args []string) error {
			bin, err := findDaemon(daemon)
			if err != nil {
				return fmt.Errorf("agentbox %s runs in %s, the daemon's binary: %w; `make install` puts it beside agentbox", verb, daemon, err)
			}
			argv := []string{bin}
			if g.host != "" {
				argv = append(argv, "--host", g.host)
			}
			argv = append(append(argv, verb), args...)
			return syscall.Exec(bin, argv, os.Environ())
		},
	}
}

// reexecDaemon runs this process's whole command line in the daemon's
// binary, for a verb whose code this binary lacks.
func reexecDaemon(g *globals, verb string) error {
	if g.opts.Daemon == "" {
		return fmt.Errorf("agentbox %s: this binary was built without it", verb)
	}
	bin, err := findDaemon(g.opts.Daemon)
	if err != nil {
		return fmt.Errorf("agentbox %s runs in %s, the daemon's binary: %w; `make install` puts it beside agentbox", verb, g.opts.Daemon, err)
	}
	return syscall.Exec(bin, append([]string{bin}, os.Args[1:]...), os.Environ())
}

// findDaemon finds the binary name next to this executable (symlinks
// resolved), else on PATH; a path is taken as it is.
func findDaemon(name string) (string, error) {
	if filepath.IsAbs(name) {
		return name, nil
	}
	if self, err := os.Executable(); err == nil {
		if self, err = filepath.EvalSymlinks(self); err == nil {
			p := filepath.Join(filepath.Dir(self), name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return exec.LookPath(name)
}
