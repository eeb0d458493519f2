package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Signed URLs (spec §4, "envd auth model"): sbx.uploadUrl() and
// sbx.downloadUrl() build /files URLs that carry no token but a
// signature, v1_ + base64(sha256("<path>:<read|write>:<user>:<token>"
// [+ ":<expiration>"])), the token being the envdAccessToken create or
// connect answered: here the caller's API key. The daemon keeps only
// hashes of keys, so to check a signature the handler remembers, in
// memory and per sandbox, the keys it answered as tokens; a signed
// request then acts as the key that signed it. After a restart a signed
// URL works again once the SDK has connected to the sandbox.

// maxSigners bounds the keys remembered per sandbox, and maxSigned the
// sandboxes remembered: enough for every real use, and a bound on memory.
const (
	maxSigners = 8
	maxSigned  = 4096
)

// signers remembers the tokens handed out per sandbox.
type signers struct {
	mu sync.Mutex
	m  map[string][]string
}

// remember records key as a token of sandbox id.
func (s *signers) remember(id, key string) {
	if id == "" || key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]string{}
	}
	keys := s.m[id]
	for _, k := range keys {
		if k == key {
			return
		}
	}
	if _, ok := s.m[id]; !ok && len(s.m) >= maxSigned {
		for old := range s.m { // drop any one: its URLs work again after a connect
			delete(s.m, old)
			break
		}
	}
	if len(keys) >= maxSigners {
		keys = keys[1:]
	}
	s.m[id] = append(keys, key)
}

// forget drops the tokens of sandbox id.
func (s *signers) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// signer returns the remembered token of sandbox id that signed r, a
// GET or POST of /files, or "" if none did or the signature has expired.
func (s *signers) signer(r *http.Request, id string, now time.Time) string {
	q := r.URL.Query()
	sig, ok := strings.CutPrefix(q.Get("signature"), "v1_")
	if !ok || sig == "" {
		return ""
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	exp := q.Get("signature_expiration")
	if exp != "" {
		t, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || now.Unix() > t {
			return ""
		}
	}
	// The JS SDK signs an absent user as "undefined".
	users := []string{q.Get("username")}
	if !q.Has("username") {
		users = append(users, "undefined")
	}
	s.mu.Lock()
	keys := append([]string(nil), s.m[id]...)
	s.mu.Unlock()
	for _, k := range keys {
		for _, u := range users {
			if subtle.ConstantTimeCompare([]byte(signature(q.Get("path"), op, u, k, exp)), []byte(sig)) == 1 {
				return k
			}
		}
	}
	return ""
}

// signature is the base64 part of a signed URL's signature.
func signature(path, op, user, token, expiration string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return base64.RawStdEncoding.EncodeToString(sum[:])
}
