package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

// cpArg is one side of `agentbox cp`: a local path, or ID:/path in a
// sandbox.
type cpArg struct {
	id   string // empty for a local path
	path string
}

func (a cpArg) remote() bool { return a.id != "" }

// parseCpArg reads "ID:/path" as a sandbox path and anything else as a
// local one. A colon after a slash is part of a local name, so "./a:b" is
// local; "-" is stdin or stdout.
func parseCpArg(s string) (cpArg, error) {
	if s == "" {
		return cpArg{}, usageErrorf("cp wants non-empty paths: agentbox cp SRC DST, with ID:/path on one side")
	}
	i := strings.IndexByte(s, ':')
	if i < 0 || strings.Contains(s[:i], "/") {
		return cpArg{path: s}, nil
	}
	if i == 0 {
		return cpArg{}, usageErrorf("%q has no sandbox id before the colon; use ID:/path", s)
	}
	if s[i+1:] == "" {
		return cpArg{}, usageErrorf("%q names a sandbox but no path; use %s:/path", s, s[:i])
	}
	return cpArg{id: s[:i], path: s[i+1:]}, nil
}

func newCpCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between this machine and a sandbox",
		Long: `Copy a file or a directory between this machine and a sandbox. One side is
ID:/path in the sandbox, the other a local path ("-" for stdin or stdout).
Like cp -r: copying to an existing directory puts the copy inside it.
Permission bits are kept; set-id bits, device nodes and other special files
are not copied.`,
		Example: `  agentbox cp ./src sb-123:/work/src
  agentbox cp sb-123:/work/out.csv .
  agentbox cp sb-123:/etc/os-release -`,
		Args: exactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			src, err := parseCpArg(args[0])
			if err != nil {
				return err
			}
			dst, err := parseCpArg(args[1])
			if err != nil {
				return err
			}
			switch {
			case src.remote() && dst.remote():
				return usageErrorf("cp copies between this machine and a sandbox, not between two sandboxes; copy through a local directory")
			case !src.remote() && !dst.remote():
				return usageErrorf("cp wants ID:/path on one side, got two local paths %q and %q", src.path, dst.path)
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			cp := &copier{ctx: c.Context(), cl: cl, stdin: c.InOrStdin(), stdout: c.OutOrStdout(), warn: c.ErrOrStderr()}
			if dst.remote() {
				return cp.upload(src.path, dst)
			}
			return cp.download(src, dst.path)
		},
	}
}

type copier struct {
	ctx    context.Context
	cl     *client.Client
	stdin  io.Reader
	stdout io.Writer
	warn   io.Writer
}

// remoteDir reports whether p is a directory in the sandbox; a missing p
// is not an error.
func (cp *copier) remoteDir(id, p string) (isDir, exists bool, err error) {
	info, err := cp.cl.Stat(cp.ctx, id, p)
	if errors.Is(err, errdefs.ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return info.Type == api.FileTypeDir, true, nil
}

func (cp *copier) upload(local string, dst cpArg) error {
	if local == "-" {
		if strings.HasSuffix(dst.path, "/") {
			return usageErrorf("copying stdin wants a file path in the sandbox, got the directory %q", dst.path)
		}
		_, err := cp.cl.WriteFile(cp.ctx, dst.id, dst.path, cp.stdin, 0o644)
		return err
	}
	fi, err := os.Stat(local)
	if err != nil {
		return fmt.Errorf("cannot copy %s: %w", local, err)
	}
	// "ID:/dir/" names the directory: the daemon takes paths without a
	// trailing slash.
	isDir, exists, err := cp.remoteDir(dst.id, path.Clean(dst.path))
	if err != nil {
		return err
	}
	target := path.Clean(dst.path)
	base := filepath.Base(filepath.Clean(local))
	if isDir || (!exists && strings.HasSuffix(dst.path, "/") && !fi.IsDir()) {
		target = path.Join(dst.path, base)
	}

	if fi.Mode().IsRegular() {
		f, err := os.Open(local)
		if err != nil {
			return fmt.Errorf("cannot copy %s: %w", local, err)
		}
		defer f.Close()
		_, err = cp.cl.WriteFile(cp.ctx, dst.id, target, f, fi.Mode().Perm())
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("cannot copy %s: only regular files and directories can be copied", local)
	}
	if exists && !isDir {
		return fmt.Errorf("cannot copy the directory %s onto %s:%s, which is a file", local, dst.id, dst.path)
	}
	if _, err := cp.cl.Mkdir(cp.ctx, dst.id, target, fi.Mode().Perm()); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, local, cp.warn)) }()
	err = cp.cl.UploadArchive(cp.ctx, dst.id, target, pr)
	pr.Close()
	return err
}

func (cp *copier) download(src cpArg, local string) error {
	info, err := cp.cl.Stat(cp.ctx, src.id, src.path)
	if err != nil {
		return err
	}
	if info.Type == api.FileTypeDir {
		if local == "-" {
			return usageErrorf("%s:%s is a directory; copy it to a local directory, not stdout", src.id, src.path)
		}
		target := local
		if fi, err := os.Stat(local); err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("cannot copy the directory %s:%s onto %s, which is a file", src.id, src.path, local)
			}
			target = filepath.Join(local, path.Base(path.Clean(src.path)))
		}
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", target, err)
		}
		rc, err := cp.cl.DownloadArchive(cp.ctx, src.id, src.path)
		if err != nil {
			return err
		}
		defer rc.Close()
		if err := extractTar(rc, target, cp.warn); err != nil {
			return err
		}
		if mode, ok := parseMode(info.Mode); ok {
			if err := os.Chmod(target, mode); err != nil {
				return fmt.Errorf("setting the mode of %s: %w", target, err)
			}
		}
		return nil
	}

	rc, err := cp.cl.ReadFile(cp.ctx, src.id, src.path)
	if err != nil {
		return err
	}
	defer rc.Close()
	if local == "-" {
		_, err := io.Copy(cp.stdout, rc)
		return err
	}
	target := local
	if fi, err := os.Stat(local); (err == nil && fi.IsDir()) || strings.HasSuffix(local, string(filepath.Separator)) {
		target = filepath.Join(local, path.Base(path.Clean(src.path)))
	}
	mode, ok := parseMode(info.Mode)
	if !ok {
		mode = 0o644
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", target, err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return fmt.Errorf("copying %s:%s to %s: %w", src.id, src.path, target, err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("setting the mode of %s: %w", target, err)
	}
	return f.Close()
}

// parseMode reads the API's octal permission bits ("0644"); set-id and
// sticky bits are dropped.
func parseMode(s string) (os.FileMode, bool) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return 0, false
	}
	return os.FileMode(m).Perm(), true
}
