package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTLSTrust(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"templates":[]}`))
	}))
	defer srv.Close()
	cert := srv.Certificate()
	sum := sha256.Sum256(cert.Raw)
	fp := hex.EncodeToString(sum[:])
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644)
	colons := strings.ToUpper(fp[:2]) + ":" + fp[2:]

	tests := []struct {
		name    string
		opts    []Option
		wantErr string
	}{
		{"system roots refuse it", nil, "certificate"},
		{"pinned", []Option{WithTLSFingerprint(fp)}, ""},
		{"pinned, upper case with a colon", []Option{WithTLSFingerprint(colons)}, ""},
		{"wrong pin", []Option{WithTLSFingerprint(strings.Repeat("ab", 32))}, "pins"},
		{"CA file", []Option{WithCAFile(caFile)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(append([]Option{WithHost(srv.URL), WithAPIKey("k"), WithoutEnvironment()}, tt.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.ListTemplates(context.Background())
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("ListTemplates = %v, want success", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("ListTemplates = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
	if _, err := New(WithHost(srv.URL), WithTLSFingerprint("nothex")); err == nil {
		t.Error("a malformed fingerprint was accepted")
	}
}
