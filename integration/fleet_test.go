package integration

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/kube/kubetest"
)

// A fleet is several agentbox node daemons on this host, each in a network
// namespace of its own (reached from the host over a veth pair with
// addresses of the benchmarking range, 198.19.N.0/24, that exist only
// between the host and namespaces this test made), each with its own data directory,
// cgroup parent, uid ranges and sandbox subnet, plus a gateway daemon in
// the host's namespace in front of them: the shape of docs/cluster.md on
// one machine.
type fleet struct {
	t      *testing.T
	dir    string
	subnet string // "198.19.N": the /24 its veths take /30s of
	// registry is the fleet's registry as the nodes reach it, HOST:PORT
	// ("" without fleetOptions.registryPort).
	registry string
	secret   string // the gateway's key, which the nodes trust
	nodes    []*fleetNode
	gw       *fleetDaemon
	gwCfg    string
	gwAddr   string
	// client is the gateway's admin client.
	client *client.Client
	opts   fleetOptions
}

// fleetOptions change what newFleetWith starts.
type fleetOptions struct {
	// registryPort is the port of the fleet's OCI registry (plain HTTP)
	// on the host, listening on all addresses (startRegistryAt 0.0.0.0):
	// the nodes reach it at SUBNET.1 (the first node's veth, routed from
	// every namespace), fleet.registry (fleet.registry + "/agentbox") and
	// every node's [registry] insecure name it.
	registryPort string
	// kube, when set, is the cluster the fleet's membership comes from:
	// nodes claim their ids (node_id = "auto") and register, as the
	// ServiceAccounts of deploy/rbac.yaml, and the gateway, with no
	// [[fleet.node]], watches them (TestClusterKubernetes).
	kube *kubetest.Env
}

// fleetDaemon is one daemon process of a fleet.
type fleetDaemon struct {
	cmd     *exec.Cmd
	done    chan error
	cfgPath string
	dataDir string
	runDir  string
	key     string // its admin key
}

// fleetNode is a node daemon of a fleet.
type fleetNode struct {
	fleetDaemon
	id     string // node_id: the prefix of its sandboxes' ids
	ns     string // its network namespace
	hostIf string // the host's end of its veth
	addr   string // its API address (in its namespace)
	client *client.Client
}

// fleetSecret is the length of the gateway key the tests make.
const fleetSecretLen = 48

// newFleet starts n node daemons and a gateway, and imports busybox into
// every node. Everything goes when the test ends.
func newFleet(t *testing.T, n int) *fleet {
	t.Helper()
	return newFleetWith(t, n, fleetOptions{})
}

// newFleetWith is newFleet with opts.
func newFleetWith(t *testing.T, n int, opts fleetOptions) *fleet {
	t.Helper()
	// 198.19.250-255: above the test web's 198.19.0-249 (egress_domain_test.go).
	b, _ := strconv.ParseUint(randHex(1), 16, 8)
	f := &fleet{t: t, dir: filepath.Join(filepath.Dir(env.cfg.DataDir), "fleet-"+randHex(3)), subnet: fmt.Sprintf("198.19.%d", 250+b%6), opts: opts}
	if opts.registryPort != "" {
		f.registry = f.subnet + ".1:" + opts.registryPort
	}
	if err := os.MkdirAll(f.dir, 0o711); err != nil {
		t.Fatal(err)
	}
	f.secret = randHex(fleetSecretLen / 2)
	keyFile := filepath.Join(f.dir, "gateway.key")
	if err := os.WriteFile(keyFile, []byte(f.secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The gateway's address is known before the nodes start: their
	// preview URLs name it (network.preview_port).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.gwAddr = l.Addr().String()
	l.Close()
	sweepFleetNetns()
	t.Cleanup(f.stop)
	for i := 0; i < n; i++ {
		f.nodes = append(f.nodes, f.startNode(i, keyFile))
	}
	for _, nd := range f.nodes {
		f.importBusybox(nd)
	}
	f.startGateway(keyFile)
	return f
}

// fleetNetnsPrefix names the namespaces fleets make, so that what a killed
// run left is found by name.
const fleetNetnsPrefix = "abxf-"

// sweepFleetNetns removes the daemons, namespaces and veths a killed
// earlier run left: only one fleet test runs at a time on a host (the
// integration lock), so any left is stale. The daemons first: a fleet
// daemon runs in a process group of its own and outlives a killed test
// binary, and while it runs its namespace and veth (with the addresses
// the next fleet may take) stay.
func sweepFleetNetns() {
	killStaleFleetDaemons()
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), fleetNetnsPrefix) {
			_ = exec.Command("ip", "netns", "delete", e.Name()).Run()
		}
	}
}

