package gateway

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// events is an ordered log of what happened, shared by a test and its
// pushes.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, s)
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log)
}

// A push queued while a fork is in flight starts once the fork ends;
// pushes run one at a time, in order.
func TestPushQueueWaitsForForks(t *testing.T) {
	var q pushQueue
	var ev events
	done := make(chan struct{}, 2)
	q.forkStarted()
	for _, name := range []string{"a", "b"} {
		q.add(func(ctx context.Context, yields int) error {
			ev.add("start " + name)
			ev.add("end " + name)
			done <- struct{}{}
			return nil
		})
	}
	time.Sleep(50 * time.Millisecond) // a chance to start too early
	ev.add("fork ended")
	q.forkEnded()
	<-done
	<-done
	want := []string{"fork ended", "start a", "end a", "start b", "end b"}
	if got := ev.get(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// A fork that starts while a push runs calls it off; the push runs again,
// whole, once the fork ends.
func TestPushQueueGivesWay(t *testing.T) {
	var q pushQueue
	var ev events
	running := make(chan struct{})
	done := make(chan int)
	q.add(func(ctx context.Context, yields int) error {
		ev.add("start")
		if yields == 0 {
			close(running)
			<-ctx.Done()
			ev.add("called off: " + context.Cause(ctx).Error())
			return ctx.Err()
		}
		ev.add("end")
		done <- yields
		return nil
	})
	<-running
	q.forkStarted()
	time.Sleep(50 * time.Millisecond) // a chance to start again too early
	ev.add("fork ended")
	q.forkEnded()
	if yields := <-done; yields != 1 {
		t.Errorf("the push ran again with yields %d, want 1", yields)
	}
	want := []string{"start", "called off: " + errGaveWay.Error(), "fork ended", "start", "end"}
	if got := ev.get(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// A push that waited maxDefer runs while forks are in flight, and a fork
// does not call it off: every snapshot reaches the registry under a
// steady stream of forks.
func TestPushQueueMaxDefer(t *testing.T) {
	q := pushQueue{maxDefer: 20 * time.Millisecond}
	q.forkStarted() // never ends
	running := make(chan context.Context)
	proceed := make(chan struct{})
	done := make(chan error)
	q.add(func(ctx context.Context, yields int) error {
		running <- ctx
		<-proceed
		done <- ctx.Err()
		return nil
	})
	<-running
	q.forkStarted()
	close(proceed)
	if err := <-done; err != nil {
		t.Errorf("a push past maxDefer was called off by a fork: %v", err)
	}
}
