package lifecycle

import (
	"slices"
	"testing"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/cgroups/cgroupstest"
)

// TestExits: an unknown sandbox reads as exited; Set, Swap and Take keep
// one channel per id.
func TestExits(t *testing.T) {
	var x Exits
	isClosed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	if !isClosed(x.Exited("a")) {
		t.Error("Exited of an unknown sandbox is not closed")
	}
	a1, a2 := make(chan struct{}), make(chan struct{})
	x.Set("a", a1)
	if isClosed(x.Exited("a")) {
		t.Error("Exited of a running sandbox is closed")
	}
	if old, ok := x.Swap("a", a2); !ok || old != (<-chan struct{})(a1) {
		t.Errorf("Swap returned %v, %v; want the first channel", old, ok)
	}
	close(a1)
	if isClosed(x.Exited("a")) {
		t.Error("Exited follows the replaced init")
	}
	if ch, ok := x.Take("a"); !ok || ch != (<-chan struct{})(a2) {
		t.Errorf("Take returned %v, %v", ch, ok)
	}
	if _, ok := x.Get("a"); ok {
		t.Error("a taken sandbox is still known")
	}
}

// TestUndo: Run undoes last first, once; Release keeps everything.
func TestUndo(t *testing.T) {
	var got []int
	var u Undo
	u.Add(func() { got = append(got, 1) })
	u.Add(func() { got = append(got, 2) })
	u.Run()
	u.Run()
	if !slices.Equal(got, []int{2, 1}) {
		t.Errorf("Run ran %v, want [2 1] once", got)
	}
	got = nil
	var kept Undo
	kept.Add(func() { got = append(got, 1) })
	kept.Release()
	kept.Run()
	if got != nil {
		t.Errorf("Run after Release ran %v", got)
	}
}

// The gvisor and microvm tiers' start-up cleanup leaves the container
// tier's waiting inits alone (it killed them at every daemon start: "a
// pre-spawned sandbox init exited while waiting").
func TestRemoveLeftoversLeavesWaitingInits(t *testing.T) {
	// A leftover, a kept sandbox and a waiting init of the container tier.
	m := &cgroupstest.Parent{Lists: [][]string{{"leftover", "kept", driver.PrespawnCgroupPrefix + "1a2b3c4d-1"}}}
	if _, err := RemoveLeftovers(m, map[string]bool{"kept": true}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Destroyed, []string{"leftover"}) {
		t.Errorf("destroyed %v, want only the leftover", m.Destroyed)
	}
}
