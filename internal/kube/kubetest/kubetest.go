// Package kubetest starts a real Kubernetes control plane for tests: the
// kube-apiserver and etcd that scripts/install-k8s.sh builds from the Go
// module proxy (once per machine), run through controller-runtime's
// envtest, with agentbox's CRDs (deploy/crds) installed. Only tests import
// it: no agentbox binary links envtest.
package kubetest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Namespace is the fleet's namespace the tests use, deploy/'s.
const Namespace = "agentbox"

// Env is a running control plane.
type Env struct {
	env *envtest.Environment
	// Admin is a REST config of a cluster admin (system:masters).
	Admin *rest.Config
	// Dyn is Admin's dynamic client.
	Dyn dynamic.Interface
	// Deploy is the repository's deploy/ directory.
	Deploy string
}

// Options change what Start starts.
type Options struct {
	// BindAll serves the API on every address of the host (for daemons
	// in network namespaces of the test's own), not only loopback.
	BindAll bool
}

// AssetsDir is where scripts/install-k8s.sh puts kube-apiserver and etcd.
func AssetsDir() string {
	lib := os.Getenv("AGENTBOX_LIB_DIR")
	if lib == "" {
		lib = "/usr/local/lib/agentbox"
	}
	return filepath.Join(lib, "k8s")
}

// Start starts etcd and kube-apiserver, installs deploy/crds, creates the
// namespace, and stops everything when the test ends.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	dir := AssetsDir()
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("%s is not built: run scripts/install-k8s.sh (make test runs it; once per machine): %v", b, err)
		}
	}
	deploy := repoDir(t, "deploy")
	e := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     []string{filepath.Join(deploy, "crds")},
		ErrorIfCRDPathMissing: true,
		// A wait for the API server to answer, not a verdict on speed: a
		// loaded 2-core machine starts it in seconds to tens of seconds.
		ControlPlaneStartTimeout: 3 * time.Minute,
		// A stop waits this long for the API server to end its requests,
		// then kills it: a watch from a daemon in a network namespace the
		// test removed can hold it for minutes (its peer never closes).
		ControlPlaneStopTimeout: 15 * time.Second,
	}
	if o.BindAll {
		// envtest picks a loopback address unless given both address and
		// port.
		l, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		e.ControlPlane.APIServer = &envtest.APIServer{}
		e.ControlPlane.APIServer.SecureServing.Address = "0.0.0.0"
		e.ControlPlane.APIServer.SecureServing.Port = port
	}
	// envtest logs through controller-runtime's logger; with none set it
	// prints a stack trace once a start takes 30 s (a loaded machine).
	// Its errors come back from Start and Stop, which the test reports.
	crlog.SetLogger(logr.Discard())
	cfg, err := e.Start()
	if err != nil {
		t.Fatalf("starting kube-apiserver and etcd from %s: %v", dir, err)
	}
	t.Cleanup(func() {
		start := time.Now()
		conns, _ := exec.Command("ss", "-tnpH", "state", "established", "( sport = :"+e.ControlPlane.APIServer.SecureServing.Port+" )").CombinedOutput()
		if err := e.Stop(); err != nil {
			t.Logf("stopping the control plane: %v (after %s; its connections when asked to stop:\n%s)", err, time.Since(start), conns)
		}
	})
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": Namespace}}}
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &Env{env: e, Admin: cfg, Dyn: dyn, Deploy: deploy}
}

// ServiceAccount returns a REST config that authenticates as the
// ServiceAccount name of Namespace (a client certificate with its user
// name and groups), so RBAC treats it as that account's pod would be.
func (e *Env) ServiceAccount(t testing.TB, name string) *rest.Config {
	t.Helper()
	u, err := e.env.AddUser(envtest.User{
		Name:   fmt.Sprintf("system:serviceaccount:%s:%s", Namespace, name),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace, "system:authenticated"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return u.Config()
}

// Kubeconfig writes rc as a kubeconfig file in dir and returns its path.
// host, when not "", replaces the server's host:port (a daemon in a
// network namespace reaches the API at the host's address there); the
// server's certificate is still checked, for the name "localhost".
func Kubeconfig(t testing.TB, rc *rest.Config, dir, name, host string) string {
	t.Helper()
	server := rc.Host
	cluster := &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: rc.CAData}
	if host != "" {
		cluster.Server = "https://" + host
		cluster.TLSServerName = "localhost"
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = cluster
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test", Namespace: Namespace}
	kc.CurrentContext = "test"
	path := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Port is the API server's port.
func (e *Env) Port() string { return e.env.ControlPlane.APIServer.SecureServing.Port }

// repoDir finds dir at the repository's root, above this package.
func repoDir(t testing.TB, dir string) string {
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "..", dir)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the repository's %s: %v", dir, err)
	}
	return p
}

// Apply applies every object of the YAML file path with a server-side
// apply as a cluster admin; dryRun: a server-side dry run (the API server
// validates, defaults and admits each object, and stores nothing).
func (e *Env) Apply(t testing.TB, path string, dryRun bool) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dc, err := discovery.NewDiscoveryClientForConfig(e.Admin)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	var out []*unstructured.Unstructured
	dec := yamlutil.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", path, gvk, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = e.Dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = e.Dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		body, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		opts := metav1.PatchOptions{FieldManager: "agentbox-tests", Force: ptr(true)}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		got, err := ri.Patch(context.Background(), obj.GetName(), types.ApplyPatchType, body, opts)
		if err != nil {
			t.Errorf("%s: applying %s %s/%s (dry run %v): %v", path, gvk.Kind, obj.GetNamespace(), obj.GetName(), dryRun, err)
			continue
		}
		out = append(out, got)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// Writes returns how many writes (create, update, patch, delete) of
// agentbox's own resources (group agentbox.dev) the API server has
// served, by resource, from its own metrics (apiserver_request_total): a
// test reads it before and after requests to show that they wrote none.
// (The API server's own controllers write other resources now and then.)
func (e *Env) Writes(t testing.TB) map[string]float64 {
	t.Helper()
	rt, err := rest.TransportFor(e.Admin)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Get(strings.TrimSuffix(e.Admin.Host, "/") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	verb := regexp.MustCompile(`verb="(POST|PUT|PATCH|DELETE|APPLY|CREATE|UPDATE)"`)
	res := regexp.MustCompile(`resource="([^"]*)"`)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_request_total{") || !verb.MatchString(l) || !strings.Contains(l, `group="agentbox.dev"`) {
			continue
		}
		r := ""
		if m := res.FindStringSubmatch(l); m != nil {
			r = m[1]
		}
		f := strings.Fields(l)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		out[r] += v
	}
	return out
}
