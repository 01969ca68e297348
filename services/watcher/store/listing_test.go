package store_test

import (
	"context"
	"testing"

	"github.com/weftio/weft/services/watcher/store"
)

// TestListingPages writes a complete listing in pages: each page is stored
// as it comes, nothing is deleted before the last, and Finish deletes what
// no page held, the way one Apply of the whole set does.
func TestListingPages(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	s := r.store(r.bus.JS)
	if _, err := s.Apply(ctx, []store.Object{svc("a", 1), svc("b", 1), svc("gone", 1)}, true); err != nil {
		t.Fatal(err)
	}

	l := s.BeginTypes([]string{"services"}, false)
	res, err := l.Put(ctx, []store.Object{svc("a", 1), svc("b", 2)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Put != 1 || res.Unchanged != 1 {
		t.Errorf("first page: %+v, want b written and a unchanged", res)
	}
	if !r.live("gone") {
		t.Fatal("an object no page has named yet was deleted before the listing finished")
	}
	if _, err := l.Put(ctx, []store.Object{svc("c", 1)}); err != nil {
		t.Fatal(err)
	}
	if !r.live("c") {
		t.Error("the second page was not written before Finish")
	}
	res, err = l.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Put != 2 || res.Unchanged != 1 || res.Deleted != 1 || res.Counts["services"] != 3 {
		t.Errorf("listing: %+v, want 2 put, 1 unchanged, 1 deleted, 3 counted", res)
	}
	for name, want := range map[string]bool{"a": true, "b": true, "c": true, "gone": false} {
		if got := r.live(name); got != want {
			t.Errorf("%s live = %v, want %v", name, got, want)
		}
	}
	if n := s.Count("services"); n != 3 {
		t.Errorf("Count = %d, want 3", n)
	}
}

// TestListingFailedDelete fails the listing when a delete fails, and the
// next listing deletes the object.
func TestListingFailedDelete(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	f := &flaky{js: r.bus.JS}
	s := r.store(f)
	if _, err := s.Apply(ctx, []store.Object{svc("a", 1), svc("old", 1)}, true); err != nil {
		t.Fatal(err)
	}
	l := s.BeginTypes([]string{"services"}, false)
	if _, err := l.Put(ctx, []store.Object{svc("a", 2)}); err != nil {
		t.Fatal(err)
	}
	f.failing.Store(true) // the delete of "old" fails
	if _, err := l.Finish(ctx); err == nil {
		t.Fatal("Finish succeeded though a delete failed")
	}
	if !r.live("old") {
		t.Error("old deleted though its delete failed")
	}
	f.failing.Store(false)
	l = s.BeginTypes([]string{"services"}, false)
	if _, err := l.Put(ctx, []store.Object{svc("a", 2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if r.live("old") {
		t.Error("the next listing did not delete old")
	}
}
