package client

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

func TestParseHost(t *testing.T) {
	tests := []struct {
		in, base, socket string
		wantErr          bool
	}{
		{in: "unix:///run/agentbox/agentbox.sock", base: "http://agentbox", socket: "/run/agentbox/agentbox.sock"},
		{in: "http://127.0.0.1:7423", base: "http://127.0.0.1:7423"},
		{in: "http://127.0.0.1:7423/", base: "http://127.0.0.1:7423"},
		{in: "https://box.example.com", base: "https://box.example.com"},
		{in: "127.0.0.1:7423", base: "http://127.0.0.1:7423"},
		{in: "tcp://10.0.0.1:7423", base: "http://10.0.0.1:7423"},
		{in: "localhost:9000", base: "http://localhost:9000"},
		{in: "unix://relative.sock", wantErr: true},
		{in: "unix://", wantErr: true},
		{in: "ftp://x", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			base, socket, err := parseHost(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parseHost(%q) = %q, %q; want an error", tt.in, base, socket)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseHost(%q): %v", tt.in, err)
			}
			if base != tt.base || socket != tt.socket {
				t.Errorf("parseHost(%q) = %q, %q; want %q, %q", tt.in, base, socket, tt.base, tt.socket)
			}
		})
	}
}

// listenUnix starts srv on a real unix socket in a temporary directory.
func listenUnix(t *testing.T, h http.Handler) (path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "agentbox.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return path
}

// authEcho answers /v1/health with the bearer token as Status.
func authEcho() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.Health{Status: r.Header.Get("Authorization"), Version: "test"})
	})
	return mux
}

func TestUnixSocket(t *testing.T) {
	sock := listenUnix(t, authEcho())
	c, err := New(WithoutEnvironment(), WithHost("unix://"+sock), WithAPIKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Health(context.Background())
	if err != nil {
		t.Fatalf("Health over %s: %v", sock, err)
	}
	if h.Status != "Bearer k1" || h.Version != "test" {
		t.Errorf("got %+v, want status %q", h, "Bearer k1")
	}
}

func TestNewResolution(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local-default resolution applies to root only; run the tests as root")
	}
	sock := listenUnix(t, authEcho())
	keyFile := filepath.Join(t.TempDir(), "admin.key")
	if err := os.WriteFile(keyFile, []byte("adminkey\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tcp := httptest.NewServer(authEcho())
	t.Cleanup(tcp.Close)

	tests := []struct {
		name       string
		envHost    string
		envKey     string
		opts       []Option
		wantHost   string
		wantStatus string
	}{
		{name: "root defaults", opts: []Option{WithSocketPath(sock), WithAdminKeyPath(keyFile)},
			wantHost: "unix://" + sock, wantStatus: "Bearer adminkey"},
		{name: "env wins over defaults", envHost: tcp.URL, envKey: "envkey",
			opts:     []Option{WithSocketPath(sock), WithAdminKeyPath(keyFile)},
			wantHost: tcp.URL, wantStatus: "Bearer envkey"},
		{name: "bare host:port from env", envHost: strings.TrimPrefix(tcp.URL, "http://"),
			opts:     []Option{WithSocketPath(sock), WithAdminKeyPath(keyFile)},
			wantHost: strings.TrimPrefix(tcp.URL, "http://"), wantStatus: "Bearer adminkey"},
		{name: "options win over env", envHost: "127.0.0.1:1", envKey: "envkey",
			opts:     []Option{WithHost("unix://" + sock), WithAPIKey("optkey")},
			wantHost: "unix://" + sock, wantStatus: "Bearer optkey"},
		{name: "no socket, no key file", envHost: "",
			opts:     []Option{WithSocketPath(filepath.Join(t.TempDir(), "none.sock")), WithAdminKeyPath(filepath.Join(t.TempDir(), "none.key"))},
			wantHost: DefaultHTTPHost},
	}
	t.Run("admin key stays local", func(t *testing.T) {
		t.Setenv(EnvHost, "http://10.255.255.1:7423")
		setenvOrUnset(t, EnvAPIKey, "")
		c, err := New(WithAdminKeyPath(keyFile))
		if err != nil {
			t.Fatal(err)
		}
		if c.apiKey != "" {
			t.Errorf("the admin key was picked up for the remote host %s", c.Host())
		}
	})
	t.Run("empty key variable never means the admin key", func(t *testing.T) {
		t.Setenv(EnvHost, "")
		t.Setenv(EnvAPIKey, "")
		_, err := New(WithSocketPath(sock), WithAdminKeyPath(keyFile))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "AGENTBOX_API_KEY is set but empty") {
			t.Fatalf("New with AGENTBOX_API_KEY=\"\": %v, want an invalid-argument error naming the variable", err)
		}
		// WithAPIKey still wins over the empty variable.
		if _, err := New(WithSocketPath(sock), WithAdminKeyPath(keyFile), WithAPIKey("k")); err != nil {
			t.Fatal(err)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvHost, tt.envHost)
			setenvOrUnset(t, EnvAPIKey, tt.envKey)
			c, err := New(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if c.Host() != tt.wantHost {
				t.Fatalf("host = %q, want %q", c.Host(), tt.wantHost)
			}
			if tt.wantStatus == "" {
				return
			}
			h, err := c.Health(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if h.Status != tt.wantStatus {
				t.Errorf("Authorization = %q, want %q", h.Status, tt.wantStatus)
			}
		})
	}
}

func TestTypedErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("id") {
		case "missing":
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: errdefs.CodeNotFound, Message: `sandbox "missing" not found`}})
		case "busy":
			w.WriteHeader(http.StatusTooManyRequests)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: errdefs.CodeResourceExhausted, Message: "too many sandboxes"}})
		case "proxy":
			http.Error(w, "bad gateway from a proxy", http.StatusBadGateway)
		case "noauth":
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: errdefs.CodeUnauthenticated, Message: "missing API key"}})
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := New(WithoutEnvironment(), WithHost(srv.URL), WithAdminKeyPath(""))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id      string
		class   error
		message string
	}{
		{"missing", errdefs.ErrNotFound, `sandbox "missing" not found`},
		{"busy", errdefs.ErrResourceExhausted, "too many sandboxes"},
		{"proxy", errdefs.ErrUnavailable, "agentbox daemon answered 502: bad gateway from a proxy"},
		{"noauth", errdefs.ErrUnauthenticated, "missing API key (no API key is set: set AGENTBOX_API_KEY)"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			_, err := c.GetSandbox(context.Background(), tt.id)
			if !errors.Is(err, tt.class) {
				t.Fatalf("err = %v, want class %v", err, tt.class)
			}
			var e *errdefs.Error
			if !errors.As(err, &e) || e.Message != tt.message {
				t.Errorf("message = %q, want %q", err, tt.message)
			}
		})
	}

	t.Run("daemon down", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		c, err := New(WithoutEnvironment(), WithHost(addr))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Health(context.Background())
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "agentbox serve") {
			t.Errorf("err = %v, want unavailable with a hint", err)
		}
	})
}

// setenvOrUnset sets key to v for the test, or unsets it when v is empty.
func setenvOrUnset(t *testing.T, key, v string) {
	t.Helper()
	t.Setenv(key, v)
	if v == "" {
		os.Unsetenv(key)
	}
}
