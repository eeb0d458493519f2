package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"golang.org/x/sys/unix"
)

const (
	templateMeta  = "template.json"
	stagingPrefix = ".tmp-"
)

// ImportTemplate imports req.Image with ImportImage, or copies the root
// filesystem directory req.Rootfs (on this
// host, owned by host uids 0..UIDCount-1) into a new read-only version of
// template req.Name, numbered one past its newest, and returns it. See
// treeCopier for what is kept of the tree.
func (p *Pool) ImportTemplate(ctx context.Context, req api.ImportTemplateRequest) (*Template, error) {
	if _, err := principal(ctx); err != nil {
		return nil, err
	}
	if req.Image != "" {
		if req.Rootfs != "" {
			return nil, errdefs.Invalid("send either rootfs or image, not both")
		}
		return p.ImportImage(ctx, req)
	}
	if err := ValidTemplateName(req.Name); err != nil {
		return nil, err
	}
	if req.Rootfs == "" || !filepath.IsAbs(req.Rootfs) {
		return nil, errdefs.Invalid("rootfs must be an absolute directory path on the daemon's host, got %q", req.Rootfs)
	}
	if fi, err := os.Stat(req.Rootfs); err != nil || !fi.IsDir() {
		return nil, errdefs.Invalid("rootfs %s is not a directory on the daemon's host", req.Rootfs)
	}
	if req.Workdir != "" && !filepath.IsAbs(req.Workdir) {
		return nil, errdefs.Invalid("workdir must be an absolute path inside the template, got %q", req.Workdir)
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, errdefs.Invalid("env name %q is not valid", k)
		}
	}
	start := time.Now()
	if req.MemoryMB < 0 {
		return nil, errdefs.Invalid("memory_mb must be positive (or 0 for the daemon's default), got %d", req.MemoryMB)
	}
	if err := checkUserLimits(req.UserLimits); err != nil {
		return nil, err
	}
	t := &Template{User: req.User, Workdir: req.Workdir, Env: req.Env, Source: "rootfs " + req.Rootfs, MemoryMB: req.MemoryMB, UserLimits: req.UserLimits}
	skipped := 0
	t, err := p.buildTemplate(ctx, req.Name, t, func(rootfs string) (int64, error) {
		c := newTreeCopier(ctx, p.uidBase, p.uidCount)
		if err := c.copyTree(req.Rootfs, rootfs); err != nil {
			return 0, fmt.Errorf("importing template %s from %s: %w", req.Name, req.Rootfs, err)
		}
		skipped = c.skipped
		return c.size, nil
	})
	if err != nil {
		return nil, err
	}
	p.log.Info("imported template", "template", t.Name, "version", t.Version,
		"size_bytes", t.SizeBytes, "skipped_special_files", skipped, "took", time.Since(start).Round(time.Millisecond))
	return t, nil
}

