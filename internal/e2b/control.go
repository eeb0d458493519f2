package e2b

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

// E2B's control plane (spec §3): sandboxes as E2B's SDKs create, find and
// end them, mapped onto /v1/sandboxes.

// defaultTimeout is E2B's sandbox timeout when a create or connect gives
// none, in seconds.
const defaultTimeout = 300

// newSandbox is the body of POST /v2/sandboxes and of the older
// POST /sandboxes (which adds secure).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Secure              *bool             `json:"secure"`
	AutoPause           bool              `json:"autoPause"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Network *struct {
		AllowOut []string `json:"allowOut"`
		DenyOut  []string `json:"denyOut"`
	} `json:"network"`
}

// sandbox is E2B's Sandbox, the answer of create and connect.
type sandbox struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// sandboxDetail is E2B's SandboxDetail (GET /sandboxes/{id}) and, less the
// token, its ListedSandbox.
type sandboxDetail struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	ClientID        string            `json:"clientID"`
	EnvdVersion     string            `json:"envdVersion"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	State           string            `json:"state"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Lifecycle       *lifecycle        `json:"lifecycle,omitempty"`
}

type lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// clientID is the deprecated field E2B still requires (the Python SDK
// fails without it); agentbox has no such thing.
const clientID = "agentbox"

func (h *Handler) serveControl(w http.ResponseWriter, r *http.Request, c *client.Client, path string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	route := r.Method + " " + path
	switch {
	case route == "POST /v2/sandboxes" || route == "POST /sandboxes":
		h.create(w, r, c)
	case route == "GET /v2/sandboxes" || route == "GET /sandboxes":
		h.list(w, r, c)
	case len(parts) == 2 && parts[0] == "sandboxes" && r.Method == "GET":
		h.info(w, r, c, parts[1])
	case len(parts) == 2 && parts[0] == "sandboxes" && r.Method == "DELETE":
		h.kill(w, r, c, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == "POST" && parts[2] == "timeout":
		h.setTimeout(w, r, c, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == "POST" && parts[2] == "connect",
		len(parts) == 4 && parts[0] == "v2" && parts[1] == "sandboxes" && r.Method == "POST" && parts[3] == "connect":
		h.connect(w, r, c, parts[len(parts)-2])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == "POST" && parts[2] == "pause":
		h.pause(w, r, c, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == "POST" && parts[2] == "resume":
		h.resume(w, r, c, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == "GET" && parts[2] == "metrics":
		h.metrics(w, r, c, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == "POST" && parts[2] == "fork":
		h.fork(w, r, c, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == "POST" && parts[2] == "snapshots":
		h.createSnapshot(w, r, c, parts[1])
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == "PUT" && parts[2] == "network":
		h.updateNetwork(w, r, c, parts[1])
	case route == "GET /snapshots":
		h.listSnapshots(w, r, c)
	case len(parts) == 2 && parts[0] == "templates" && r.Method == "DELETE":
		h.deleteSnapshot(w, r, c, parts[1])
	default:
		writeError(w, http.StatusNotImplemented, "agentbox's E2B API does not support "+r.Method+" "+path+" yet; docs/e2b.md lists what it supports")
	}
}

// decodeBody reads an optional JSON body (at most 1 MiB) into v.
func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return errdefs.Invalid("reading the request body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errdefs.Invalid("the request body is not the JSON E2B's API takes: %v", err)
	}
	return nil
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, c *client.Client) {
	var in newSandbox
	if err := decodeBody(r, &in); err != nil {
		writeAPIError(w, err)
		return
	}
	if in.TemplateID == "" {
		writeError(w, http.StatusBadRequest, "templateID is required")
		return
	}
	template, isolation := h.template(in.TemplateID)
	req := api.CreateSandboxRequest{
		Template:   template,
		Isolation:  isolation,
		TTLSeconds: defaultTimeout,
		Env:        in.EnvVars,
		Metadata:   in.Metadata,
	}
	if in.Timeout != nil {
		if *in.Timeout <= 0 {
			writeError(w, http.StatusBadRequest, "timeout must be a positive number of seconds, got "+strconv.FormatInt(*in.Timeout, 10))
			return
		}
		req.TTLSeconds = *in.Timeout
	}
	if in.AutoPause {
		req.OnTimeout = api.OnTimeoutPause
	}
	if in.AutoResume != nil {
		req.AutoResume = in.AutoResume.Enabled
	}
	if in.Network != nil || in.AllowInternetAccess != nil {
		var allow, deny []string
		if in.Network != nil {
			allow, deny = in.Network.AllowOut, in.Network.DenyOut
		}
		n := egressOf(in.AllowInternetAccess, allow, deny)
		req.Network = &n
	}
	sb, err := c.CreateSandbox(r.Context(), req)
	if errors.Is(err, errdefs.ErrNotFound) {
		// E2B starts a sandbox from a snapshot by giving its id as the
		// templateID.
		if _, serr := c.GetSnapshot(r.Context(), in.TemplateID); serr == nil {
			req.Template, req.Snapshot = "", in.TemplateID
			sb, err = c.CreateSandbox(r.Context(), req)
		}
	}
	if err != nil {
		writeAPIError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.sandboxOf(r, sb, in.TemplateID))
}

// template maps an E2B templateID to an agentbox template and isolation
// tier: the alias's value if it has one, else the templateID itself, read
// as TEMPLATE or TEMPLATE@TIER ("base@gvisor"; template names have no @).
// An alias takes a tier too ("code-interpreter-v1@gvisor"), which wins
// over one in its value. An empty tier is the daemon's default_isolation.
func (h *Handler) template(id string) (template, isolation string) {
	if t, ok := h.aliases[id]; ok {
		id = t
	} else if name, tier, ok := strings.Cut(id, "@"); ok {
		if t, ok := h.aliases[name]; ok {
			t, _, _ = strings.Cut(t, "@")
			id = t + "@" + tier
		}
	}
	template, isolation, _ = strings.Cut(id, "@")
	return template, isolation
}

// sandboxOf is E2B's view of sb for the caller of r. The envd and traffic
// access tokens are the caller's own API key: the SDKs send one of them
// back on every sandbox request, which then acts as that key, with its
// rights and no more.
func (h *Handler) sandboxOf(r *http.Request, sb *api.Sandbox, templateID string) sandbox {
	if templateID == "" {
		templateID = sb.Template
	}
	key := Key(r)
	h.signed.remember(sb.ID, key)
	out := sandbox{SandboxID: sb.ID, TemplateID: templateID, ClientID: clientID, EnvdVersion: EnvdVersion,
		EnvdAccessToken: key, TrafficAccessToken: &key}
	if d := domainOf(r, sb); d != "" {
		out.Domain = &d
	}
	return out
}

// domainOf is the domain of sb's hosts, <port>-<id>.<domain>, that the
// SDKs use for getHost(port) and, without E2B_SANDBOX_URL, for every
// sandbox request: the host the caller reached the API at, less "api.",
// when that was E2B's api.<domain> (internal/server/e2b.go), else the
// daemon's preview domain.
func domainOf(r *http.Request, sb *api.Sandbox) string {
	if d, ok := r.Context().Value(hostDomainKey{}).(string); ok {
		return d
	}
	if sb.Network != nil {
		return sb.Network.PreviewDomain
	}
	return ""
}

func detailOf(sb *api.Sandbox) sandboxDetail {
	d := sandboxDetail{
		SandboxID: sb.ID, TemplateID: sb.Template, ClientID: clientID, EnvdVersion: EnvdVersion,
		StartedAt: sb.CreatedAt, State: sb.State, Metadata: sb.Metadata,
		CPUCount: int(math.Ceil(sb.Resources.CPU)), MemoryMB: sb.Resources.MemoryMB, DiskSizeMB: sb.Resources.DiskMB,
	}
	if sb.State != api.StatePaused {
		d.State = "running"
	}
	// A sandbox without a TTL shows an end E2B's SDKs can parse, far off.
	d.EndAt = sb.CreatedAt.AddDate(100, 0, 0)
	if sb.ExpiresAt != nil {
		d.EndAt = *sb.ExpiresAt
	}
	onTimeout := "kill"
	if sb.OnTimeout == api.OnTimeoutPause {
		onTimeout = "pause"
	}
	d.Lifecycle = &lifecycle{OnTimeout: onTimeout, AutoResume: sb.AutoResume}
	return d
}

func (h *Handler) info(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	sb, err := c.GetSandbox(r.Context(), id)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	d := detailOf(sb)
	d.EnvdAccessToken = Key(r)
	writeJSON(w, http.StatusOK, d)
}

// list serves GET /v2/sandboxes (and the older GET /sandboxes): the
// sandboxes in E2B's states running and paused, oldest first (or newest
// with order=desc), limit at a time with X-Next-Token.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, c *client.Client) {
	q := r.URL.Query()
	md, err := parseMetadata(q.Get("metadata"))
	if err != nil {
		writeAPIError(w, err)
		return
	}
	states := map[string]bool{"running": true}
	if s := q.Get("state"); s != "" {
		states = map[string]bool{}
		for _, st := range strings.Split(s, ",") {
			states[strings.TrimSpace(st)] = true
		}
	} else if strings.HasPrefix(r.URL.Path, Prefix+"/v2/") {
		states["paused"] = true
	}
	all, err := c.ListSandboxes(r.Context(), client.ListOptions{Metadata: md})
	if err != nil {
		writeAPIError(w, err)
		return
	}
	var out []sandboxDetail
	for i := range all {
		sb := &all[i]
		if sb.State != api.StateRunning && sb.State != api.StatePaused {
			continue
		}
		if t, _ := h.template(q.Get("template")); t != "" && sb.Template != t {
			continue
		}
		d := detailOf(sb)
		if !states[d.State] {
			continue
		}
		out = append(out, d)
	}
	desc := q.Get("order") == "desc"
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].StartedAt.Equal(out[j].StartedAt) {
			return out[i].StartedAt.Before(out[j].StartedAt) != desc
		}
		return (out[i].SandboxID < out[j].SandboxID) != desc
	})
	page, next, err := paginate(len(out), q)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	out = out[page[0]:page[1]]
	if out == nil {
		out = []sandboxDetail{}
	}
	writeJSON(w, http.StatusOK, out)
}

// parseMetadata decodes the list's metadata filter as E2B's API does: the
// query value is itself a query string (k=v&k2=v2) whose keys and values
// are escaped once more.
func parseMetadata(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	s, err := url.QueryUnescape(s)
	if err != nil {
		return nil, errdefs.Invalid("metadata filter %q: %v", s, err)
	}
	md := map[string]string{}
	for _, kv := range strings.Split(s, "&") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, errdefs.Invalid("metadata filter %q: want key=value pairs", s)
		}
		if k, err = url.QueryUnescape(k); err != nil {
			return nil, errdefs.Invalid("metadata filter key %q: %v", k, err)
		}
		if v, err = url.QueryUnescape(v); err != nil {
			return nil, errdefs.Invalid("metadata filter value %q: %v", v, err)
		}
		md[k] = v
	}
	return md, nil
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	if err := c.DestroySandbox(r.Context(), id); err != nil {
		writeAPIError(w, err)
		return
	}
	h.signed.forget(id)
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	var in struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeAPIError(w, err)
		return
	}
	if in.Timeout == nil || *in.Timeout <= 0 {
		writeError(w, http.StatusBadRequest, "timeout must be a positive number of seconds")
		return
	}
	if _, err := c.SetTTL(r.Context(), id, time.Duration(*in.Timeout)*time.Second); err != nil {
		writeAPIError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// egressOf maps E2B's network settings onto agentbox's egress policy.
// E2B's sandboxes reach the internet unless told otherwise; denyOut
// 0.0.0.0/0 (or allow_internet_access false) closes it, and then allowOut
// names what stays open; otherwise denyOut names what is closed and
// allowOut changes nothing. One difference: where an allowOut entry
// overlaps a narrower denyOut entry E2B lets it through, and agentbox's
// deny wins (docs/e2b.md).
func egressOf(allowInternet *bool, allow, deny []string) api.Network {
	closed := allowInternet != nil && !*allowInternet
	var rest []string
	for _, d := range deny {
		if d == "0.0.0.0/0" || d == "::/0" {
			closed = true
			continue
		}
		rest = append(rest, d)
	}
	switch {
	case closed && len(allow) == 0:
		return api.Network{Egress: api.EgressNone}
	case closed:
		return api.Network{Egress: api.EgressCustom, Allow: allow, Deny: rest}
	default:
		return api.Network{Egress: api.EgressInternet, Deny: rest}
	}
}

// updateNetwork serves PUT /sandboxes/{id}/network (sbx.updateNetwork):
// the sandbox's egress rules are replaced, as E2B does, fields left out
// are cleared.
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	var in struct {
		AllowInternetAccess *bool           `json:"allow_internet_access"`
		AllowOut            []string        `json:"allowOut"`
		DenyOut             []string        `json:"denyOut"`
		Rules               json.RawMessage `json:"rules"`
		EgressProxy         json.RawMessage `json:"egressProxy"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeAPIError(w, err)
		return
	}
	if len(in.Rules) > 0 && string(in.Rules) != "null" && string(in.Rules) != "{}" || len(in.EgressProxy) > 0 && string(in.EgressProxy) != "null" {
		writeError(w, http.StatusNotImplemented, "agentbox's E2B API does not support network rules (request transforms) or an egress proxy yet; allowOut, denyOut and allow_internet_access work (docs/e2b.md)")
		return
	}
	n := egressOf(in.AllowInternetAccess, in.AllowOut, in.DenyOut)
	if _, err := c.SetEgress(r.Context(), id, n.Egress, n.Allow, n.Deny); err != nil {
		writeAPIError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect serves both connect routes: a paused sandbox is resumed (201),
// a running one answers 200; a timeout given becomes the sandbox's TTL
// from now, as E2B does.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	var in struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeAPIError(w, err)
		return
	}
	sb, err := c.GetSandbox(r.Context(), id)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	status := http.StatusOK
	if sb.State == api.StatePaused || sb.State == api.StateStopped {
		if sb, err = c.ResumeSandbox(r.Context(), id); err != nil {
			writeAPIError(w, err)
			return
		}
		status = http.StatusCreated
	}
	if sb.State != api.StateRunning {
		writeError(w, http.StatusNotFound, "sandbox "+id+" is "+sb.State+", not running")
		return
	}
	timeout := int64(defaultTimeout)
	if in.Timeout != nil && *in.Timeout > 0 {
		timeout = *in.Timeout
	}
	// Connect never shortens a sandbox's life.
	if sb.ExpiresAt != nil && time.Until(*sb.ExpiresAt) < time.Duration(timeout)*time.Second {
		if sb, err = c.SetTTL(r.Context(), id, time.Duration(timeout)*time.Second); err != nil {
			writeAPIError(w, err)
			return
		}
	}
	writeJSON(w, status, h.sandboxOf(r, sb, ""))
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	sb, err := c.GetSandbox(r.Context(), id)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	if sb.State == api.StatePaused {
		writeError(w, http.StatusConflict, "sandbox "+id+" is already paused")
		return
	}
	if _, err := c.PauseSandbox(r.Context(), id); err != nil {
		writeAPIError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	sb, err := c.ResumeSandbox(r.Context(), id)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.sandboxOf(r, sb, ""))
}

