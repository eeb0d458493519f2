package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// Every path below is a path inside the sandbox, resolved there by the
// guest agent.

func pathQuery(path string) (url.Values, error) {
	if path == "" {
		return nil, errdefs.Invalid("a path inside the sandbox is required")
	}
	return url.Values{"path": {path}}, nil
}

// WriteFile writes r to path (creating parent directories) with the given
// permission bits (0 means the guest's default, 0644).
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, mode os.FileMode) (*api.FileInfo, error) {
	return c.WriteFileAs(ctx, id, path, "", r, mode)
}

// WriteFileAs is WriteFile with the file, and the parent directories it
// creates, owned by user (a name or uid of the sandbox; "" for the
// template's user). A user the sandbox does not know is an error.
func (c *Client) WriteFileAs(ctx context.Context, id, path, user string, r io.Reader, mode os.FileMode) (*api.FileInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	q, err := pathQuery(path)
	if err != nil {
		return nil, err
	}
	if mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", mode.Perm()))
	}
	if user != "" {
		q.Set("user", user)
	}
	var info api.FileInfo
	if err := c.doStream(ctx, "PUT", sandboxPath(id, "/files"), q, r, "application/octet-stream", &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ReadFile opens a regular file for reading. The caller closes it.
func (c *Client) ReadFile(ctx context.Context, id, path string) (io.ReadCloser, error) {
	return c.openStream(ctx, id, "/files", path)
}

// ListFiles lists a directory, descending depth levels (1: its entries).
func (c *Client) ListFiles(ctx context.Context, id, path string, depth int) ([]api.FileInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	q, err := pathQuery(path)
	if err != nil {
		return nil, err
	}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out api.ListFilesResponse
	if err := c.doJSON(ctx, "GET", sandboxPath(id, "/files/list"), q, nil, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}

// Stat describes one file without following a final symlink.
func (c *Client) Stat(ctx context.Context, id, path string) (*api.FileInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	q, err := pathQuery(path)
	if err != nil {
		return nil, err
	}
	var info api.FileInfo
	if err := c.doJSON(ctx, "GET", sandboxPath(id, "/files/stat"), q, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Mkdir creates a directory and its parents (mkdir -p) with the given
// permission bits (0 means 0755).
func (c *Client) Mkdir(ctx context.Context, id, path string, mode os.FileMode) (*api.FileInfo, error) {
	return c.MkdirAs(ctx, id, path, "", mode)
}

// MkdirAs is Mkdir with the directories it creates owned by user (a name
// or uid of the sandbox; "" for the template's user).
func (c *Client) MkdirAs(ctx context.Context, id, path, user string, mode os.FileMode) (*api.FileInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errdefs.Invalid("a path inside the sandbox is required")
	}
	req := api.MkdirRequest{Path: path, User: user}
	if mode != 0 {
		req.Mode = fmt.Sprintf("%04o", mode.Perm())
	}
	var info api.FileInfo
	if err := c.doJSON(ctx, "POST", sandboxPath(id, "/files/mkdir"), nil, req, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Remove removes a file or an empty directory; with recursive, a whole tree.
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	if err := checkID(id); err != nil {
		return err
	}
	q, err := pathQuery(path)
	if err != nil {
		return err
	}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.doJSON(ctx, "DELETE", sandboxPath(id, "/files"), q, nil, nil)
}

// Rename moves a file or directory inside the sandbox.
func (c *Client) Rename(ctx context.Context, id, from, to string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if from == "" || to == "" {
		return errdefs.Invalid("rename wants both a source and a destination path")
	}
	return c.doJSON(ctx, "POST", sandboxPath(id, "/files/rename"), nil, api.RenameRequest{From: from, To: to}, nil)
}

// UploadArchive extracts the tar stream r under dir inside the sandbox.
func (c *Client) UploadArchive(ctx context.Context, id, dir string, r io.Reader) error {
	if err := checkID(id); err != nil {
		return err
	}
	q, err := pathQuery(dir)
	if err != nil {
		return err
	}
	return c.doStream(ctx, "PUT", sandboxPath(id, "/files/archive"), q, r, "application/x-tar", nil)
}

// DownloadArchive returns a tar stream of path (a file or a directory). The
// caller closes it.
func (c *Client) DownloadArchive(ctx context.Context, id, path string) (io.ReadCloser, error) {
	return c.openStream(ctx, id, "/files/archive", path)
}

// openStream GETs a route that answers raw bytes and hands over the body.
func (c *Client) openStream(ctx context.Context, id, route, path string) (io.ReadCloser, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	q, err := pathQuery(path)
	if err != nil {
		return nil, err
	}
	req, err := c.newRequest(ctx, "GET", sandboxPath(id, route), q, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "*/*")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// doStream sends body as-is and decodes a JSON answer into out (if not nil).
func (c *Client) doStream(ctx context.Context, method, path string, q url.Values, body io.Reader, contentType string, out any) error {
	if body == nil {
		body = http.NoBody
	}
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := decodeJSON(resp.Body, out); err != nil {
		return &errdefs.Error{Class: errdefs.ErrInternal, Message: fmt.Sprintf("decoding the answer to %s %s: %v", method, path, err)}
	}
	return nil
}
