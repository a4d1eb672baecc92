package snapshot

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/sharding"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWaitIn: a namespace's wait ends with a change to that namespace,
// not with progress or changes to other namespaces, however many (the
// cursor skips those, TestSkip), and with every continuity break.
func TestWaitIn(t *testing.T) {
	s := NewStore(StoreConfig{EventHistory: 16})
	s.Replace([]*Entry{entry("a", "p1", 1, ""), entry("b", "p1", 2, "")}, 10)

	a := s.WaitIn("a")
	s.MarkProgress(11)
	for rv := uint64(12); rv < 100; rv++ { // more than the feed holds
		s.Apply(Change{Entry: entry("b", "p2", rv, "")}, rv)
	}
	if closed(a.Done()) {
		t.Fatal("namespace a woken by progress or changes to namespace b")
	}
	cur, err := s.Subscribe(99)
	if err != nil {
		t.Fatal(err)
	}
	s.Apply(Change{Deleted: true, Entry: &Entry{Key: "a/p1"}}, 100) // known by its key only
	if !closed(a.Done()) {
		t.Fatal("namespace a not woken by the deletion of a/p1")
	}
	if evs, err := cur.Read(nil); err != nil || len(evs) != 1 || evs[0].Object.Key != "a/p1" {
		t.Fatalf("after the wake the cursor reads %v, %v; want the deletion", feedEvents(evs), err)
	}

	a = s.WaitIn("a")
	s.Replace([]*Entry{entry("b", "p1", 2, "")}, 200)
	if !closed(a.Done()) {
		t.Fatal("namespace a not woken by a relist")
	}
	a = s.WaitIn("a")
	s.Unsync()
	if !closed(a.Done()) {
		t.Fatal("namespace a not woken by Unsync")
	}
	a = s.WaitIn("a")
	s.Stop()
	if !closed(a.Done()) {
		t.Fatal("namespace a not woken by Stop")
	}
}