// errorBody is E2B's error shape; the SDKs branch on code.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

// writeAPIError answers an agentbox error in E2B's shape, with the status
// agentbox gives its class. A failed precondition is 409 in both APIs.
func writeAPIError(w http.ResponseWriter, err error) {
	_, status := errdefs.Code(err)
	writeError(w, status, err.Error())
}

// sandboxMetric is E2B's SandboxMetric.
type sandboxMetric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// metrics answers a sandbox's usage samples between start and end (unix
// seconds, both optional). E2B's cpuUsedPct is of the sandbox's cores;
// agentbox's percent is of one core.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	var from, to int64 = 0, math.MaxInt64
	for name, v := range map[string]*int64{"start": &from, "end": &to} {
		if s := r.URL.Query().Get(name); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				writeError(w, http.StatusBadRequest, name+" must be a unix time in seconds, got "+strconv.Quote(s))
				return
			}
			*v = n
		}
	}
	m, err := c.SandboxMetrics(r.Context(), id)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	cpus := max(int(math.Ceil(m.Limits.CPU)), 1)
	out := []sandboxMetric{}
	for _, s := range m.Samples {
		if t := s.Time.Unix(); t < from || t > to {
			continue
		}
		out = append(out, sandboxMetric{
			Timestamp: s.Time.UTC().Format(time.RFC3339Nano), TimestampUnix: s.Time.Unix(),
			CPUCount: cpus, CPUUsedPct: s.CPUPercent / float64(cpus),
			MemUsed: s.MemoryBytes, MemTotal: m.Limits.MemoryMB << 20,
			DiskUsed: s.DiskBytes, DiskTotal: m.Limits.DiskMB << 20,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotOf(s *api.Snapshot) snapshotInfo {
	names := []string{}
	if s.Name != "" {
		names = append(names, s.Name)
	}
	return snapshotInfo{SnapshotID: s.ID, Names: names}
}

func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	var in struct {
		Name string `json:"name"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeAPIError(w, err)
		return
	}
	snap, err := c.CreateSnapshot(r.Context(), id, in.Name)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotOf(snap))
}

// listSnapshots lists the key's snapshots (less fork's internal ones),
// oldest first, filtered by sandboxID and name, limit at a time.
func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request, c *client.Client) {
	q := r.URL.Query()
	all, err := c.ListSnapshots(r.Context())
	if err != nil {
		writeAPIError(w, err)
		return
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].CreatedAt.Before(all[j].CreatedAt) })
	out := []snapshotInfo{}
	for i := range all {
		s := &all[i]
		if s.Internal || q.Get("sandboxID") != "" && s.SandboxID != q.Get("sandboxID") || q.Get("name") != "" && s.Name != q.Get("name") {
			continue
		}
		out = append(out, snapshotOf(s))
	}
	page, next, err := paginate(len(out), q)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out[page[0]:page[1]])
}

// paginate is the [start, end) of the page that limit and nextToken ask
// for among n items, and the next page's token ("" for none).
func paginate(n int, q url.Values) ([2]int, string, error) {
	start, end := 0, n
	if t := q.Get("nextToken"); t != "" {
		v, err := strconv.Atoi(t)
		if err != nil || v < 0 {
			return [2]int{}, "", errdefs.Invalid("nextToken %q is not one this server gave", t)
		}
		start = min(v, n)
	}
	if l := q.Get("limit"); l != "" {
		v, err := strconv.Atoi(l)
		if err != nil || v < 1 {
			return [2]int{}, "", errdefs.Invalid("limit must be a positive integer, got %q", l)
		}
		if start+v < n {
			return [2]int{start, start + v}, strconv.Itoa(start + v), nil
		}
	}
	return [2]int{start, end}, "", nil
}

// deleteSnapshot serves DELETE /templates/{id}, which E2B's SDK uses for
// snapshots; agentbox's templates are removed with its own API.
func (h *Handler) deleteSnapshot(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	if err := c.DeleteSnapshot(r.Context(), id); err != nil {
		writeAPIError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fork serves POST /sandboxes/{id}/fork: count children of the sandbox's
// current files, each with the timeout asked, else agentbox's default TTL.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	var in struct {
		Count   *int   `json:"count"`
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &in); err != nil {
		writeAPIError(w, err)
		return
	}
	count := 1
	if in.Count != nil {
		count = *in.Count
	}
	children, err := c.ForkSandbox(r.Context(), id, count)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	type result struct {
		Sandbox *sandbox   `json:"sandbox,omitempty"`
		Error   *errorBody `json:"error,omitempty"`
	}
	out := make([]result, 0, len(children))
	for i := range children {
		sb := &children[i]
		if in.Timeout != nil && *in.Timeout > 0 {
			var err error
			if sb, err = c.SetTTL(r.Context(), sb.ID, time.Duration(*in.Timeout)*time.Second); err != nil {
				_, status := errdefs.Code(err)
				out = append(out, result{Error: &errorBody{Code: status, Message: err.Error()}})
				continue
			}
		}
		v := h.sandboxOf(r, sb, "")
		out = append(out, result{Sandbox: &v})
	}
	writeJSON(w, http.StatusCreated, out)
}
