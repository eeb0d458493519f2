package auth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// AdminKeyFile is the admin key's file name inside the data directory.
const AdminKeyFile = "admin.key"

// AdminTenant is the tenant of the admin key made on first start.
const AdminTenant = "default"

// EnsureAdminKey makes sure an admin key exists and returns its secret.
//
//   - If <dataDir>/admin.key holds the secret of an unrevoked admin key,
//     it returns that secret and created false.
//   - Otherwise, if some unrevoked admin key exists (the file was deleted,
//     or holds a stale key), it makes no new one and returns "" and false:
//     the operator has admin keys and chose where to keep them.
//   - Otherwise (first start, or every admin key revoked) it makes an
//     admin key for tenant "default", writes its secret to admin.key and
//     returns it with created true.
//
// The file is written to a temporary file created with mode 0600 and
// renamed into place, so it is never readable by others, not even for an
// instant, and never half-written. It is written before the key is
// stored: a crash in between leaves a file whose key is unknown, which the
// next start replaces, rather than a key nobody holds.
func EnsureAdminKey(ctx context.Context, st *store.Store, dataDir string) (secret string, created bool, err error) {
	path := filepath.Join(dataDir, AdminKeyFile)
	if s, err := readSecret(path); err != nil {
		return "", false, err
	} else if s != "" {
		k, err := st.KeyByHash(ctx, Hash(s))
		switch {
		case err == nil && k.Admin && hashEqual(k.Hash, Hash(s)):
			return s, false, nil
		case err != nil && !errors.Is(err, errdefs.ErrNotFound):
			return "", false, fmt.Errorf("checking admin key: %w", err)
		}
	}

	keys, err := st.ListKeys(ctx, "")
	if err != nil {
		return "", false, fmt.Errorf("checking admin keys: %w", err)
	}
	for _, k := range keys {
		if k.Admin && k.RevokedAt == nil {
			return "", false, nil
		}
	}

	secret, hash := NewKey()
	if err := writeSecret(path, secret); err != nil {
		return "", false, err
	}
	rec := &store.KeyRecord{ID: NewKeyID(), Tenant: AdminTenant, Name: "admin", Hash: hash, Admin: true}
	if err := st.CreateKey(ctx, rec); err != nil {
		os.Remove(path)
		return "", false, fmt.Errorf("storing admin key: %w", err)
	}
	return secret, true, nil
}

// readSecret returns the secret in path, "" if the file does not exist or
// holds no well-formed secret. A file others can read is tightened to 0600.
func readSecret(path string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading admin key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("reading admin key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", errdefs.Precondition("%s is not a regular file; remove it and restart to make a new admin key", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := f.Chmod(0o600); err != nil {
			return "", fmt.Errorf("restricting %s to mode 0600: %w", path, err)
		}
	}
	buf := make([]byte, 256)
	n, err := f.Read(buf)
	if err != nil && n == 0 {
		return "", nil // empty file
	}
	s := strings.TrimSpace(string(buf[:n]))
	if !wellFormed(s) {
		return "", nil
	}
	return s, nil
}

// writeSecret atomically replaces path with a 0600 file holding secret.
func writeSecret(path, secret string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	// os.CreateTemp creates with O_EXCL and mode 0600.
	f, err := os.CreateTemp(dir, ".admin.key.*")
	if err != nil {
		return fmt.Errorf("writing admin key: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly after the rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("writing admin key: %w", err)
	}
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("writing admin key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing admin key: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing admin key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing admin key: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
