package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/server"
)

// SharedTenants is where a gateway's tenant and key writes go besides its
// store when several gateways share them: a Kubernetes cluster
// (internal/kube.Tenants, [kubernetes] tenants), which copies them into
// every gateway's store.
type SharedTenants interface {
	PutTenant(ctx context.Context, name string) error
	DeleteTenant(ctx context.Context, name string) error
	PutKey(ctx context.Context, id string) error
	RevokeKey(ctx context.Context, id string) error
	// Hold keeps the cluster's copy into the store from running until
	// release: the gateway holds it across its store's write and the
	// cluster's.
	Hold() (release func())
}

// shareTenants wraps the store's tenant and key writes so that each, once
// made in the store, is made in o.Shared too; when that fails the store's
// write is undone where it can be and the request answers 503 (the
// client tries again), so that no key works on one gateway only.
func (g *Gateway) shareTenants(handlers map[string]http.HandlerFunc) {
	sh := g.o.Shared
	if sh == nil {
		return
	}
	st := g.o.Store
	wrap := func(pattern string, after func(r *http.Request, body []byte) error) {
		inner := handlers[pattern]
		if inner == nil {
			panic("gateway: no handler for " + pattern + " to share")
		}
		handlers[pattern] = func(w http.ResponseWriter, r *http.Request) {
			release := sh.Hold()
			defer release()
			rec := &recorder{header: http.Header{}}
			inner(rec, r)
			if rec.status/100 == 2 {
				if err := after(r, rec.body.Bytes()); err != nil {
					server.WriteError(w, errdefs.Unavailable("the change was not recorded in the cluster, so other gateways would not see it; nothing changed, try again: %v", err))
					return
				}
			}
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body.Bytes())
		}
	}
	wrap("POST /v1/tenants", func(r *http.Request, body []byte) error {
		var t api.Tenant
		_ = json.Unmarshal(body, &t)
		if err := sh.PutTenant(r.Context(), t.Name); err != nil {
			_ = st.DeleteTenant(context.WithoutCancel(r.Context()), t.Name)
			return err
		}
		return nil
	})
	wrap("PATCH /v1/tenants/{name}", func(r *http.Request, _ []byte) error {
		return sh.PutTenant(r.Context(), r.PathValue("name"))
	})
	wrap("DELETE /v1/tenants/{name}", func(r *http.Request, _ []byte) error {
		return sh.DeleteTenant(r.Context(), r.PathValue("name"))
	})
	wrap("POST /v1/keys", func(r *http.Request, body []byte) error {
		var k api.Key
		_ = json.Unmarshal(body, &k)
		if err := sh.PutKey(r.Context(), k.ID); err != nil {
			_ = st.RevokeKey(context.WithoutCancel(r.Context()), k.ID)
			return err
		}
		return nil
	})
	wrap("DELETE /v1/keys/{id}", func(r *http.Request, _ []byte) error {
		return sh.RevokeKey(r.Context(), r.PathValue("id"))
	})
}

// recorder holds a handler's answer until the shared write is made.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