// killStaleFleetDaemons SIGKILLs every `agentboxd serve --config
// <dir>/fleet-*/*.toml` on the host: a fleet's node or gateway daemon.
func killStaleFleetDaemons() {
	procs, _ := os.ReadDir("/proc")
	var killed []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 4 && filepath.Base(args[0]) == "agentboxd" && args[1] == "serve" && args[2] == "--config" &&
			strings.HasPrefix(filepath.Base(filepath.Dir(args[3])), "fleet-") && strings.HasSuffix(args[3], ".toml") {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed = append(killed, pid)
			}
		}
	}
	for _, pid := range killed { // gone before their namespaces are removed
		for i := 0; i < 500 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if len(killed) > 0 {
		fmt.Fprintf(os.Stderr, "note: killed %d fleet daemons a killed test run left\n", len(killed))
	}
}

func (f *fleet) startNode(i int, keyFile string) *fleetNode {
	t := f.t
	suffix := randHex(3)
	nd := &fleetNode{
		id:     fmt.Sprintf("n%c%c", 'a'+i, "234567"[i%6]),
		ns:     fleetNetnsPrefix + suffix,
		hostIf: "abxf" + suffix,
	}
	// A /30 per node: the host's end .4i+1, the node's .4i+2, in a /24 of
	// the benchmarking range that is the fleet's own (TEST-NET-1 may be
	// this host's real network: it was, on the CI machines).
	hostAddr := fmt.Sprintf("%s.%d", f.subnet, 4*i+1)
	nodeAddr := fmt.Sprintf("%s.%d", f.subnet, 4*i+2)
	nd.addr = nodeAddr + ":7423"
	for _, args := range [][]string{
		{"netns", "add", nd.ns},
		{"link", "add", nd.hostIf, "type", "veth", "peer", "name", "eth0", "netns", nd.ns},
		{"addr", "add", hostAddr + "/30", "dev", nd.hostIf},
		{"link", "set", nd.hostIf, "up"},
		{"-n", nd.ns, "link", "set", "lo", "up"},
		{"-n", nd.ns, "addr", "add", nodeAddr + "/30", "dev", "eth0"},
		{"-n", nd.ns, "link", "set", "eth0", "up"},
		{"-n", nd.ns, "route", "add", "default", "via", hostAddr},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	_, gwPort, _ := net.SplitHostPort(f.gwAddr)
	name := filepath.Base(env.cfg.RunDir) + "-" + nd.id // its run dir and cgroup parent, swept by name
	nodeID := nd.id
	var kubeConf string
	if k := f.opts.kube; k != nil {
		// The API server as this namespace reaches it: the host's first
		// veth address (it listens on every address).
		nodeID = "auto"
		kc := kubetest.Kubeconfig(t, k.ServiceAccount(t, "agentbox-node"), f.dir, nd.id, f.subnet+".1:"+k.Port())
		kubeConf = fmt.Sprintf("[kubernetes]\nenabled = true\nkubeconfig = %q\nnamespace = %q\nadvertise_url = %q\nlease_duration = \"3s\"\n",
			kc, kubetest.Namespace, "https://"+nd.addr)
	}
	nd.dataDir = filepath.Join(f.dir, nd.id)
	nd.runDir = filepath.Join("/run", name)
	nd.cfgPath = filepath.Join(f.dir, nd.id+".toml")
	// Host uids above the test daemon's ranges (config.Default: 16384
	// ranges of 65536 from 1,000,000), 64 ranges each.
	uidBase := 1_100_000_000 + i*10_000_000
	conf := fmt.Sprintf(`node_id = %q
data_dir = %q
run_dir = %q
socket = %q
listen = %q
guest_binary = %q
cgroup_parent = %q
uid_base = %d
uid_ranges = 64
storage_size_gb = 4
prespawn_inits = 1
reap_interval = "200ms"
default_template = "busybox"
log_level = "warn"
[defaults]
ttl = "10m"
[security]
tls = "self-signed"
[network]
pool = "10.202.%d.0/24"
preview_port = %s
[fleet]
gateway_key_file = %q
%s`, nodeID, nd.dataDir, nd.runDir, filepath.Join(nd.runDir, "agentbox.sock"), nd.addr, env.cfg.GuestBinary, name, uidBase, i, gwPort, keyFile, kubeConf)
	if f.registry != "" {
		host, _, _ := net.SplitHostPort(f.registry)
		conf += fmt.Sprintf("[registry]\ninsecure = [%q]\n", host)
	}
	if err := os.WriteFile(nd.cfgPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	f.runNode(nd)
	if f.opts.kube != nil { // the id it claimed; its dirs keep the slot's name
		b, err := os.ReadFile(filepath.Join(nd.dataDir, "node_id"))
		if err != nil {
			t.Fatalf("a node with node_id = \"auto\" kept no id: %v", err)
		}
		nd.id = strings.TrimSpace(string(b))
	}
	return nd
}

// runNode starts (or starts again) node nd's daemon in its namespace and
// waits for its API.
func (f *fleet) runNode(nd *fleetNode) {
	nd.start(f.t, "nsenter", "--net=/run/netns/"+nd.ns, env.cliBin, "serve", "--config", nd.cfgPath)
	nd.client = nd.waitClient(f.t, "unix://"+filepath.Join(nd.runDir, "agentbox.sock"))
}

func (f *fleet) startGateway(keyFile string) {
	t := f.t
	if f.gw == nil {
		name := filepath.Base(env.cfg.RunDir) + "-gw"
		f.gw = &fleetDaemon{dataDir: filepath.Join(f.dir, "gw"), runDir: filepath.Join("/run", name), cfgPath: filepath.Join(f.dir, "gw.toml")}
		var nodes strings.Builder
		if k := f.opts.kube; k != nil {
			kc := kubetest.Kubeconfig(t, k.ServiceAccount(t, "agentbox-gateway"), f.dir, "gateway", "127.0.0.1:"+k.Port())
			fmt.Fprintf(&nodes, "[kubernetes]\nenabled = true\nkubeconfig = %q\nnamespace = %q\n", kc, kubetest.Namespace)
		}
		for _, nd := range f.nodes {
			if f.opts.kube != nil {
				break // the cluster's
			}
			// The gateway trusts exactly each node's self-signed certificate.
			pemBytes, err := os.ReadFile(filepath.Join(nd.dataDir, "tls", "cert.pem"))
			if err != nil {
				t.Fatal(err)
			}
			block, _ := pem.Decode(pemBytes)
			if block == nil {
				t.Fatalf("%s: no certificate in %s/tls/cert.pem", nd.id, nd.dataDir)
			}
			fmt.Fprintf(&nodes, "[[fleet.node]]\nid = %q\nurl = %q\nfingerprint = %q\n", nd.id, "https://"+nd.addr, daemon.Fingerprint(block.Bytes))
		}
		conf := fmt.Sprintf(`role = "gateway"
data_dir = %q
run_dir = %q
socket = %q
listen = %q
log_level = "info"
[fleet]
key_file = %q
poll_interval = "250ms"
%s%s`, f.gw.dataDir, f.gw.runDir, filepath.Join(f.gw.runDir, "agentbox.sock"), f.gwAddr, keyFile, f.registryLine(), nodes.String())
		if err := os.WriteFile(f.gw.cfgPath, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.gw.start(t, env.cliBin, "serve", "--config", f.gw.cfgPath)
	f.client = f.gw.waitClient(t, "http://"+f.gwAddr)
	// Every node answers the gateway's polls before the tests begin.
	f.waitNodes(func(n api.FleetNode) bool { return n.Available })
}

// registryLine is the gateway's fleet.registry line ("" without one).
func (f *fleet) registryLine() string {
	if f.registry == "" {
		return ""
	}
	return fmt.Sprintf("registry = %q\n", f.registry+"/agentbox")
}

// waitNodes waits until every node of the gateway's membership table
// satisfies ok.
func (f *fleet) waitNodes(ok func(api.FleetNode) bool) []api.FleetNode {
	f.t.Helper()
	var last []api.FleetNode
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		last, err = f.client.FleetNodes(context.Background())
		if err != nil || len(last) != len(f.nodes) {
			continue
		}
		all := true
		for _, n := range last {
			all = all && ok(n)
		}
		if all {
			return last
		}
	}
	f.t.Fatalf("the gateway's nodes never reached the state wanted: %+v, %v", last, err)
	return nil
}

// start runs the daemon's command in a process group of its own.
func (d *fleetDaemon) start(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	logf, err := os.OpenFile(d.cfgPath+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	d.cmd, d.done = cmd, make(chan error, 1)
	go func() { d.done <- cmd.Wait() }()
}

// waitClient waits for the daemon's admin key and an answer on host.
func (d *fleetDaemon) waitClient(t *testing.T, host string) *client.Client {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-d.done:
			log, _ := os.ReadFile(d.cfgPath + ".log")
			t.Fatalf("%s exited: %v\n%s", d.cfgPath, err, log)
		default:
		}
		key, err := os.ReadFile(filepath.Join(d.dataDir, "admin.key"))
		if err != nil {
			continue
		}
		d.key = strings.TrimSpace(string(key))
		c, err := client.New(client.WithHost(host), client.WithAPIKey(d.key), client.WithoutEnvironment())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Health(context.Background()); err == nil {
			return c
		}
	}
	log, _ := os.ReadFile(d.cfgPath + ".log")
	t.Fatalf("%s did not answer within 60 s\n%s", d.cfgPath, log)
	return nil
}

// kill stops the daemon with SIGKILL (sig 0: SIGTERM, and a wait).
func (d *fleetDaemon) kill(sig syscall.Signal) {
	if d == nil || d.cmd == nil || d.cmd.Process == nil {
		return
	}
	select {
	case <-d.done:
		d.done <- nil // already gone; keep the channel answering
		return
	default:
	}
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, sig)
	select {
	case err := <-d.done:
		d.done <- err
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		d.done <- <-d.done
	}
}

func (f *fleet) importBusybox(nd *fleetNode) { f.importTemplate(nd, "busybox") }

// importTemplate imports the built template name (scripts/build-template.sh's
// cache, as main_test.go's importTemplates) into node nd.
func (f *fleet) importTemplate(nd *fleetNode, name string) {
	f.t.Helper()
	dir := "/var/lib/agentbox/build/" + name
	if _, err := os.Stat(filepath.Join(dir, "rootfs", "bin")); err == nil {
		dir = filepath.Join(dir, "rootfs")
	}
	if _, err := nd.client.ImportTemplate(context.Background(), api.ImportTemplateRequest{Name: name, Rootfs: dir, User: "root", Workdir: "/root", Env: builtinTemplateEnv()}); err != nil {
		f.t.Fatalf("importing %s into %s: %v", name, nd.id, err)
	}
}

// stop ends the gateway and the nodes (their sandboxes first) and removes
// what they kept on the host.
func (f *fleet) stop() {
	if f.t.Failed() { // what the daemons said, for the verdict
		for _, d := range append([]*fleetDaemon{f.gw}, f.daemons()...) {
			if d != nil {
				if b, err := os.ReadFile(d.cfgPath + ".log"); err == nil {
					f.t.Logf("%s:\n%s", d.cfgPath+".log", tail(string(b), 4000))
				}
			}
		}
	}
	f.gw.kill(0)
	for _, nd := range f.nodes {
		if nd.client != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if list, err := nd.client.ListSandboxes(ctx, client.ListOptions{}); err == nil {
				for _, sb := range list {
					_ = nd.client.DestroySandbox(ctx, sb.ID)
				}
			}
			cancel()
		}
		nd.kill(0)
		sweepRun(nd.runDir, filepath.Base(nd.runDir))
		_ = exec.Command("ip", "netns", "delete", nd.ns).Run()
	}
	if f.gw != nil {
		_ = os.RemoveAll(f.gw.runDir)
	}
	unmountUnder(f.dir)
	_ = os.RemoveAll(f.dir)
}

// nodeOf is the fleet node whose id prefixes sandbox id.
func (f *fleet) nodeOf(id string) *fleetNode {
	for _, nd := range f.nodes {
		if strings.HasPrefix(id, nd.id) && len(id) == len(nd.id)+12 {
			return nd
		}
	}
	return nil
}

func (f *fleet) daemons() []*fleetDaemon {
	var ds []*fleetDaemon
	for _, nd := range f.nodes {
		ds = append(ds, &nd.fleetDaemon)
	}
	return ds
}
