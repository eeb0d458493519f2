package sandbox

import (
	"context"
	"errors"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/store"
)

// TestAttachNetEarlyNothingToDo: no early attach (and no Started hook)
// without egress, without a network manager, or when the network is
// prepared before create; waiting on none says it never ran.
func TestAttachNetEarlyNothingToDo(t *testing.T) {
	s := &Service{}
	for name, c := range map[string]struct {
		n    *api.Network
		spec driver.Spec
	}{
		"no network":     {nil, driver.Spec{}},
		"egress none":    {&api.Network{Egress: api.EgressNone}, driver.Spec{}},
		"no manager":     {&api.Network{Egress: api.EgressInternet}, driver.Spec{}},
		"prepared netns": {&api.Network{Egress: api.EgressInternet}, driver.Spec{NetNS: "/run/x/netns"}},
	} {
		rec := &store.SandboxRecord{ID: "x"}
		rec.Spec.Network = c.n
		spec := c.spec
		en := s.attachNetEarly(context.Background(), rec, &spec)
		if en != nil || spec.Started != nil || spec.ResolvConf != "" {
			t.Errorf("%s: early attach set up: %v, Started %v, ResolvConf %q", name, en != nil, spec.Started != nil, spec.ResolvConf)
		}
		if ran, err := en.wait(); ran || err != nil {
			t.Errorf("%s: wait = %v, %v; want false, nil", name, ran, err)
		}
	}
}

// TestEarlyNetWait: wait says "not run" before Started, then joins the
// attach and returns its error.
func TestEarlyNetWait(t *testing.T) {
	en := &earlyNet{}
	if ran, _ := en.wait(); ran {
		t.Fatal("wait before Started says it ran")
	}
	en.done = make(chan struct{})
	go func() { defer close(en.done); en.err = context.Canceled }()
	if ran, err := en.wait(); !ran || err != context.Canceled {
		t.Fatalf("wait = %v, %v; want true, context.Canceled", ran, err)
	}
}

// TestEarlyNetRestart: a second Started (the first init was gone) attaches
// only once the first attach ended, and wait returns the second's outcome.
func TestEarlyNetRestart(t *testing.T) {
	en := &earlyNet{}
	release := make(chan struct{})
	firstDone := make(chan struct{})
	en.start(func() error {
		<-release
		close(firstDone)
		return errors.New("the init died")
	})
	en.start(func() error {
		select {
		case <-firstDone:
			return nil
		default:
			return errors.New("the second attach ran before the first ended")
		}
	})
	close(release)
	if ran, err := en.wait(); !ran || err != nil {
		t.Fatalf("wait = %v, %v; want true, nil", ran, err)
	}
}
