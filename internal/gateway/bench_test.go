package gateway

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkGateway measures what the gateway adds to a request: the same
// GET /v1/sandboxes/{id} (a small JSON answer), and the same create, to a
// node-like server directly, with the fleet key, and through the gateway, which
// authenticates the tenant's key (cached after the first request),
// routes by the id's node and proxies. Each reports ns/op and p50-µs, the
// median of its requests' latencies, over keep-alive connections on
// loopback.
//
//	go test ./internal/gateway -run '^$' -bench Gateway -benchtime 5000x
func BenchmarkGateway(b *testing.B) {
	f := newFleet(b, "n2a")
	sb := f.nodes["n2a"].add(time.Now())
	run := func(b *testing.B, method, url, key string) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			req, _ := http.NewRequest(method, url, strings.NewReader(`{"template":"base"}`))
			req.Header.Set("Authorization", "Bearer "+key)
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 300 {
				b.Fatalf("status %d", resp.StatusCode)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	}
	b.Run("get/direct", func(b *testing.B) { run(b, "GET", f.nodes["n2a"].srv.URL+"/v1/sandboxes/"+sb.ID, fleetKey) })
	b.Run("get/gateway", func(b *testing.B) { run(b, "GET", f.srv.URL+"/v1/sandboxes/"+sb.ID, f.key) })
	// A create: the gateway also reads the body and places it.
	b.Run("create/direct", func(b *testing.B) { run(b, "POST", f.nodes["n2a"].srv.URL+"/v1/sandboxes", fleetKey) })
	b.Run("create/gateway", func(b *testing.B) { run(b, "POST", f.srv.URL+"/v1/sandboxes", f.key) })
}
