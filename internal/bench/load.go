package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
)

// throughput runs opts.Concurrency clients for opts.LoadDuration each:
// create-then-destroy cycles (so the number of sandboxes stays steady),
// then buffered execs of `true`, one sandbox per client.
func (r *runner) throughput(ctx context.Context) {
	t := r.templates[0]
	if r.want("throughput/creates") {
		res := r.load(ctx, "throughput/creates", func(ctx context.Context, _ int) (time.Duration, error) {
			return r.createThenDestroy(ctx, createReq(t))
		})
		res.RateUnit = "creates/s"
		res.Note = "each client creates, then destroys; latencies are of the create"
		r.add(res)
	}
	if !r.want("throughput/execs") {
		return
	}
	ids := make([]string, r.opts.Concurrency)
	defer func() {
		for _, id := range ids {
			if id != "" {
				_ = r.destroy(ctx, id)
			}
		}
	}()
	for i := range ids {
		sb, err := r.c.CreateSandbox(ctx, createReq(t))
		if err != nil {
			r.note("throughput/execs: skipped, could not create its sandboxes: %v", err)
			return
		}
		ids[i] = sb.ID
	}
	res := r.load(ctx, "throughput/execs", func(ctx context.Context, worker int) (time.Duration, error) {
		return timed(func() error {
			res, err := r.c.Exec(ctx, ids[worker], api.ExecRequest{Cmd: []string{"true"}})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("true exited %d", res.ExitCode)
			}
			return err
		})
	})
	res.RateUnit = "execs/s"
	res.Note = "one sandbox per client"
	r.add(res)
}

// load runs op from opts.Concurrency goroutines until opts.LoadDuration
// has passed, and returns the latencies and the rate of successes.
func (r *runner) load(ctx context.Context, name string, op func(ctx context.Context, worker int) (time.Duration, error)) Result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		ds       []time.Duration
		errs     int
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(r.opts.LoadDuration)
	for w := 0; w < r.opts.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				d, err := op(ctx, w)
				mu.Lock()
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					ds = append(ds, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := Result{Name: name, Group: GroupThroughput, Summary: Summarize(ds), Errors: errs}
	res.Rate = float64(len(ds)) / elapsed.Seconds()
	if firstErr != nil {
		r.note("%s: %d operations failed; first error: %v", name, errs, firstErr)
	}
	return res
}
