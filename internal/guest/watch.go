package guest

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// File watch: GET /files/watch streams inotify events for a directory (or
// a file), optionally for its whole tree: a recursive watch adds a watch
// for every directory, and for every new one as it appears.

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// watcher is one inotify instance and its watch descriptors.
type watcher struct {
	f         *os.File
	fd        int
	recursive bool
	paths     map[int]string // wd -> directory path
}

func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path := q.Get("path")
	switch {
	case path == "" || !filepath.IsAbs(path):
		s.writeError(w, errdefs.Invalid("path must be an absolute path, got %q", path))
		return
	case strings.IndexByte(path, 0) >= 0:
		s.writeError(w, errdefs.Invalid("path contains a NUL byte; remove it"))
		return
	}
	path = filepath.Clean(path)
	if path == "/proc" || strings.HasPrefix(path, "/proc/") || path == "/sys" || strings.HasPrefix(path, "/sys/") {
		s.writeError(w, errdefs.Invalid("watching %s is not supported; watch a directory of files", path))
		return
	}
	wa, err := newWatcher(path, q.Get("recursive") == "true")
	if err != nil {
		s.writeError(w, err)
		return
	}
	defer wa.f.Close()

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	send := func(ev api.WatchEvent) bool {
		return enc.Encode(ev) == nil && rc.Flush() == nil
	}
	if !send(api.WatchEvent{Type: api.WatchKeepalive, Time: time.Now().UTC()}) {
		return // the first line tells the client the watch is in place
	}
	evs := make(chan []api.WatchEvent, 16)
	stop := make(chan struct{})
	defer close(stop)
	go wa.read(evs, stop) // ends when wa.f is closed or stop
	keepalive := time.NewTicker(s.keepalive)
	defer keepalive.Stop()
	for {
		select {
		case batch, ok := <-evs:
			if !ok {
				return
			}
			for _, ev := range batch {
				if !send(ev) {
					return
				}
			}
		case <-keepalive.C:
			if !send(api.WatchEvent{Type: api.WatchKeepalive, Time: time.Now().UTC()}) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

func newWatcher(path string, recursive bool) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		if errors.Is(err, unix.EMFILE) {
			return nil, errdefs.Exhausted("too many inotify instances (fs.inotify.max_user_instances); close other watches first, or create the sandbox with a higher user_limits.inotify_instances")
		}
		return nil, errdefs.Unavailable("starting inotify: %v", err)
	}
	wa := &watcher{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, recursive: recursive, paths: map[int]string{}}
	if err := wa.add(path); err != nil {
		wa.f.Close()
		return nil, err
	}
	if recursive {
		if err := wa.addTree(path); err != nil {
			wa.f.Close()
			return nil, err
		}
	}
	return wa, nil
}

// add watches one path.
func (wa *watcher) add(path string) error {
	wd, err := unix.InotifyAddWatch(wa.fd, path, watchMask|unix.IN_DONT_FOLLOW)
	switch {
	case err == nil:
		wa.paths[wd] = path
		return nil
	case errors.Is(err, unix.ENOSPC):
		return errdefs.Exhausted("inotify watch limit reached (fs.inotify.max_user_watches) at %s; watch a smaller tree, or create the sandbox with a higher user_limits.inotify_watches", path)
	case errors.Is(err, unix.ENOENT):
		return errdefs.NotFound("%s does not exist", path)
	case errors.Is(err, unix.EACCES):
		return errdefs.New(errdefs.ErrPermissionDenied, "%s may not be watched: %v", path, err)
	}
	return errdefs.Invalid("watching %s: %v", path, err)
}

// addTree watches every directory below root.
func (wa *watcher) addTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root || !d.IsDir() {
			return nil // unreadable or vanished entries are skipped
		}
		if err := wa.add(p); err != nil && errors.Is(err, errdefs.ErrResourceExhausted) {
			return err
		}
		return nil
	})
}

// read turns inotify records into events, one batch per read, until the
// file is closed or stop closes; then it closes evs.
func (wa *watcher) read(evs chan<- []api.WatchEvent, stop <-chan struct{}) {
	defer close(evs)
	buf := make([]byte, 64<<10)
	for {
		n, err := wa.f.Read(buf)
		if err != nil {
			return
		}
		now := time.Now().UTC()
		var batch []api.WatchEvent
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(raw.Len)]
			off += unix.SizeofInotifyEvent + int(raw.Len)
			name := strings.TrimRight(string(nameBytes), "\x00")
			if raw.Mask&unix.IN_Q_OVERFLOW != 0 {
				batch = append(batch, api.WatchEvent{Type: api.WatchOverflow, Time: now})
				continue
			}
			dir, ok := wa.paths[int(raw.Wd)]
			if !ok {
				continue
			}
			if raw.Mask&unix.IN_IGNORED != 0 {
				delete(wa.paths, int(raw.Wd))
				continue
			}
			p := dir
			if name != "" {
				p = filepath.Join(dir, name)
			}
			isDir := raw.Mask&unix.IN_ISDIR != 0
			ev := api.WatchEvent{Path: p, Dir: isDir, Time: now}
			switch {
			case raw.Mask&unix.IN_CREATE != 0:
				ev.Type = api.WatchCreate
				if isDir && wa.recursive {
					// Best effort: a full watch table shows as missing
					// events below that directory.
					if wa.add(p) == nil {
						wa.addTree(p)
					}
				}
			case raw.Mask&unix.IN_MODIFY != 0:
				ev.Type = api.WatchWrite
			case raw.Mask&(unix.IN_DELETE|unix.IN_DELETE_SELF) != 0:
				ev.Type = api.WatchRemove
			case raw.Mask&(unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_MOVE_SELF) != 0:
				ev.Type = api.WatchRename
			default:
				continue
			}
			batch = append(batch, ev)
		}
		if len(batch) > 0 {
			select {
			case evs <- batch:
			case <-stop:
				return
			}
		}
	}
}
