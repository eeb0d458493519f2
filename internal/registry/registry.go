// Package registry is how the daemon reaches OCI registries, where
// templates (as OCI images) and snapshots (as OCI artifacts with
// agentbox's media types) travel between nodes: reference parsing, the
// [registry] config's plain-HTTP allow list, and credentials from a
// docker-style config.json. It speaks the distribution protocol through
// go-containerregistry; what is pushed and how it is unpacked is
// internal/storage's.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/config"
)

// Client pushes to and pulls from registries as the [registry] config
// says.
type Client struct {
	cfg config.Registry
	rt  http.RoundTripper
}

// New returns a client for cfg (validated by config.Validate).
func New(cfg config.Registry) *Client {
	base := remote.DefaultTransport
	return &Client{cfg: cfg, rt: &guard{allowed: cfg.Insecure, next: base}}
}

// ParseRef parses an image reference HOST[:PORT]/REPO[:TAG|@DIGEST]. The
// registry host must be explicit (a name with a dot or a port, or
// localhost): agentbox never falls back to a default registry. A
// reference without a tag or digest means :latest.
func ParseRef(s string) (name.Reference, error) {
	if s == "" {
		return nil, errdefs.Invalid("ref is required: HOST[:PORT]/REPO[:TAG], e.g. 127.0.0.1:5000/agentbox/templates/app:1")
	}
	host, rest, ok := strings.Cut(s, "/")
	if !ok || rest == "" || !(strings.ContainsAny(host, ".:") || host == "localhost") {
		return nil, errdefs.Invalid("ref %q must begin with the registry's host (HOST[:PORT]/REPO[:TAG], e.g. 127.0.0.1:5000/agentbox/app:1): agentbox has no default registry", s)
	}
	ref, err := name.ParseReference(s, name.StrictValidation, name.WithDefaultTag("latest"))
	if err != nil {
		// Strict validation wants a tag: retry with :latest for a bare repo.
		if ref2, err2 := name.ParseReference(s+":latest", name.StrictValidation); err2 == nil && !strings.Contains(rest, ":") && !strings.Contains(rest, "@") {
			return ref2, nil
		}
		return nil, errdefs.Invalid("ref %q is not a valid image reference: %v", s, err)
	}
	return ref, nil
}

// RepoName is the last path component of ref's repository: the default
// name of what is pulled from it.
func RepoName(ref name.Reference) string {
	repo := ref.Context().RepositoryStr()
	if i := strings.LastIndexByte(repo, '/'); i >= 0 {
		repo = repo[i+1:]
	}
	return repo
}

// TenantMayUse reports whether tenants' keys may push to and pull from
// ref's registry ([registry] tenant_registries).
func (c *Client) TenantMayUse(ref name.Reference) bool {
	return hostListed(c.cfg.TenantRegistries, ref.Context().RegistryStr())
}

// Options are the remote options of a push or pull of ref.
func (c *Client) Options(ctx context.Context) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(c.rt),
		remote.WithAuthFromKeychain(keychain{file: c.cfg.AuthFile}),
		remote.WithUserAgent("agentbox"),
	}
}

// Image opens the image (a manifest, or the linux image for this host's
// architecture of an index) at ref.
func (c *Client) Image(ctx context.Context, ref name.Reference, platform *v1.Platform) (v1.Image, error) {
	opts := c.Options(ctx)
	if platform != nil {
		opts = append(opts, remote.WithPlatform(*platform))
	}
	img, err := remote.Image(c.scheme(ref), opts...)
	if err != nil {
		return nil, Wrap(err, "pulling "+ref.String())
	}
	return img, nil
}

// Write pushes img to ref and returns its manifest digest.
func (c *Client) Write(ctx context.Context, ref name.Reference, img v1.Image) (v1.Hash, error) {
	if err := remote.Write(c.scheme(ref), img, c.Options(ctx)...); err != nil {
		return v1.Hash{}, Wrap(err, "pushing to "+ref.String())
	}
	d, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	return d, nil
}

// scheme returns ref marked insecure when its registry is listed in
// [registry] insecure, so that plain HTTP is used for any such host
// (go-containerregistry by itself does so only for loopback and
// RFC 1918 addresses).
func (c *Client) scheme(ref name.Reference) name.Reference {
	if !hostListed(c.cfg.Insecure, ref.Context().RegistryStr()) {
		return ref
	}
	r, err := name.ParseReference(ref.String(), name.Insecure, name.StrictValidation)
	if err != nil {
		return ref
	}
	return r
}

// Wrap turns a registry error into an errdefs class: missing manifests
// and repositories are not found, authentication failures permission
// denied, a refused plain-HTTP connection invalid (with what to
// configure), anything else unavailable.
func Wrap(err error, what string) error {
	var te *transport.Error
	var he *plainHTTPError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &he):
		return errdefs.Invalid("%s: %v", what, he)
	case errors.As(err, &te):
		switch te.StatusCode {
		case http.StatusNotFound:
			return errdefs.NotFound("%s: %v", what, err)
		case http.StatusUnauthorized, http.StatusForbidden:
			return errdefs.New(errdefs.ErrPermissionDenied, "%s: the registry refused the credentials (registry.auth_file): %v", what, err)
		}
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				return errdefs.NotFound("%s: %v", what, err)
			}
		}
	}
	return errdefs.Unavailable("%s: %v", what, err)
}

// guard refuses plain-HTTP requests to registries that [registry]
// insecure does not list. go-containerregistry falls back to HTTP for
// loopback and private addresses by itself; agentbox does so only where
// the config says.
type guard struct {
	allowed []string
	next    http.RoundTripper
}

type plainHTTPError struct{ host string }

func (e *plainHTTPError) Error() string {
	return fmt.Sprintf("registry %s answers only over plain HTTP (or not over HTTPS): add %q to [registry] insecure in the daemon's config to allow it", e.host, e.host)
}

func (g *guard) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "http" && !hostListed(g.allowed, r.URL.Host) {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, &plainHTTPError{host: r.URL.Host}
	}
	return g.next.RoundTrip(r)
}

// hostListed reports whether hostport is listed: as itself, or by
// its host alone.
func hostListed(list []string, hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	for _, a := range list {
		a = strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
		if strings.EqualFold(a, hostport) || strings.EqualFold(a, host) {
			return true
		}
		if ah, ap, err := net.SplitHostPort(a); err == nil && strings.EqualFold(net.JoinHostPort(ah, ap), hostport) {
			return true
		}
	}
	return false
}

// keychain reads credentials from a docker-style config.json at file
// ("": anonymous) at each lookup, so that a rotated file takes effect
// without a restart.
type keychain struct{ file string }

func (k keychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	if k.file == "" {
		return authn.Anonymous, nil
	}
	b, err := os.ReadFile(k.file)
	if err != nil {
		return nil, errdefs.Unavailable("reading registry.auth_file %s: %v", k.file, err)
	}
	var cf struct {
		Auths map[string]authn.AuthConfig `json:"auths"`
	}
	if err := json.Unmarshal(b, &cf); err != nil {
		// The message of a JSON error can quote the file: keep it out.
		return nil, errdefs.Invalid("registry.auth_file %s is not a docker-style config.json with an \"auths\" object", k.file)
	}
	host := res.RegistryStr()
	for key, ac := range cf.Auths {
		k := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://"), "/")
		if k, _, _ = strings.Cut(k, "/"); k == host {
			return authn.FromConfig(ac), nil
		}
	}
	return authn.Anonymous, nil
}
