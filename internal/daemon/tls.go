package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/internal/config"
)

// tlsConfig returns the TCP listener's TLS settings, or nil when it serves
// plain HTTP (loopback, or insecure_plain_http).
func tlsConfig(cfg *config.Config, log *slog.Logger) (*tls.Config, error) {
	var (
		cert tls.Certificate
		err  error
	)
	switch cfg.TLSMode() {
	case "off":
		return nil, nil
	case "files":
		cert, err = tls.LoadX509KeyPair(cfg.Security.TLSCert, cfg.Security.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("loading security.tls_cert %s and tls_key %s: %w", cfg.Security.TLSCert, cfg.Security.TLSKey, err)
		}
	case "self-signed":
		certPath, keyPath, created, err := ensureSelfSigned(cfg.SelfSignedDir(), cfg.Listen)
		if err != nil {
			return nil, err
		}
		if cert, err = tls.LoadX509KeyPair(certPath, keyPath); err != nil {
			return nil, fmt.Errorf("loading the self-signed certificate %s: %w; remove %s to make a new one", certPath, err, cfg.SelfSignedDir())
		}
		if created {
			log.Info("generated a self-signed TLS certificate", "file", certPath)
		}
	}
	fp := Fingerprint(cert.Certificate[0])
	log.Info("API serves TLS", "certificate_sha256", fp, "pin_with", "AGENTBOX_TLS_FINGERPRINT="+fp)
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Fingerprint is the SHA-256 of a DER certificate in lowercase hex, as
// AGENTBOX_TLS_FINGERPRINT takes it.
func Fingerprint(der []byte) string {
	h := sha256.Sum256(der)
	return hex.EncodeToString(h[:])
}

// ensureSelfSigned makes dir/cert.pem and dir/key.pem (ECDSA P-256, ten
// years, for localhost, the loopback addresses, the host name and the
// listen host) unless both exist.
func ensureSelfSigned(dir, listen string) (certPath, keyPath string, created bool, err error) {
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_, cerr := os.Stat(certPath)
	_, kerr := os.Stat(keyPath)
	if cerr == nil && kerr == nil {
		return certPath, keyPath, false, nil
	}
	if !errors.Is(cerr, fs.ErrNotExist) && cerr != nil {
		return "", "", false, fmt.Errorf("checking %s: %w", certPath, cerr)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", false, fmt.Errorf("creating %s: %w", dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", false, fmt.Errorf("generating a TLS key: %w", err)
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "agentbox " + host},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if host != "" {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" {
		if ip := net.ParseIP(h); ip != nil && !ip.IsUnspecified() {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if ip == nil && h != "localhost" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", false, fmt.Errorf("creating a self-signed certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", false, fmt.Errorf("encoding the TLS key: %w", err)
	}
	if err := writePEM(keyPath, "PRIVATE KEY", kder, 0o600); err != nil {
		return "", "", false, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return "", "", false, err
	}
	return certPath, keyPath, true, nil
}

// writePEM writes one PEM block atomically with mode.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := pem.Encode(f, &pem.Block{Type: typ, Bytes: der}); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
