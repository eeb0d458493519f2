package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
)

// runSecurityInspect serves `agentbox inspect --security ID`: the
// host-side posture check, one line per process, exit 1 on a failure.
func runSecurityInspect(c *cobra.Command, g *globals, id string, asJSON bool) error {
	cl, err := g.client()
	if err != nil {
		return err
	}
	rep, err := cl.SandboxSecurity(c.Context(), id)
	if err != nil {
		return err
	}
	if asJSON {
		if err := printJSON(c.OutOrStdout(), rep); err != nil {
			return err
		}
	} else if err := printPosture(c.OutOrStdout(), rep); err != nil {
		return err
	}
	if !rep.Pass {
		return errors.New("posture check failed: see the FAILED column")
	}
	return nil
}

func printPosture(w io.Writer, rep *api.SecurityReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tCOMMAND\tVERDICT\tCHECKS\tFAILED")
	for _, p := range rep.Processes {
		verdict := "pass"
		var failed []string
		for _, ch := range p.Checks {
			if !ch.Pass {
				failed = append(failed, fmt.Sprintf("%s=%q (want %s)", ch.Name, ch.Got, ch.Want))
			}
		}
		if !p.Pass {
			verdict = "FAIL"
		}
		f := "-"
		if len(failed) > 0 {
			f = strings.Join(failed, "; ")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\n", p.Pid, p.Comm, verdict, len(p.Checks), f)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "pass"
	if !rep.Pass {
		verdict = "FAIL"
	}
	_, err := fmt.Fprintf(w, "sandbox %s: %d processes checked from the host: %s\n", rep.Sandbox, len(rep.Processes), verdict)
	return err
}
