package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// packJSON lays items out as JSON list responses write them (as
// wire.PackItems does): in one array, separated by commas.
func packJSON(items [][]byte) [][]byte {
	size := 0
	for _, it := range items {
		size += 1 + len(it)
	}
	packed := make([]byte, 0, size)
	out := make([][]byte, len(items))
	for i, it := range items {
		if i > 0 {
			packed = append(packed, ',')
		}
		start := len(packed)
		packed = append(packed, it...)
		out[i] = packed[start:]
	}
	return out
}

// bigEntry is an object of a 52nd of a packed array (about 80 KB), so that
// 52 fill one.
func bigEntry(name string, rv uint64) *Entry {
	e := entry("ns", name, rv, "")
	e.Raw = []byte(fmt.Sprintf(`{"n":%q,"rv":%d,"pad":%q}`, name, rv, strings.Repeat("x", packTargetBytes/52)))
	return e
}

// laidOut reports whether b lies right after a and a JSON item separator in
// one array, as WriteList writes it in one piece.
func laidOut(a, b []byte) bool {
	if cap(a) < len(a)+1+len(b) {
		return false
	}
	grown := a[:len(a)+1+len(b)]
	return grown[len(a)] == ',' && &grown[len(a)+1] == &b[0]
}

// layout is, for each object in key order, whether it lies right after the
// previous one.
func layout(snap *Snapshot) []bool {
	var out []bool
	var prev []byte
	snap.Ascend(func(e *Entry) bool {
		out = append(out, prev != nil && laidOut(prev, e.Raw))
		prev = e.Raw
		return true
	})
	return out
}

func TestStorePacksListedObjects(t *testing.T) {
	s := NewStore(StoreConfig{Pack: packJSON})
	var entries []*Entry
	for i := range 120 {
		entries = append(entries, bigEntry(fmt.Sprintf("p%03d", i), uint64(i+1)))
	}
	want := make([][]byte, len(entries))
	for i, e := range entries {
		want[i] = bytes.Clone(e.Raw)
	}
	s.Replace(entries, 200)
	snap, _, _ := s.Latest()

	// 120 objects of a 52nd of an array each: three arrays, each in key order.
	breaks := 0
	for i, joined := range layout(snap) {
		if i > 0 && !joined {
			breaks++
		}
	}
	if breaks != 2 {
		t.Errorf("objects in %d arrays, want 3", breaks+1)
	}
	i := 0
	snap.Ascend(func(e *Entry) bool {
		if !bytes.Equal(e.Raw, want[i]) {
			t.Fatalf("object %s: packed bytes differ from the listed ones", e.Key)
		}
		i++
		return true
	})
}

