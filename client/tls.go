package client

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// The environment variables for a daemon that serves TLS with a
// certificate the system does not trust.
const (
	// EnvTLSFingerprint pins the daemon's certificate by the SHA-256 of its
	// DER encoding, in hex (colons allowed), as the daemon logs it.
	EnvTLSFingerprint = "AGENTBOX_TLS_FINGERPRINT"
	// EnvCAFile names a PEM file of certificate authorities to trust
	// instead of the system's.
	EnvCAFile = "AGENTBOX_CA_FILE"
)

type tlsOptions struct {
	fingerprint string
	caFile      string
}

// WithTLSFingerprint trusts exactly the certificate whose SHA-256 (hex, as
// `agentbox serve` logs it) is fp, whoever signed it and whatever names it
// holds: a self-signed daemon certificate. It wins over
// AGENTBOX_TLS_FINGERPRINT.
func WithTLSFingerprint(fp string) Option { return func(c *config) { c.tls.fingerprint = fp } }

// WithCAFile trusts the certificate authorities in the PEM file path
// instead of the system's. It wins over AGENTBOX_CA_FILE.
func WithCAFile(path string) Option { return func(c *config) { c.tls.caFile = path } }

// normalizeFingerprint returns fp as 64 lowercase hex digits.
func normalizeFingerprint(fp string) (string, error) {
	s := strings.ToLower(strings.NewReplacer(":", "", " ", "").Replace(strings.TrimSpace(fp)))
	if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("%s: %q is not a SHA-256 fingerprint (64 hex digits, as `agentbox serve` logs it)", EnvTLSFingerprint, fp)
	}
	return s, nil
}

// TLSConfig returns the TLS client configuration the client uses for a
// pinned certificate (fingerprint: its SHA-256 in hex, as `agentbox serve`
// logs it) or a PEM file of certificate authorities (caFile), for a
// program that reaches a daemon with a transport of its own (a fleet
// gateway reaching its nodes). Both empty: nil, the system's roots.
func TLSConfig(fingerprint, caFile string) (*tls.Config, error) {
	t := &http.Transport{}
	if err := (tlsOptions{fingerprint: fingerprint, caFile: caFile}).apply(t, true); err != nil {
		return nil, err
	}
	return t.TLSClientConfig, nil
}

// apply sets t's TLS trust from the options, else the environment.
func (o tlsOptions) apply(t *http.Transport, noEnv bool) error {
	if !noEnv {
		if o.fingerprint == "" {
			o.fingerprint = os.Getenv(EnvTLSFingerprint)
		}
		if o.caFile == "" {
			o.caFile = os.Getenv(EnvCAFile)
		}
	}
	if o.fingerprint == "" && o.caFile == "" {
		return nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.caFile != "" {
		pem, err := os.ReadFile(o.caFile)
		if err != nil {
			return fmt.Errorf("%s: %w", EnvCAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: %s holds no PEM certificate", EnvCAFile, o.caFile)
		}
		tc.RootCAs = pool
	}
	if o.fingerprint != "" {
		want, err := normalizeFingerprint(o.fingerprint)
		if err != nil {
			return err
		}
		// The pin replaces chain and name verification: the one
		// certificate with this hash is trusted, and nothing else.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("the daemon sent no certificate")
			}
			h := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if got := hex.EncodeToString(h[:]); got != want {
				return fmt.Errorf("the daemon's certificate has SHA-256 %s, but %s pins %s: check the fingerprint `agentbox serve` logged", got, EnvTLSFingerprint, want)
			}
			return nil
		}
	}
	t.TLSClientConfig = tc
	return nil
}
