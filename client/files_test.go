package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// recorded is what the fake daemon saw of one request.
type recorded struct {
	Method, Path, Query, Body, ContentType string
}

// recorder answers every request with answer and records it.
func recorder(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*Client, *recorded) {
	t.Helper()
	var got recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = recorded{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, string(b), r.Header.Get("Content-Type")}
		if answer != nil {
			answer(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(WithoutEnvironment(), WithHost(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	return c, &got
}

func jsonAnswer(v any) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(v) }
}

func TestRequestsOnTheWire(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		answer any
		call   func(c *Client) error
		want   recorded
	}{
		{"create", api.Sandbox{ID: "sb"}, func(c *Client) error {
			_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "py", MemoryMB: 512})
			return err
		}, recorded{"POST", "/v1/sandboxes", "", `{"template":"py","memory_mb":512}` + "\n", "application/json"}},
		{"list", api.ListSandboxesResponse{}, func(c *Client) error {
			_, err := c.ListSandboxes(ctx, ListOptions{State: "running", Metadata: map[string]string{"b": "2", "a": "x y"}})
			return err
		}, recorded{"GET", "/v1/sandboxes", "metadata.a=x+y&metadata.b=2&state=running", "", ""}},
		{"ttl", api.Sandbox{}, func(c *Client) error {
			_, err := c.SetTTL(ctx, "sb", 90*time.Second+time.Millisecond)
			return err
		}, recorded{"PATCH", "/v1/sandboxes/sb", "", `{"ttl_seconds":91}`, "application/json"}},
		{"no ttl", api.Sandbox{}, func(c *Client) error {
			_, err := c.SetTTL(ctx, "sb", NoTTL)
			return err
		}, recorded{"PATCH", "/v1/sandboxes/sb", "", `{"ttl_seconds":-1}`, "application/json"}},
		{"destroy", nil, func(c *Client) error {
			return c.DestroySandbox(ctx, "a/b")
		}, recorded{"DELETE", "/v1/sandboxes/a%2Fb", "", "", ""}},
		{"write", api.FileInfo{}, func(c *Client) error {
			_, err := c.WriteFile(ctx, "sb", "/tmp/a b", strings.NewReader("data"), 0o755)
			return err
		}, recorded{"PUT", "/v1/sandboxes/sb/files", "mode=0755&path=%2Ftmp%2Fa+b", "data", "application/octet-stream"}},
		{"list files", api.ListFilesResponse{}, func(c *Client) error {
			_, err := c.ListFiles(ctx, "sb", "/", 2)
			return err
		}, recorded{"GET", "/v1/sandboxes/sb/files/list", "depth=2&path=%2F", "", ""}},
		{"stat", api.FileInfo{}, func(c *Client) error {
			_, err := c.Stat(ctx, "sb", "/etc")
			return err
		}, recorded{"GET", "/v1/sandboxes/sb/files/stat", "path=%2Fetc", "", ""}},
		{"mkdir", api.FileInfo{}, func(c *Client) error {
			_, err := c.Mkdir(ctx, "sb", "/w", 0o700)
			return err
		}, recorded{"POST", "/v1/sandboxes/sb/files/mkdir", "", `{"path":"/w","mode":"0700"}` + "\n", "application/json"}},
		{"remove", nil, func(c *Client) error {
			return c.Remove(ctx, "sb", "/w", true)
		}, recorded{"DELETE", "/v1/sandboxes/sb/files", "path=%2Fw&recursive=true", "", ""}},
		{"rename", nil, func(c *Client) error {
			return c.Rename(ctx, "sb", "/a", "/b")
		}, recorded{"POST", "/v1/sandboxes/sb/files/rename", "", `{"from":"/a","to":"/b"}` + "\n", "application/json"}},
		{"upload archive", nil, func(c *Client) error {
			return c.UploadArchive(ctx, "sb", "/dst", strings.NewReader("TAR"))
		}, recorded{"PUT", "/v1/sandboxes/sb/files/archive", "path=%2Fdst", "TAR", "application/x-tar"}},
		{"import template", api.Template{}, func(c *Client) error {
			_, err := c.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "t", Rootfs: "/r"})
			return err
		}, recorded{"POST", "/v1/templates", "", `{"name":"t","rootfs":"/r"}` + "\n", "application/json"}},
		{"get template", api.Template{}, func(c *Client) error {
			_, err := c.GetTemplate(ctx, "base")
			return err
		}, recorded{"GET", "/v1/templates/base", "", "", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var answer func(http.ResponseWriter, *http.Request)
			if tt.answer != nil {
				answer = jsonAnswer(tt.answer)
			} else {
				answer = func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }
			}
			c, got := recorder(t, answer)
			if err := tt.call(c); err != nil {
				t.Fatal(err)
			}
			want := tt.want
			got.Body = strings.TrimSuffix(got.Body, "\n")
			want.Body = strings.TrimSuffix(want.Body, "\n")
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("request = %+v\nwant      %+v", *got, want)
			}
		})
	}
}

func TestReadStreams(t *testing.T) {
	c, got := recorder(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "contents of "+r.URL.Query().Get("path"))
	})
	for _, tt := range []struct {
		name  string
		open  func() (io.ReadCloser, error)
		route string
	}{
		{"read file", func() (io.ReadCloser, error) { return c.ReadFile(context.Background(), "sb", "/etc/hostname") }, "/v1/sandboxes/sb/files"},
		{"download archive", func() (io.ReadCloser, error) { return c.DownloadArchive(context.Background(), "sb", "/etc/hostname") }, "/v1/sandboxes/sb/files/archive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc, err := tt.open()
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if string(b) != "contents of /etc/hostname" || got.Path != tt.route {
				t.Errorf("got %q from %s", b, got.Path)
			}
		})
	}
}