// TestStoreMovesMostlyDeadArray: once more than a quarter of an array's
// bytes belong to replaced objects, its live objects move to a new array.
// Readers see the same objects before and after, and watchers see only the
// changes.
func TestStoreMovesMostlyDeadArray(t *testing.T) {
	s := NewStore(StoreConfig{Pack: packJSON, History: time.Hour})
	var entries []*Entry
	for i := range 52 {
		entries = append(entries, bigEntry(fmt.Sprintf("p%03d", i), uint64(i+1)))
	}
	s.Replace(entries, 100)
	listed, _, _ := s.Latest()
	if got := layout(listed); strings.Contains(fmt.Sprint(got[1:]), "false") {
		t.Fatalf("52 objects of a 52nd of an array each not in one array: %v", got)
	}
	cur, err := s.Subscribe(100)
	if err != nil {
		t.Fatal(err)
	}

	// Replace 12 of the 52 objects (under a quarter): the array stays. Two
	// more (over a quarter) move the others.
	rv := uint64(100)
	replace := func(name string) {
		rv++
		s.Apply(Change{Entry: bigEntry(name, rv)}, rv)
	}
	for i := 0; i < 48; i += 4 {
		replace(fmt.Sprintf("p%03d", i))
	}
	before, _, _ := s.Latest()
	if e, _ := before.Get("ns/p002"); e != mustGet(t, listed, "ns/p002") {
		t.Fatal("the array moved with under a quarter of it replaced")
	}
	replace("p001")
	replace("p003")
	after, _, _ := s.Latest()

	moved, _ := after.Get("ns/p002")
	orig, _ := before.Get("ns/p002")
	if moved == orig || !bytes.Equal(moved.Raw, orig.Raw) || moved.RV != orig.RV {
		t.Fatalf("ns/p002 after the move: same entry %v, same bytes %v, RV %d (want a copy of RV %d)",
			moved == orig, bytes.Equal(moved.Raw, orig.Raw), moved.RV, orig.RV)
	}
	if old, _ := before.Get("ns/p002"); old != orig {
		t.Error("the snapshot before the move changed")
	}
	// The 38 objects never replaced lie together again, in key order.
	var kept [][]byte
	after.Ascend(func(e *Entry) bool {
		if e.RV <= 52 {
			kept = append(kept, e.Raw)
		}
		return true
	})
	if len(kept) != 38 {
		t.Fatalf("%d objects never replaced, want 38", len(kept))
	}
	for i := 1; i < len(kept); i++ {
		if !laidOut(kept[i-1], kept[i]) {
			t.Fatalf("moved object %d does not follow the one before it", i)
		}
	}

	// Watchers saw the 14 changes and nothing else.
	events, err := cur.Read(make([]Event, 0, 64))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if ev.Object.RV <= 100 {
			t.Errorf("event for %s at RV %d: moving objects is not a change", ev.Object.Key, ev.Object.RV)
		}
	}
	n := len(events)
	if n != 14 {
		t.Errorf("watchers saw %d changes, want 14", n)
	}
}

func mustGet(t *testing.T, snap *Snapshot, key string) *Entry {
	t.Helper()
	e, ok := snap.Get(key)
	if !ok {
		t.Fatalf("snapshot lacks %s", key)
	}
	return e
}

// pagedLister lists pages[i] for the continue token "i" (the first page for
// ""), then ends at rv.
type pagedLister struct {
	rv    string
	pages [][]string
}

func (l *pagedLister) List(_ context.Context, _ int64, token string, item func([]byte) error) (ListResult, error) {
	i := 0
	if token != "" {
		i, _ = strconv.Atoi(token)
	}
	for _, it := range l.pages[i] {
		if err := item([]byte(it)); err != nil {
			return ListResult{}, err
		}
	}
	res := ListResult{ResourceVersion: l.rv}
	if i+1 < len(l.pages) {
		res.Continue = strconv.Itoa(i + 1)
	}
	return res, nil
}

// TestFeederPacksEachListedPage: a listed page is packed as it arrives, so
// the bytes it was decoded into need not live until the list ends; Replace
// then has nothing left to pack.
func TestFeederPacksEachListedPage(t *testing.T) {
	h := newFeederHarness(t, -1)
	var mu sync.Mutex
	var packed []int
	h.store = NewStore(StoreConfig{Pack: func(items [][]byte) [][]byte {
		mu.Lock()
		packed = append(packed, len(items))
		mu.Unlock()
		return packJSON(items)
	}})
	h.feeder.cfg.Store = h.store
	h.feeder.cfg.Warm = &pagedLister{rv: "20", pages: [][]string{{"ns/a/1", "ns/b/2"}, {"ns/c/3"}}}
	h.run(t)
	if w := h.nextWatch(t); w.rv != "20" {
		t.Fatalf("first watch from %q, want the list's resourceVersion 20", w.rv)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(packed) != "[2 1]" {
		t.Fatalf("packed batches of %v objects, want the pages [2 1]", packed)
	}
	snap, _, _ := h.store.Latest()
	a, b := mustGet(t, snap, "ns/a"), mustGet(t, snap, "ns/b")
	if string(a.Raw) != "ns/a/1" || !laidOut(a.Raw, b.Raw) {
		t.Errorf("the first page's objects %q and %q are not packed together", a.Raw, b.Raw)
	}
}
