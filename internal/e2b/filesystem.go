package e2b

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// envd's filesystem.Filesystem service (spec §4.3) on agentbox's file
// routes.

// entryInfo is envd's EntryInfo in proto3 JSON (int64 as a string).
type entryInfo struct {
	Name          string  `json:"name"`
	Type          string  `json:"type"`
	Path          string  `json:"path"`
	Size          string  `json:"size"`
	Mode          uint32  `json:"mode"`
	Permissions   string  `json:"permissions"`
	Owner         string  `json:"owner"`
	Group         string  `json:"group"`
	ModifiedTime  string  `json:"modifiedTime,omitempty"`
	SymlinkTarget *string `json:"symlinkTarget,omitempty"`
}

// entryOf is envd's EntryInfo for an agentbox FileInfo. agentbox knows
// owners by id: the owner and group are the ids, except root's.
func entryOf(fi *api.FileInfo) entryInfo {
	perm, _ := strconv.ParseUint(fi.Mode, 8, 32)
	mode := os.FileMode(perm) & os.ModePerm
	e := entryInfo{Name: fi.Name, Path: fi.Path, Size: strconv.FormatInt(fi.Size, 10),
		Owner: idName(fi.UID), Group: idName(fi.GID)}
	switch fi.Type {
	case api.FileTypeDir:
		e.Type, mode = "FILE_TYPE_DIRECTORY", mode|os.ModeDir
	case api.FileTypeSymlink:
		e.Type, mode = "FILE_TYPE_SYMLINK", mode|os.ModeSymlink
		t := fi.Target
		e.SymlinkTarget = &t
	case api.FileTypeFile:
		e.Type = "FILE_TYPE_FILE"
	default:
		e.Type, mode = "FILE_TYPE_UNSPECIFIED", mode|os.ModeIrregular
	}
	e.Mode, e.Permissions = uint32(mode), mode.String()
	if !fi.ModTime.IsZero() {
		e.ModifiedTime = fi.ModTime.UTC().Format(time.RFC3339Nano)
	}
	if e.Name == "" {
		e.Name = path.Base(fi.Path)
	}
	return e
}

func idName(id int) string {
	if id == 0 {
		return "root"
	}
	return strconv.Itoa(id)
}

type pathRequest struct {
	Path string `json:"path"`
}

type entryResponse struct {
	Entry entryInfo `json:"entry"`
}

// unaryPath decodes a request that names one path and resolves it.
func (h *Handler) unaryPath(w http.ResponseWriter, r *http.Request, k *call, in any, p *string) bool {
	if e := readUnary(r, in); e != nil {
		writeConnectUnaryError(w, *e)
		return false
	}
	abs, err := h.resolve(r.Context(), k, *p)
	if err != nil {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return false
	}
	*p = abs
	return true
}

func (h *Handler) fsStat(w http.ResponseWriter, r *http.Request, k *call) {
	var in pathRequest
	if !h.unaryPath(w, r, k, &in, &in.Path) {
		return
	}
	fi, err := k.c.Stat(r.Context(), k.id, in.Path)
	if err != nil {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return
	}
	writeUnary(w, entryResponse{entryOf(fi)})
}

func (h *Handler) fsListDir(w http.ResponseWriter, r *http.Request, k *call) {
	var in struct {
		Path  string `json:"path"`
		Depth uint32 `json:"depth"`
	}
	if !h.unaryPath(w, r, k, &in, &in.Path) {
		return
	}
	depth := max(int(in.Depth), 1)
	fis, err := k.c.ListFiles(r.Context(), k.id, in.Path, depth)
	if err != nil {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return
	}
	out := struct {
		Entries []entryInfo `json:"entries"`
	}{Entries: make([]entryInfo, 0, len(fis))}
	for i := range fis {
		out.Entries = append(out.Entries, entryOf(&fis[i]))
	}
	writeUnary(w, out)
}