// TestWaitOn: a change wakes the watchers of the field values its object
// has and had before it (so that an object moving from one value to
// another wakes the watchers it leaves and those it enters), and no others.
func TestWaitOn(t *testing.T) {
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
			waits := map[FieldValue]Wait{}
			for _, k := range watched {
				waits[k] = s.WaitOn(k)
			}
			s.MarkProgress(11)
			s.Apply(tc.change, 12)
			var got []FieldValue
			for _, k := range watched {
				if closed(waits[k].Done()) {
					got = append(got, k)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("woken (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSkip: a watcher of one node that sleeps through any number of other
// nodes' changes (more than the feed keeps by count or by bytes) is not
// overrun: its cursor skips them without reading, to the change that woke
// it, and reads that one; a wait ended by a continuity break skips
// nothing, so that the cursor reports the break.
func TestSkip(t *testing.T) {
	k := FieldValue{Field: "spec.nodeName", Value: "idle"}
	busy := func(rv uint64) Change {
		e := entry("a", fmt.Sprintf("p%d", rv%7), rv, "busy")
		e.Raw = make([]byte, 100)
		return Change{Entry: e}
	}
	s := NewStore(StoreConfig{EventHistory: 16, FeedMaxBytes: 1000}) // about 10 changes
	s.Replace(nil, 10)
	cur, err := s.Subscribe(10)
	if err != nil {
		t.Fatal(err)
	}
	w := s.WaitOn(k)
	if evs, err := cur.Read(nil); err != nil || len(evs) != 0 {
		t.Fatalf("Read = %v, %v; want nothing yet", feedEvents(evs), err)
	}
	for rv := uint64(11); rv <= 200; rv++ {
		s.Apply(busy(rv), rv)
	}
	if closed(w.Done()) {
		t.Fatal("woken by other nodes' changes")
	}
	// A bookmark's read: the cursor skips to the newest change.
	if rv := cur.Skip(w); rv != 200 {
		t.Errorf("Skip while waiting = %d, want 200, the last change skipped", rv)
	}
	if evs, err := cur.Read(nil); err != nil || len(evs) != 0 {
		t.Fatalf("after Skip: Read = %v, %v; want nothing", feedEvents(evs), err)
	}

	w = s.WaitOn(k)
	for rv := uint64(201); rv <= 300; rv++ {
		s.Apply(busy(rv), rv)
	}
	s.Apply(Change{Entry: entry("a", "mine", 301, "idle")}, 301)
	s.Apply(busy(302), 302)
	if !closed(w.Done()) {
		t.Fatal("not woken by a change to its node")
	}
	if rv := cur.Skip(w); rv != 300 {
		t.Errorf("Skip after the wake = %d, want 300, the change before the one that woke it", rv)
	}
	evs, err := cur.Read(nil)
	if err != nil {
		t.Fatalf("after Skip: Read = %v", err)
	}
	if diff := cmp.Diff([]string{"ADDED a/mine@301", "MODIFIED a/p1@302 prev@295"}, feedEvents(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	for name, reset := range map[string]func(*Store){
		"relist": func(s *Store) { s.Replace(nil, 1000) },
		"unsync": (*Store).Unsync,
		"stop":   (*Store).Stop,
	} {
		t.Run(name, func(t *testing.T) {
			s := NewStore(StoreConfig{EventHistory: 16})
			s.Replace(nil, 10)
			cur, err := s.Subscribe(10)
			if err != nil {
				t.Fatal(err)
			}
			w := s.WaitOn(k)
			s.Apply(busy(11), 11)
			reset(s)
			if !closed(w.Done()) {
				t.Fatal("not woken by a continuity break")
			}
			if rv := cur.Skip(w); rv != 0 {
				t.Errorf("Skip after a break = %d, want 0 (nothing skipped)", rv)
			}
			if _, err := cur.Read(nil); !errors.Is(err, ErrFeedReset) {
				t.Errorf("Read = %v, want ErrFeedReset", err)
			}
		})
	}
}

// TestSkipOnlyWhatTheWaitSaw: a wait proves nothing about the changes
// before it was taken: a cursor that has not read them yet reads them.
func TestSkipOnlyWhatTheWaitSaw(t *testing.T) {
	k := FieldValue{Field: "spec.nodeName", Value: "n1"}
	s := NewStore(StoreConfig{EventHistory: 16})
	s.Replace(nil, 10)
	cur, err := s.Subscribe(10)
	if err != nil {
		t.Fatal(err)
	}
	s.Apply(Change{Entry: entry("a", "mine", 11, "n1")}, 11)
	w := s.WaitOn(k) // taken after the change to n1, before the cursor read it
	s.Apply(Change{Entry: entry("a", "other", 12, "n2")}, 12)
	if rv := cur.Skip(w); rv != 0 {
		t.Errorf("Skip = %d, want 0", rv)
	}
	evs, err := cur.Read(nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ADDED a/mine@11", "ADDED a/other@12"}, feedEvents(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestWaitShard: a change wakes the watchers of the shards its object's
// key hashes into (its uid, or its namespace), before or after the change,
// and no others; the ranges are half-open, as the apiserver's selector
// reads them. An object whose uid cannot be read wakes every shard by uid.
func TestWaitShard(t *testing.T) {
	uidOf := func(e *Entry) (string, error) {
		if e.Raw == nil {
			return "", errors.New("no stored object")
		}
		return "uid-" + e.Name(), nil
	}
	hashOf := fnvSum
	hex := func(h uint64) string { return fmt.Sprintf("0x%016x", h) }
	shard := func(key string, ranges ...[2]string) sharding.Selector {
		var reqs []sharding.ShardRangeRequirement
		for _, r := range ranges {
			reqs = append(reqs, sharding.ShardRangeRequirement{Key: key, Start: r[0], End: r[1]})
		}
		return sharding.NewSelector(reqs...)
	}
	const top = "0x10000000000000000"
	h := hashOf("uid-p1")
	nsA := hashOf("a")
	shards := map[string]sharding.Selector{
		// Ranges whose bounds are p1's own hash: [h, h+1) holds it,
		// [0, h) and [h+1, 2^64) do not.
		"uid: just p1's hash":    shard(ShardKeyUID, [2]string{hex(h), hex(h + 1)}),
		"uid: below p1":          shard(ShardKeyUID, [2]string{"0x0000000000000000", hex(h)}),
		"uid: above p1":          shard(ShardKeyUID, [2]string{hex(h + 1), top}),
		"uid: above or below p1": shard(ShardKeyUID, [2]string{"0x0000000000000000", hex(h)}, [2]string{hex(h + 1), top}),
		"uid: everything":        shard(ShardKeyUID, [2]string{"0x0000000000000000", top}),
		"namespace: a":           shard(ShardKeyNamespace, [2]string{hex(nsA), hex(nsA + 1)}),
		"namespace: not a":       shard(ShardKeyNamespace, [2]string{"0x0000000000000000", hex(nsA)}, [2]string{hex(nsA + 1), top}),
	}
	tests := []struct {
		name   string
		change Change
		want   []string
	}{
		{
			name:   "modified",
			change: Change{Entry: entry("a", "p1", 12, "n1")},
			want:   []string{"namespace: a", "uid: everything", "uid: just p1's hash"},
		},
		{
			name:   "deleted, with its last state",
			change: Change{Deleted: true, Entry: entry("a", "p1", 12, "n1")},
			want:   []string{"namespace: a", "uid: everything", "uid: just p1's hash"},
		},
		{
			name:   "another namespace's object",
			change: Change{Entry: entry("b", "p1", 12, "n1")},
			want:   []string{"namespace: not a", "uid: everything", "uid: just p1's hash"},
		},
		{
			name:   "deleted, known by its key only",
			change: Change{Deleted: true, Entry: &Entry{Key: "a/p1"}},
			want: []string{"namespace: a", "uid: above or below p1", "uid: above p1", "uid: below p1",
				"uid: everything", "uid: just p1's hash"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(StoreConfig{EventHistory: 1024, UID: uidOf})
			s.Replace([]*Entry{entry("a", "p1", 1, "n1")}, 10)
			waits := map[string]Wait{}
			for name, sel := range shards {
				waits[name] = s.WaitShard(sel)
			}
			s.MarkProgress(11)
			s.Apply(tc.change, 12)
			var got []string
			for name := range shards {
				if closed(waits[name].Done()) {
					got = append(got, name)
				}
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("woken (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSkipShard: a watcher of one shard sleeps through the other shards'
// changes, however many; its cursor skips them to the change that woke
// it, and every continuity break wakes it without skipping.
func TestSkipShard(t *testing.T) {
	uidOf := func(e *Entry) (string, error) { return "uid-" + e.Name(), nil }
	mine := fnvSum("uid-mine")
	sel := sharding.NewSelector(sharding.ShardRangeRequirement{
		Key: ShardKeyUID, Start: fmt.Sprintf("0x%016x", mine), End: fmt.Sprintf("0x%016x", mine+1)})
	s := NewStore(StoreConfig{EventHistory: 16, UID: uidOf})
	s.Replace(nil, 10)
	cur, err := s.Subscribe(10)
	if err != nil {
		t.Fatal(err)
	}
	w := s.WaitShard(sel)
	for rv := uint64(11); rv <= 100; rv++ { // more than the feed holds
		s.Apply(Change{Entry: entry("a", fmt.Sprintf("p%d", rv%7), rv, "")}, rv)
	}
	if closed(w.Done()) {
		t.Fatal("woken by other shards' changes")
	}
	s.Apply(Change{Entry: entry("a", "mine", 101, "")}, 101)
	if !closed(w.Done()) {
		t.Fatal("not woken by a change to its shard")
	}
	if rv := cur.Skip(w); rv != 100 {
		t.Errorf("Skip after the wake = %d, want 100, the change before the one that woke it", rv)
	}
	if evs, err := cur.Read(nil); err != nil || len(evs) != 1 || evs[0].Object.Key != "a/mine" {
		t.Fatalf("after Skip: Read = %v, %v; want a/mine", feedEvents(evs), err)
	}
	w = s.WaitShard(sel)
	s.Replace(nil, 200)
	if !closed(w.Done()) {
		t.Fatal("not woken by a relist")
	}
}

// fnvSum is the 64-bit FNV-1a hash of v, written out here rather than
// taken from the code under test.
func fnvSum(v string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(v))
	return h.Sum64()
}