// buildTemplate makes the next version of template name from t's defaults
// and a root filesystem that fill writes at the path it is given (which
// does not exist yet), returning its size. fill works in a staging
// subvolume that is destroyed if anything fails, so a version number only
// ever names a whole template. The pool lock is held only to number and
// publish the version, not while fill runs.
func (p *Pool) buildTemplate(ctx context.Context, name string, t *Template, fill func(rootfs string) (int64, error)) (*Template, error) {
	if err := p.CheckNewVersion(ctx, name); err != nil {
		return nil, err
	}
	nameDir := filepath.Join(p.templatesDir(), name)
	if err := os.MkdirAll(nameDir, 0o711); err != nil {
		return nil, fmt.Errorf("importing template %s: %w", name, err)
	}
	staging := filepath.Join(nameDir, stagingPrefix+randHex())
	if err := subvolCreate(staging); err != nil {
		if !errors.Is(err, unix.ENOTTY) {
			return nil, fmt.Errorf("importing template %s: %w", name, err)
		}
		if out, cerr := runCmd(ctx, "btrfs", "subvolume", "create", staging); cerr != nil {
			return nil, fmt.Errorf("importing template %s: %w: %s", name, cerr, out)
		}
	}
	ok := false
	defer func() {
		if !ok {
			if err := subvolDestroy(staging); err != nil {
				p.log.Warn("removing half-imported template", "path", staging, "err", err)
			}
		}
	}()
	if err := os.Chmod(staging, 0o711); err != nil {
		return nil, err
	}
	size, err := fill(filepath.Join(staging, "rootfs"))
	if err != nil {
		return nil, err
	}
	// A template must be whole once it has a version number.
	if fd, err := openDir(staging); err == nil {
		err = unix.Syncfs(fd)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("importing template %s: syncfs: %w", name, err)
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	// The version belongs to its name's owner, or to whoever the
	// request acts for when the name is new (owner.go).
	owner, err := p.newVersionOwner(ctx, name)
	if err != nil {
		return nil, err
	}
	versions, err := p.versions(name)
	if err != nil {
		return nil, err
	}
	next := 1
	if len(versions) > 0 {
		next = versions[len(versions)-1] + 1
	}
	t.Name = name
	t.Version = strconv.Itoa(next)
	t.SizeBytes = size
	t.CreatedAt = time.Now().UTC().Truncate(time.Millisecond)
	t.UIDBase = p.uidBase
	t.Tenant = owner
	meta, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileSync(filepath.Join(staging, templateMeta), append(meta, '\n')); err != nil {
		return nil, fmt.Errorf("importing template %s: %w", name, err)
	}
	if err := subvolSetReadOnly(staging, true); err != nil {
		if !errors.Is(err, unix.ENOTTY) {
			return nil, fmt.Errorf("importing template %s: %w", name, err)
		}
		if out, cerr := runCmd(ctx, "btrfs", "property", "set", "-ts", staging, "ro", "true"); cerr != nil {
			return nil, fmt.Errorf("importing template %s: %w: %s", name, cerr, out)
		}
	}
	final := filepath.Join(nameDir, t.Version)
	if err := os.Rename(staging, final); err != nil {
		return nil, fmt.Errorf("importing template %s: %w", name, err)
	}
	ok = true
	t.Rootfs = filepath.Join(final, "rootfs")
	// Its inode floor now, so that the first sandbox does not wait for it
	// (inofloor_linux.go); a failure here is retried, and reported, there.
	if _, _, err := p.floor(ctx, final); err != nil {
		p.log.Warn("making the inode floor of a new template", "template", name, "version", t.Version, "err", err)
	}
	return t, nil
}

// Template returns the newest version of template name.
func (p *Pool) Template(name string) (*Template, error) {
	if err := ValidTemplateName(name); err != nil {
		return nil, err
	}
	versions, err := p.versions(name)
	if err != nil {
		return nil, err
	}
	if len(versions) == 0 {
		return nil, templateNotFound(name)
	}
	return p.load(name, strconv.Itoa(versions[len(versions)-1]))
}

// TemplateVersion returns one version of template name.
func (p *Pool) TemplateVersion(name, version string) (*Template, error) {
	if err := ValidTemplateName(name); err != nil {
		return nil, err
	}
	if n, err := strconv.Atoi(version); err != nil || n < 1 || strconv.Itoa(n) != version {
		return nil, errdefs.Invalid("template version must be a positive number like 1 or 2, got %q", version)
	}
	t, err := p.load(name, version)
	if errors.Is(err, errdefs.ErrNotFound) {
		if _, lerr := p.Template(name); lerr != nil {
			return nil, lerr
		}
		return nil, errdefs.NotFound("template %q has no version %s; list its versions with agentbox template ls", name, version)
	}
	return t, err
}

// TemplateVersions returns every version of template name, oldest first.
func (p *Pool) TemplateVersions(name string) ([]*Template, error) {
	if err := ValidTemplateName(name); err != nil {
		return nil, err
	}
	versions, err := p.versions(name)
	if err != nil {
		return nil, err
	}
	if len(versions) == 0 {
		return nil, templateNotFound(name)
	}
	out := make([]*Template, 0, len(versions))
	for _, v := range versions {
		t, err := p.load(name, strconv.Itoa(v))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// ListTemplates returns the newest version of every template, by name.
func (p *Pool) ListTemplates() ([]*Template, error) {
	ents, err := os.ReadDir(p.templatesDir())
	if err != nil {
		return nil, fmt.Errorf("listing templates: %w", err)
	}
	var out []*Template
	for _, e := range ents {
		if !e.IsDir() || !templateNameRe.MatchString(e.Name()) {
			continue
		}
		t, err := p.Template(e.Name())
		if errors.Is(err, errdefs.ErrNotFound) {
			continue // only a failed import's leftovers
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// RemoveTemplate deletes one version of a template. Sandboxes still
// running on it keep their mounts; new ones can no longer use it.
func (p *Pool) RemoveTemplate(ctx context.Context, name, version string) error {
	t, err := p.TemplateVersion(name, version)
	if err != nil {
		return err
	}
	if deps, err := p.TemplateDependents(name, version); err != nil {
		return err
	} else if len(deps) > 0 {
		return errdefs.Precondition("template %s version %s is the base of built template %s: remove those first", name, version, strings.Join(deps, ", "))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	dir := filepath.Dir(t.Rootfs)
	subID, idErr := subvolID(dir)
	if err := subvolDestroy(dir); err != nil {
		return fmt.Errorf("removing template %s version %s: %w", name, version, err)
	}
	if idErr == nil {
		_ = qgroupDestroy(p.root, subID) // see RemoveLayer
		p.removeFloor(subID)
	}
	_ = os.Remove(p.pushedFile(name, version))
	return nil
}

// versions returns the version numbers of template name, ascending.
func (p *Pool) versions(name string) ([]int, error) {
	ents, err := os.ReadDir(filepath.Join(p.templatesDir(), name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing versions of template %s: %w", name, err)
	}
	var vs []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err == nil && n > 0 && e.IsDir() && strconv.Itoa(n) == e.Name() {
			vs = append(vs, n)
		}
	}
	sort.Ints(vs)
	return vs, nil
}

func (p *Pool) load(name, version string) (*Template, error) {
	dir := filepath.Join(p.templatesDir(), name, version)
	b, err := os.ReadFile(filepath.Join(dir, templateMeta))
	if errors.Is(err, os.ErrNotExist) {
		return nil, templateNotFound(name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading template %s version %s: %w", name, version, err)
	}
	var t Template
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("reading template %s version %s: %w", name, version, err)
	}
	t.Name, t.Version = name, version
	t.Rootfs = filepath.Join(dir, "rootfs")
	t.Pushed = readPushed(p.pushedFile(name, version))
	if err := p.resolveLowers(&t, 0); err != nil {
		return nil, err
	}
	return &t, nil
}

// removeStaging deletes what interrupted imports left.
func (p *Pool) removeStaging() {
	names, _ := os.ReadDir(p.templatesDir())
	for _, n := range names {
		dir := filepath.Join(p.templatesDir(), n.Name())
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), stagingPrefix) {
				continue
			}
			path := filepath.Join(dir, e.Name())
			if err := subvolDestroy(path); err != nil {
				p.log.Warn("removing leftover of an interrupted template import", "path", path, "err", err)
			} else {
				p.log.Info("removed leftover of an interrupted template import", "path", path)
			}
		}
	}
}

func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
