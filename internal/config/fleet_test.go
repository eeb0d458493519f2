package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFleetConfig(t *testing.T) {
	tests := []struct {
		name, text string
		wantErr    string // substring; "" means success
	}{
		{"node id", `node_id = "n2a"`, ""},
		{"node id with digits", `node_id = "a27"`, ""},
		{"node id too long", `node_id = "n1ab"`, "node_id must be exactly 3 characters"},
		{"node id bad chars", `node_id = "N1A"`, "node_id must be exactly 3 characters"},
		{"node id with 1", `node_id = "n1a"`, "node_id must be exactly 3 characters"},
		{"unknown role", `role = "master"`, `role must be "node"`},
		{"node with gateway key", "[fleet]\ngateway_key_file = \"/etc/agentbox/fleet.key\"", ""},
		{"relative gateway key", "[fleet]\ngateway_key_file = \"fleet.key\"", "fleet.gateway_key_file must be an absolute path"},
		{"node with fleet nodes", "[[fleet.node]]\nid = \"n2a\"\nurl = \"http://127.0.0.1:7423\"", "set role = \"gateway\""},
		{"gateway", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"http://192.0.2.11:7423\"\n[[fleet.node]]\nid = \"n2b\"\nurl = \"https://node2:7423\"", ""},
		{"gateway without key", "role = \"gateway\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"http://192.0.2.11:7423\"", "a gateway needs fleet.key_file"},
		{"gateway without nodes", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"", "at least one [[fleet.node]]"},
		{"gateway duplicate node", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"http://a:1\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"http://b:1\"", "listed twice"},
		{"gateway pinned node", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"https://192.0.2.11:7423\"\nfingerprint = \"ab\"", ""},
		{"gateway pin over http", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"http://192.0.2.11:7423\"\nfingerprint = \"ab\"", "make it https://"},
		{"gateway pin and ca", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"https://192.0.2.11:7423\"\nfingerprint = \"ab\"\nca_file = \"/ca.pem\"", "not both"},
		{"gateway bad url", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"192.0.2.11:7423\"", "url must be the node's API"},
		{"gateway bad node id", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\n[[fleet.node]]\nid = \"node1\"\nurl = \"http://a:1\"", "must be the node's node_id"},
		{"gateway with node_id", "role = \"gateway\"\nnode_id = \"gw1\"\n[fleet]\nkey_file = \"/k\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"http://a:1\"", "node_id is a node's setting"},
		{"poll interval", "[fleet]\npoll_interval = \"250ms\"", ""},
		{"poll interval number", "[fleet]\npoll_interval = 5", "fleet.poll_interval must be a duration string"},
		{"poll interval too short", "[fleet]\npoll_interval = \"1ms\"", "fleet.poll_interval must be between"},
		{"candidates", "[fleet]\ncandidates = 0", "fleet.candidates must be between 1 and 64"},
		{"gateway registry", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\nregistry = \"192.0.2.1:5000/agentbox\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"http://a:1\"", ""},
		{"gateway registry deep", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\nregistry = \"reg.example/team/agentbox\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"http://a:1\"", ""},
		{"gateway registry no prefix", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\nregistry = \"192.0.2.1:5000\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"http://a:1\"", "fleet.registry must be"},
		{"gateway registry upper", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\nregistry = \"192.0.2.1:5000/Agentbox\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"http://a:1\"", "lowercase path components"},
		{"gateway registry no port", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\nregistry = \"registry/agentbox\"\n[[fleet.node]]\nid = \"n2a\"\nurl = \"http://a:1\"", "needs a port or a dot"},
		{"node with registry", "[fleet]\nregistry = \"192.0.2.1:5000/agentbox\"", "gateway's settings"},
		{"kube node auto", "node_id = \"auto\"\n[kubernetes]\nenabled = true", ""},
		{"kube node own id", "node_id = \"n2a\"\n[kubernetes]\nenabled = true\nkubeconfig = \"/etc/kube.conf\"\nnamespace = \"fleet-1\"\nadvertise_url = \"https://192.0.2.11:7423\"\nlease_duration = \"10s\"", ""},
		{"auto without kube", "node_id = \"auto\"", "set [kubernetes] enabled = true"},
		{"kube node without id", "[kubernetes]\nenabled = true", "needs node_id"},
		{"kube relative kubeconfig", "node_id = \"auto\"\n[kubernetes]\nenabled = true\nkubeconfig = \"kube.conf\"", "kubernetes.kubeconfig must be an absolute path"},
		{"kube bad namespace", "node_id = \"auto\"\n[kubernetes]\nenabled = true\nnamespace = \"Fleet_1\"", "kubernetes.namespace must be"},
		{"kube short lease", "node_id = \"auto\"\n[kubernetes]\nenabled = true\nlease_duration = \"1s\"", "kubernetes.lease_duration must be between"},
		{"kube bad advertise", "node_id = \"auto\"\n[kubernetes]\nenabled = true\nadvertise_url = \"192.0.2.11:7423\"", "kubernetes.advertise_url must be"},
		{"kube gateway without nodes", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\n[kubernetes]\nenabled = true", ""},
		{"kube gateway advertise", "role = \"gateway\"\n[fleet]\nkey_file = \"/k\"\n[kubernetes]\nenabled = true\nadvertise_url = \"https://a:1\"", "a node's setting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.toml", tt.text)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if tt.name == "gateway" && (!c.IsGateway() || len(c.Fleet.Nodes) != 2 || c.Fleet.Nodes[1].ID != "n2b" || c.Fleet.Candidates != 3) {
					t.Errorf("gateway config = %+v", c.Fleet)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Parse error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestReadFleetKey(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(strings.Repeat("k", 40)+"\n"), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("tooshort"), 0o600)
	if s, err := ReadFleetKey("fleet.key_file", good); err != nil || s != strings.Repeat("k", 40) {
		t.Errorf("ReadFleetKey(good) = %q, %v", s, err)
	}
	if _, err := ReadFleetKey("fleet.key_file", short); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("ReadFleetKey(short) error = %v", err)
	}
	if _, err := ReadFleetKey("fleet.key_file", filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "fleet.key_file") {
		t.Errorf("ReadFleetKey(missing) error = %v", err)
	}
}
