package kube

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// informer lists and watches ri's objects that match selector.
// (client-go's dynamicinformer would do it too, but links every typed
// informer of the Kubernetes API into the daemon: 16 MB more.)
func informer(ri dynamic.ResourceInterface, selector string) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return ri.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
}

// follow runs infs until ctx is done, waits (a minute at most) until
// their caches hold the cluster's objects, then calls fn once before it
// returns, and again from one goroutine after every change and, with
// tick > 0, every tick. what names the objects in the error of a sync
// that does not come.
func (c *Client) follow(ctx context.Context, what string, tick time.Duration, fn func(), infs ...cache.SharedIndexInformer) error {
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { poke() }, UpdateFunc: func(any, any) { poke() }, DeleteFunc: func(any) { poke() }}
	synced := make([]cache.InformerSynced, len(infs))
	for i, inf := range infs {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
		_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			c.log.Warn("kubernetes watch failed; retrying", "watch", what, "err", err)
		})
		synced[i] = inf.HasSynced
		go inf.RunWithContext(ctx)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), synced...) {
		return fmt.Errorf("kubernetes: the %s (namespace %s) did not sync within a minute: are the CRDs installed (deploy/crds) and may the service account list them (deploy/rbac.yaml)?", what, c.ns)
	}
	fn()
	go func() {
		var ticks <-chan time.Time
		if tick > 0 {
			t := time.NewTicker(tick)
			defer t.Stop()
			ticks = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-ticks:
			}
			fn()
		}
	}()
	return nil
}
