package gateway

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Background pushes of spread forks' snapshots to the fleet's registry
// (pushLater): the durable copy a restore elsewhere pulls once the
// parent's node is gone. Packing a snapshot (tar, zstd on every CPU,
// two sha256) and uploading it keeps a node's CPUs and disk busy for
// about as long as a fork's stream of the same bytes, so a push beside a
// fork made that fork slower: a 100 MB stream took 764 ms beside the
// previous fork's push against 430-480 ms alone on the 2-core test host
// (docs/cluster.md). So the gateway runs these pushes one at a time, and
// only while no spread fork is in flight: a fork that starts while one
// runs calls it off (the node stops packing or uploading within a MiB:
// storage's ctxReader) and it starts again, from the top, once the forks
// are done. A push queued for maxDefer runs whatever forks come, and is
// not called off: under a steady stream of forks every snapshot still
// reaches the registry within about maxDefer and its push. A restore
// elsewhere that needs a snapshot whose push is queued or was called off
// pushes it itself at once (pushSnapshot).

// maxDefer is how long a background push gives way to spread forks at
// most.
const maxDefer = 30 * time.Second

// errGaveWay is the cause of a background push called off for a spread
// fork; the push runs again later.
var errGaveWay = errors.New("a background push gave way to a spread fork; it runs again once no fork is in flight")

// pushJob is one background push.
type pushJob struct {
	run    func(ctx context.Context, yields int) error
	queued time.Time
	yields int // times it gave way
}

// pushQueue runs background pushes one at a time, giving way to spread
// forks (forkStarted, forkEnded). Its zero value is ready, with maxDefer.
type pushQueue struct {
	maxDefer time.Duration // 0: maxDefer

	mu      sync.Mutex
	jobs    []*pushJob
	forks   int                     // spread forks in flight
	working bool                    // a worker goroutine runs
	cancel  context.CancelCauseFunc // the push running, while it may give way
	wake    chan struct{}
}

// add queues a push. run gets a context that is cancelled with cause
// errGaveWay when a fork calls it off (it is then queued again, first,
// if it returned an error) and the times it gave way before.
func (q *pushQueue) add(run func(ctx context.Context, yields int) error) {
	q.mu.Lock()
	if q.wake == nil {
		q.wake = make(chan struct{}, 1)
	}
	q.jobs = append(q.jobs, &pushJob{run: run, queued: time.Now()})
	start := !q.working
	q.working = true
	q.mu.Unlock()
	q.poke()
	if start {
		go q.work()
	}
}

// forkStarted notes a spread fork in flight and calls off the push
// running, unless it waited maxDefer already.
func (q *pushQueue) forkStarted() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.forks++
	if q.cancel != nil {
		q.cancel(errGaveWay)
		q.cancel = nil
	}
}

// forkEnded notes the end of a spread fork; the queue goes on when it
// was the last one.
func (q *pushQueue) forkEnded() {
	q.mu.Lock()
	q.forks--
	q.mu.Unlock()
	q.poke()
}

func (q *pushQueue) poke() {
	q.mu.Lock()
	wake := q.wake
	q.mu.Unlock()
	if wake == nil {
		return
	}
	select {
	case wake <- struct{}{}:
	default:
	}
}

// work runs the queue until it is empty.
func (q *pushQueue) work() {
	for {
		j, ctx, cancel := q.next()
		if j == nil {
			return
		}
		err := j.run(ctx, j.yields)
		q.mu.Lock()
		q.cancel = nil
		if err != nil && errors.Is(context.Cause(ctx), errGaveWay) {
			j.yields++
			q.jobs = append([]*pushJob{j}, q.jobs...)
		}
		q.mu.Unlock()
		cancel(nil)
	}
}

// next waits for the push to run next: the first queued, once no fork is
// in flight (then a fork calls it off) or once it waited maxDefer (then
// it runs to its end). nil when the queue is empty: the worker ends.
func (q *pushQueue) next() (*pushJob, context.Context, context.CancelCauseFunc) {
	limit := q.maxDefer
	if limit <= 0 {
		limit = maxDefer
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if len(q.jobs) == 0 {
			q.working = false
			return nil, nil, nil
		}
		j := q.jobs[0]
		wait := time.Until(j.queued.Add(limit))
		if q.forks == 0 || wait <= 0 {
			q.jobs = q.jobs[1:]
			ctx, cancel := context.WithCancelCause(context.Background())
			if wait > 0 {
				q.cancel = cancel // a fork may call it off
			}
			return j, ctx, cancel
		}
		wake := q.wake
		q.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-wake:
		case <-t.C:
		}
		t.Stop()
		q.mu.Lock()
	}
}

// gaveWay reports whether err ended a push called off for a fork.
func gaveWay(err error) bool { return errors.Is(err, errGaveWay) }
