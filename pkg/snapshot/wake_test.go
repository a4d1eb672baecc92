package snapshot

import "testing"

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestChangedIn: a namespace's channel is closed by a change to that
// namespace, not by changes to others or by progress, until the sweep that
// keeps a sleeping cursor from being overrun (a quarter of the feed's
// capacity of changes), and by every continuity break.
func TestChangedIn(t *testing.T) {
	s := NewStore(StoreConfig{EventHistory: 16}) // sweep every 4 changes
	s.Replace([]*Entry{entry("a", "p1", 1, ""), entry("b", "p1", 2, "")}, 10)

	a := s.ChangedIn("a")
	s.MarkProgress(11)
	s.Apply(Change{Entry: entry("b", "p2", 12, "")}, 12)
	if closed(a) {
		t.Fatal("namespace a woken by progress or a change to namespace b")
	}
	cur, err := s.Subscribe(12)
	if err != nil {
		t.Fatal(err)
	}
	s.Apply(Change{Deleted: true, Entry: &Entry{Key: "a/p1"}}, 13) // known by its key only
	if !closed(a) {
		t.Fatal("namespace a not woken by the deletion of a/p1")
	}
	if evs, err := cur.Read(nil); err != nil || len(evs) != 1 || evs[0].Object.Key != "a/p1" {
		t.Fatalf("after the wake the cursor reads %v, %v; want the deletion", feedEvents(evs), err)
	}

	a = s.ChangedIn("a")
	s.Apply(Change{Entry: entry("b", "p3", 14, "")}, 14)
	if closed(a) {
		t.Fatal("namespace a woken by one change to namespace b")
	}
	s.Apply(Change{Entry: entry("b", "p4", 15, "")}, 15) // the fourth since the relist
	if !closed(a) {
		t.Fatal("namespace a not woken by the sweep after a quarter of the feed's capacity")
	}

	a = s.ChangedIn("a")
	s.Replace([]*Entry{entry("b", "p1", 2, "")}, 20)
	if !closed(a) {
		t.Fatal("namespace a not woken by a relist")
	}
	a = s.ChangedIn("a")
	s.Unsync()
	if !closed(a) {
		t.Fatal("namespace a not woken by Unsync")
	}
	a = s.ChangedIn("a")
	s.Stop()
	if !closed(a) {
		t.Fatal("namespace a not woken by Stop")
	}
}
