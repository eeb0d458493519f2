// Package console is the web console: a browser app the daemon serves at
// /console (docs/console.md). Its files are embedded in the binary and
// served without a key; the app itself is only a client of the HTTP API:
// every call it makes carries the API key the user signed in with (kept in
// the tab's sessionStorage), so it can do exactly what that key can do
// through the API, and nothing else.
//
// static/ holds the app (committed). assets/xterm/ holds xterm.js, which
// scripts/console-assets.sh copies there from npm's package (pinned by
// web/package-lock.json) during `make build`; it is not committed, and a
// binary built without it serves a console whose terminal says how to get
// it.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var staticFS embed.FS

// assets/README.md is committed, so the pattern always matches even
// before the build step ran.
//
//go:embed assets
var assetsFS embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console"

// CSP is the Content-Security-Policy of every console response: scripts
// only from the console's own files (no inline script, no eval), calls
// only to the daemon itself (its API and the PTY WebSocket), nothing
// framed or framing. Styles allow inline because xterm.js sizes its
// rows with <style> elements it creates; scripts do not.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"connect-src 'self'; img-src 'self' data: blob:; font-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Match says whether r is for the console.
func Match(r *http.Request) bool {
	return r.URL.Path == Prefix || strings.HasPrefix(r.URL.Path, Prefix+"/")
}

// Handler serves the console's files, xterm.js from what the build step
// copied in.
func Handler() http.Handler {
	xterm, _ := fs.Sub(assetsFS, "assets/xterm")
	return NewHandler(xterm)
}

// NewHandler serves the console's files with xterm.js's from the given
// file system (a test gives an empty one: a build without them).
func NewHandler(xterm fs.FS) http.Handler {
	static, _ := fs.Sub(staticFS, "static")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the console's files are read-only", http.StatusMethodNotAllowed)
			return
		}
		rest := strings.TrimPrefix(r.URL.Path, Prefix)
		switch {
		case rest == "":
			http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
		case rest == "/":
			serveFile(w, r, static, "index.html")
		case strings.HasPrefix(rest, "/xterm/"):
			serveFile(w, r, xterm, strings.TrimPrefix(rest, "/xterm/"))
		default:
			serveFile(w, r, static, strings.TrimPrefix(rest, "/"))
		}
	})
}

// serveFile serves name from fsys with its content type, or 404.
func serveFile(w http.ResponseWriter, r *http.Request, fsys fs.FS, name string) {
	if !fs.ValidPath(name) || strings.HasSuffix(name, ".map") {
		http.NotFound(w, r)
		return
	}
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	ct := "application/octet-stream"
	switch path.Ext(name) {
	case ".html":
		ct = "text/html; charset=utf-8"
	case ".js", ".mjs":
		ct = "text/javascript; charset=utf-8"
	case ".css":
		ct = "text/css; charset=utf-8"
	case ".svg":
		ct = "image/svg+xml"
	}
	w.Header().Set("Content-Type", ct)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}
