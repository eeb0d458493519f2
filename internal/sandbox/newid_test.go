package sandbox

import (
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/store"
)

// A daemon with node_id starts every id with it; one without hands out
// the 12-character ids it always did.
func TestNewIDCarriesNode(t *testing.T) {
	cfg := config.Default()
	s := &Service{cfg: &cfg}
	id := s.newID()
	if len(id) != api.IDRandLen || !api.InIDAlphabet(id) {
		t.Errorf("id without node_id = %q, want 12 characters of a-z2-7", id)
	}
	if _, ok := api.NodeOfID(id); ok {
		t.Errorf("NodeOfID(%q) names a node", id)
	}
	cfg.NodeID = "n2a"
	seen := map[string]bool{}
	for range 1000 {
		id = s.newID()
		if node, ok := api.NodeOfID(id); !ok || node != "n2a" {
			t.Fatalf("NodeOfID(%q) = %q, %v; want n2a", id, node, ok)
		}
		if seen[id] {
			t.Fatalf("id %s twice", id)
		}
		seen[id] = true
	}
	sb := toAPI(&store.SandboxRecord{ID: id})
	if sb.Node != "n2a" {
		t.Errorf("toAPI of %s: node %q, want n2a", id, sb.Node)
	}
}
