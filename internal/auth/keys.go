// Package auth issues and checks API keys. A key's secret ("abx_" and 40
// random base62 characters) is shown once; the store keeps only its
// sha256, so a leaked state.db does not leak usable keys. Every request,
// on TCP and on the unix socket alike, carries "Authorization: Bearer
// <secret>"; the CLI reads the admin key from <DataDir>/admin.key itself.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// SecretPrefix starts every API key secret, so that secret scanners and
// people can recognise one.
const SecretPrefix = "abx_"

// secretChars is the number of random characters after the prefix: 40
// base62 characters carry about 238 bits.
const secretChars = 40

// SecretLen is the length of a whole secret.
const SecretLen = len(SecretPrefix) + secretChars

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// NewKey returns a fresh secret and its hash.
func NewKey() (secret string, hash []byte) {
	b := make([]byte, 0, SecretLen)
	b = append(b, SecretPrefix...)
	var buf [64]byte
	for len(b) < SecretLen {
		rand.Read(buf[:]) // never fails; crashes the program if the kernel cannot supply randomness
		for _, c := range buf {
			// Rejection sampling keeps every character equally likely:
			// 248 = 4*62, so bytes 248..255 are dropped.
			if c < 248 && len(b) < SecretLen {
				b = append(b, base62[c%62])
			}
		}
	}
	secret = string(b)
	return secret, Hash(secret)
}

// Hash is the sha256 of a secret, as the store keeps it.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// wellFormed reports whether s looks like a secret NewKey could have made,
// so that garbage is refused without a database lookup.
func wellFormed(s string) bool {
	if len(s) != SecretLen || !strings.HasPrefix(s, SecretPrefix) {
		return false
	}
	for i := len(SecretPrefix); i < len(s); i++ {
		if strings.IndexByte(base62, s[i]) < 0 {
			return false
		}
	}
	return true
}

// NewKeyID returns a short public key id: "key_" and 12 hex digits.
func NewKeyID() string {
	var b [6]byte
	rand.Read(b[:])
	return "key_" + hex.EncodeToString(b[:])
}

// CreateKey makes a new key for tenant, stores its hash and returns the
// secret (to be shown once) with the stored record.
func CreateKey(ctx context.Context, st *store.Store, tenant, name string, admin bool) (string, *store.KeyRecord, error) {
	if tenant == "" {
		return "", nil, errdefs.Invalid("an API key needs a tenant")
	}
	secret, hash := NewKey()
	rec := &store.KeyRecord{ID: NewKeyID(), Tenant: tenant, Name: name, Hash: hash, Admin: admin}
	if err := st.CreateKey(ctx, rec); err != nil {
		return "", nil, fmt.Errorf("creating API key: %w", err)
	}
	return secret, rec, nil
}

// hashEqual compares two hashes in constant time.
func hashEqual(a, b []byte) bool { return subtle.ConstantTimeCompare(a, b) == 1 }