// fsMakeDir creates a directory and its parents; one that exists is
// already_exists, which the SDK's makeDir answers as false.
func (h *Handler) fsMakeDir(w http.ResponseWriter, r *http.Request, k *call) {
	var in pathRequest
	if !h.unaryPath(w, r, k, &in, &in.Path) {
		return
	}
	if _, err := k.c.Stat(r.Context(), k.id, in.Path); err == nil {
		writeConnectUnaryError(w, connectError{Code: "already_exists", Message: in.Path + " already exists"})
		return
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return
	}
	fi, err := k.c.MkdirAs(r.Context(), k.id, in.Path, k.user, 0)
	if err != nil {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return
	}
	writeUnary(w, entryResponse{entryOf(fi)})
}

func (h *Handler) fsMove(w http.ResponseWriter, r *http.Request, k *call) {
	var in struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}
	if !h.unaryPath(w, r, k, &in, &in.Source) {
		return
	}
	dst, err := h.resolve(r.Context(), k, in.Destination)
	if err == nil {
		err = k.c.Rename(r.Context(), k.id, in.Source, dst)
	}
	if err != nil {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return
	}
	fi, err := k.c.Stat(r.Context(), k.id, dst)
	if err != nil {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return
	}
	writeUnary(w, entryResponse{entryOf(fi)})
}

// fsRemove removes a file or a whole tree; like envd's (os.RemoveAll), a
// path that does not exist is no error.
func (h *Handler) fsRemove(w http.ResponseWriter, r *http.Request, k *call) {
	var in pathRequest
	if !h.unaryPath(w, r, k, &in, &in.Path) {
		return
	}
	if err := k.c.Remove(r.Context(), k.id, in.Path, true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return
	}
	writeUnary(w, struct{}{})
}

type watchResponse struct {
	Start      *struct{}        `json:"start,omitempty"`
	Filesystem *filesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *struct{}        `json:"keepalive,omitempty"`
}

type filesystemEvent struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

var watchTypes = map[string]string{
	api.WatchCreate: "EVENT_TYPE_CREATE",
	api.WatchWrite:  "EVENT_TYPE_WRITE",
	api.WatchRemove: "EVENT_TYPE_REMOVE",
	api.WatchRename: "EVENT_TYPE_RENAME",
}

// fsWatchDir streams a directory's changes: start first, then one event
// per change with its path relative to the directory, until the call's
// deadline or the client leaves.
func (h *Handler) fsWatchDir(w http.ResponseWriter, r *http.Request, k *call) {
	var in struct {
		Path      string `json:"path"`
		Recursive bool   `json:"recursive"`
	}
	if e := readStreamRequest(r, &in); e != nil {
		newStream(w).end(e)
		return
	}
	s := newStream(w)
	dir, err := h.resolve(r.Context(), k, in.Path)
	if err != nil {
		s.end(h.rpcError(r, k, err))
		return
	}
	ctx := r.Context()
	if ms := timeoutOf(r); ms > 0 {
		var cancel func()
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
		defer cancel()
	}
	stop := make(chan struct{})
	var done <-chan struct{}
	ready := func() {
		if s.send(watchResponse{Start: &struct{}{}}) == nil {
			done = s.keepalive(r, watchResponse{Keepalive: &struct{}{}}, stop)
		}
	}
	err = k.c.WatchFiles(ctx, k.id, dir, in.Recursive, ready, func(ev api.WatchEvent) error {
		t, ok := watchTypes[ev.Type]
		if !ok {
			return nil
		}
		name := strings.TrimPrefix(strings.TrimPrefix(ev.Path, dir), "/")
		return s.send(watchResponse{Filesystem: &filesystemEvent{Name: name, Type: t}})
	})
	close(stop)
	if done != nil {
		<-done
	}
	switch {
	case r.Context().Err() != nil:
	case ctx.Err() != nil:
		s.end(&connectError{Code: "deadline_exceeded", Message: "the watch reached its timeout"})
	case err != nil:
		s.end(h.rpcError(r, k, err))
	default:
		s.end(nil)
	}
}
