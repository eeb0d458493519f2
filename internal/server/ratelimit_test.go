package server

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := newLimiter(10, 5)
	t0 := time.Unix(1000, 0)
	for i := 0; i < 5; i++ {
		if ok, _ := l.allow("a", t0); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := l.allow("a", t0)
	if ok || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("6th request = %v, wait %v; want refused, wait <= 100ms", ok, wait)
	}
	if ok, _ := l.allow("b", t0); !ok {
		t.Error("another key shares the bucket")
	}
	if ok, _ := l.allow("a", t0.Add(100*time.Millisecond)); !ok {
		t.Error("no token after 100 ms at 10/s")
	}
	if ok, _ := l.allow("a", t0.Add(100*time.Millisecond)); ok {
		t.Error("two tokens after 100 ms at 10/s")
	}
	// A long idle period refills to the burst, not beyond.
	t1 := t0.Add(time.Hour)
	n := 0
	for {
		if ok, _ := l.allow("a", t1); !ok {
			break
		}
		n++
	}
	if n != 5 {
		t.Errorf("after an hour idle %d requests passed, want the burst 5", n)
	}
	var none *limiter
	if ok, _ := none.allow("x", t0); !ok {
		t.Error("a disabled limiter refused")
	}
}

func TestLimiterPrunes(t *testing.T) {
	l := newLimiter(1000, 1)
	t0 := time.Unix(1000, 0)
	for i := 0; i < maxBuckets+10; i++ {
		l.allow(string(rune(i)), t0.Add(time.Duration(i)*time.Second))
	}
	if len(l.buckets) > maxBuckets {
		t.Errorf("%d buckets, want at most %d", len(l.buckets), maxBuckets)
	}
}
