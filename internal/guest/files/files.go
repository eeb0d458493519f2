// Package files serves the guest protocol's /files routes inside a sandbox:
// reading, writing, listing, stat, mkdir, rename, delete and tar archives
// of files, all streamed.
//
// Every path is resolved here, by the guest agent, inside the sandbox's own
// mount namespace, relative to a directory fd of the root (Options.Root,
// "/" in a sandbox) with openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS):
// symlinks are followed as if the root were "/", so a link to /etc/shadow
// reaches the sandbox's own /etc/shadow, and magic links (/proc/*/fd,
// /proc/*/root, /proc/*/exe, ...) are refused. Operations on the last
// component (stat, delete, rename) do not follow it. PUT /files follows a
// symlink in the last component, like cp, and writes in place (not
// atomically). Archive extraction never writes through a symlink that
// leaves the target directory.
package files

import (
	"log/slog"
	"net/http"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest/proto"
)

// Defaults for Options.
const (
	DefaultMaxArchiveBytes   = 10 << 30
	DefaultMaxArchiveEntries = 1_000_000
)

// Options configures the /files routes.
type Options struct {
	// DefaultUser owns files and directories created when a request names
	// no user ("" means root).
	DefaultUser string
	Logger      *slog.Logger
	// Root is the directory every path is resolved in; "/" (the default)
	// inside a sandbox, a temporary directory in tests.
	Root string
	// MaxArchiveBytes caps the total size of the files in one uploaded
	// archive (default 10 GiB); MaxArchiveEntries caps its entries
	// (default 1,000,000).
	MaxArchiveBytes   int64
	MaxArchiveEntries int
}

// service holds what every handler shares.
type service struct {
	opts Options
	log  *slog.Logger
	root *fsRoot
	// rootErr is set when Root could not be opened; every request then
	// answers it.
	rootErr error
}

// Register adds every /files route of the guest protocol to mux. Root is
// opened once, here; if that fails, every route answers the error.
func Register(mux *http.ServeMux, opts Options) {
	if opts.Root == "" {
		opts.Root = "/"
	}
	if opts.MaxArchiveBytes <= 0 {
		opts.MaxArchiveBytes = DefaultMaxArchiveBytes
	}
	if opts.MaxArchiveEntries <= 0 {
		opts.MaxArchiveEntries = DefaultMaxArchiveEntries
	}
	s := &service{opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.root, s.rootErr = openRoot(opts.Root)
	if s.rootErr != nil {
		s.log.Error("files: opening root", "root", opts.Root, "err", s.rootErr)
	}

	mux.HandleFunc(proto.FileGet.Pattern(), s.handle(s.getFile))
	mux.HandleFunc(proto.FilePut.Pattern(), s.handle(s.putFile))
	mux.HandleFunc(proto.FileDelete.Pattern(), s.handle(s.deleteFile))
	mux.HandleFunc(proto.FileStat.Pattern(), s.handle(s.stat))
	mux.HandleFunc(proto.FileList.Pattern(), s.handle(s.list))
	mux.HandleFunc(proto.FileMkdir.Pattern(), s.handle(s.mkdir))
	mux.HandleFunc(proto.FileRename.Pattern(), s.handle(s.rename))
	mux.HandleFunc(proto.ArchiveGet.Pattern(), s.handle(s.getArchive))
	mux.HandleFunc(proto.ArchivePut.Pattern(), s.handle(s.putArchive))
}

// handle adapts a handler that returns an error; the error is written as
// an api.ErrorBody unless the response has already started.
func (s *service) handle(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.rootErr != nil {
			writeError(w, s.rootErr)
			return
		}
		if err := h(w, r); err != nil {
			writeError(w, err)
		}
	}
}

// copyBufSize is the buffer of every streamed copy.
const copyBufSize = 256 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

func getBuf() *[]byte  { return bufPool.Get().(*[]byte) }
func putBuf(b *[]byte) { bufPool.Put(b) }

// closeFd closes fd, ignoring errors (it was only read or is an O_PATH fd).
func closeFd(fd int) { _ = unix.Close(fd) }
