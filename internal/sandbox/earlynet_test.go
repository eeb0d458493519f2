package sandbox

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/store"
)

// TestNetAttachFor: the way a sandbox's network is connected follows
// its egress and its tier's abilities; a sandbox without egress, or a
// daemon without a network manager, gets no Started hook.
func TestNetAttachFor(t *testing.T) {
	s := &Service{}
	internet := &api.Network{Egress: api.EgressInternet}
	for name, c := range map[string]struct {
		n    *api.Network
		drv  driver.Driver
		want string
	}{
		"no network":         {nil, notifyDriver{}, "sandbox.noNet"},
		"egress none":        {&api.Network{Egress: api.EgressNone}, notifyDriver{}, "sandbox.noNet"},
		"fixed at start":     {internet, netnsDriver{}, "*sandbox.preparedNet"},
		"start notifier":     {internet, notifyDriver{}, "sandbox.afterNet"}, // no manager
		"neither":            {internet, plainDriver{}, "sandbox.afterNet"},
		"fixed, no notifier": {&api.Network{Egress: api.EgressCustom}, netnsDriver{}, "*sandbox.preparedNet"},
	} {
		rec := &store.SandboxRecord{ID: "x"}
		rec.Spec.Network = c.n
		na := s.netAttachFor(rec, c.drv)
		if got := fmt.Sprintf("%T", na); got != c.want {
			t.Errorf("%s: %s, want %s", name, got, c.want)
		}
		if _, ok := na.(*preparedNet); ok {
			continue // before would make a namespace
		}
		var spec driver.Spec
		if err := na.before(context.Background(), &spec); err != nil || spec.Started != nil || spec.ResolvConf != "" {
			t.Errorf("%s: before = %v, Started %v, ResolvConf %q", name, err, spec.Started != nil, spec.ResolvConf)
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

// plainDriver, netnsDriver and notifyDriver are drivers that only declare
// their network abilities (netAttachFor reads nothing else).
type plainDriver struct{ driver.Driver }
type netnsDriver struct{ driver.Driver }
type notifyDriver struct{ driver.Driver }

func (netnsDriver) TakesNetNSAtCreate() {}
func (notifyDriver) CallsStarted()      {}
