package e2b

import (
	"compress/gzip"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"

	"github.com/agentbox/agentbox/errdefs"
)

// envd's /files (spec §4.5): download with GET, upload with POST as
// multipart (one part per file, the full path in its filename) or as a
// raw, possibly gzipped, body.

// writtenFile is one entry of an upload's answer.
type writtenFile struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func (h *Handler) download(w http.ResponseWriter, r *http.Request, k *call) {
	p, err := h.resolve(r.Context(), k, r.URL.Query().Get("path"))
	if err != nil {
		h.writeEnvdError(w, r, k, err)
		return
	}
	body, err := k.c.ReadFile(r.Context(), k.id, p)
	if err != nil {
		h.writeEnvdError(w, r, k, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(p)}))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, body)
}

func (h *Handler) upload(w http.ResponseWriter, r *http.Request, k *call) {
	query := r.URL.Query().Get("path")
	var out []writtenFile
	write := func(p string, body io.Reader) error {
		abs, err := h.resolve(r.Context(), k, p)
		if err != nil {
			return err
		}
		fi, err := k.c.WriteFileAs(r.Context(), k.id, abs, k.user, body, 0)
		if err != nil {
			return err
		}
		out = append(out, writtenFile{Name: path.Base(fi.Path), Type: "file", Path: fi.Path})
		return nil
	}
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	body, err := decodedBody(r)
	if err == nil {
		defer body.Close()
		if ct == "multipart/form-data" {
			err = h.uploadParts(multipart.NewReader(body, params["boundary"]), query, write)
		} else if query == "" {
			err = errdefs.Invalid("a raw upload needs ?path=")
		} else {
			err = write(query, body)
		}
	}
	if err != nil {
		h.writeEnvdError(w, r, k, err)
		return
	}
	if len(out) == 0 {
		writeError(w, http.StatusBadRequest, "the upload holds no file: send multipart parts named \"file\" or a raw body with ?path=")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// uploadParts writes every part named "file". Its destination is the
// query's path if given, else the part's filename, taken whole: the SDKs
// put the full path there, which multipart.Part.FileName would cut to its
// base.
func (h *Handler) uploadParts(mr *multipart.Reader, query string, write func(string, io.Reader) error) error {
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errdefs.Invalid("reading the multipart upload: %v", err)
		}
		_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		if params["name"] != "file" {
			part.Close()
			continue
		}
		p := query
		if p == "" {
			p = params["filename"]
		}
		if p == "" {
			return errdefs.Invalid("a file part has no filename and the request no ?path=")
		}
		if err := write(p, part); err != nil {
			return err
		}
		part.Close()
	}
}

// decodedBody is r's body, gunzipped when its Content-Encoding is gzip
// (the SDKs' files.write(..., {gzip: true})); like envd, any upload may
// be gzipped, multipart or raw.
func decodedBody(r *http.Request) (io.ReadCloser, error) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return r.Body, nil
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, errdefs.Invalid("the body is not gzip: %v", err)
		}
		return zr, nil
	default:
		return nil, errdefs.Invalid("Content-Encoding %q is not supported; send gzip or none", enc)
	}
}
