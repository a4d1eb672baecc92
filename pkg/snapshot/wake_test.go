package snapshot

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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

// TestChangedOn: a change wakes the watchers of the field values its object
// has and had before it (so that an object moving from one value to
// another wakes the watchers it leaves and those it enters), and no others.
func TestChangedOn(t *testing.T) {
	node := func(v string) FieldValue { return FieldValue{Field: "spec.nodeName", Value: v} }
	name := func(v string) FieldValue { return FieldValue{Field: FieldName, Value: v} }
	ns := func(v string) FieldValue { return FieldValue{Field: FieldNamespace, Value: v} }
	watched := []FieldValue{node("n1"), node("n2"), node("n3"), name("p1"), name("p2"), ns("a"), ns("b"), {Field: "status.phase", Value: "Running"}}
	tests := []struct {
		name   string
		change Change
		want   []FieldValue
	}{
		{
			name:   "modified on its node",
			change: Change{Entry: entry("a", "p1", 12, "n1")},
			want:   []FieldValue{node("n1"), name("p1"), ns("a")},
		},
		{
			name:   "moved from n1 to n2",
			change: Change{Entry: entry("a", "p1", 12, "n2")},
			want:   []FieldValue{node("n1"), node("n2"), name("p1"), ns("a")},
		},
		{
			name:   "added",
			change: Change{Entry: entry("b", "p2", 12, "n3")},
			want:   []FieldValue{node("n3"), name("p2"), ns("b")},
		},
		{
			name:   "deleted, known by its key only",
			change: Change{Deleted: true, Entry: &Entry{Key: "a/p1"}},
			want:   []FieldValue{node("n1"), name("p1"), ns("a")},
		},
		{
			name:   "deleted, with its last state",
			change: Change{Deleted: true, Entry: entry("a", "p1", 12, "n2")},
			want:   []FieldValue{node("n1"), node("n2"), name("p1"), ns("a")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(StoreConfig{EventHistory: 1024})
			s.Replace([]*Entry{entry("a", "p1", 1, "n1")}, 10)
			chans := map[FieldValue]<-chan struct{}{}
			for _, k := range watched {
				chans[k] = s.ChangedOn(k)
			}
			s.MarkProgress(11)
			s.Apply(tc.change, 12)
			var got []FieldValue
			for _, k := range watched {
				if closed(chans[k]) {
					got = append(got, k)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("woken (-want +got):\n%s", diff)
			}
		})
	}
}

// TestChangedOnSweepAndReset: a field value not touched is still woken
// once per quarter of the feed's capacity of changes, so that its
// watcher's cursor is never overrun, and by every continuity break.
func TestChangedOnSweepAndReset(t *testing.T) {
	k := FieldValue{Field: "spec.nodeName", Value: "idle"}
	tests := []struct {
		name  string
		apply int // changes to other nodes
		reset func(*Store)
		want  bool
	}{
		{name: "three changes elsewhere", apply: 3, want: false},
		{name: "the sweep after four", apply: 4, want: true},
		{name: "relist", reset: func(s *Store) { s.Replace(nil, 100) }, want: true},
		{name: "unsync", reset: (*Store).Unsync, want: true},
		{name: "stop", reset: (*Store).Stop, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(StoreConfig{EventHistory: 16}) // sweep every 4 changes
			s.Replace(nil, 10)
			ch := s.ChangedOn(k)
			for i := range tc.apply {
				s.Apply(Change{Entry: entry("a", fmt.Sprintf("p%d", i), uint64(11+i), "busy")}, uint64(11+i))
			}
			if tc.reset != nil {
				tc.reset(s)
			}
			if got := closed(ch); got != tc.want {
				t.Errorf("woken %v, want %v", got, tc.want)
			}
		})
	}
}
