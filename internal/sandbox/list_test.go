package sandbox

import (
	"context"
	"errors"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// TestListPages walks the list a page at a time: every sandbox once, in
// the order they were created, even when several share a millisecond.
func TestListPages(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	var want []string
	for range 7 {
		want = append(want, create(t, s, nil).ID)
	}
	all, err := s.List(ctx, acme, ListFilter{})
	if err != nil || len(all) != len(want) {
		t.Fatalf("List = %d sandboxes, %v; want %d", len(all), err, len(want))
	}
	var got []string
	cursor, pages := "", 0
	for {
		page, next, err := s.ListPage(ctx, acme, ListFilter{Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		for _, sb := range page {
			got = append(got, sb.ID)
		}
		if next == "" {
			break
		}
		if len(page) != 3 {
			t.Fatalf("page %d has %d sandboxes and a next cursor, want 3", pages, len(page))
		}
		cursor = next
	}
	if pages != 3 {
		t.Errorf("%d pages of 3 for 7 sandboxes, want 3", pages)
	}
	var order []string
	for _, sb := range all {
		order = append(order, sb.ID)
	}
	if len(got) != len(order) {
		t.Fatalf("pages gave %v, want %v", got, order)
	}
	for i := range got {
		if got[i] != order[i] {
			t.Fatalf("pages gave %v, want %v", got, order)
		}
	}
	for _, bad := range []string{"x", "MTox", store.Position{}.Cursor()[:3] + "!"} {
		if _, _, err := s.ListPage(ctx, acme, ListFilter{Limit: 3, Cursor: bad}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("cursor %q: %v, want invalid", bad, err)
		}
	}
	if _, _, err := s.ListPage(ctx, acme, ListFilter{Limit: MaxListLimit + 1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("limit over the cap: %v, want invalid", err)
	}
}

// FuzzDecodeCursor: a cursor from a client decodes to a position or is
// refused as invalid, and every position round-trips.
func FuzzDecodeCursor(f *testing.F) {
	f.Add("MToxNzAwMDAwMDAwMDAwOnNieC0x")
	f.Add("")
	f.Add("MTo6")
	f.Fuzz(func(t *testing.T, c string) {
		p, err := store.ParseCursor(c)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("ParseCursor(%q): %v, not an invalid-argument error", c, err)
			}
			return
		}
		q, err := store.ParseCursor(p.Cursor())
		if err != nil || !q.CreatedAt.Equal(p.CreatedAt) || q.ID != p.ID {
			t.Fatalf("round trip of %+v: %+v, %v", p, q, err)
		}
	})
}
