package snapshot

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/listproxy/listproxy/pkg/gzstitch"
)

func TestEntryGzip(t *testing.T) {
	a, b := &Entry{Key: "a"}, &Entry{Key: "b"}
	if a.GzipCached(GzipListItem) != nil {
		t.Fatal("a new entry has a cached gzip item")
	}
	idA, idB := a.Gzip(GzipListItem).ID, b.Gzip(GzipListItem).ID
	if idA == 0 || idB == 0 || idA == idB {
		t.Fatalf("IDs %d and %d, want distinct and non-zero", idA, idB)
	}
	if a.Gzip(GzipListItem).ID != idA {
		t.Error("ID changed on a second call")
	}
	comp, err := gzstitch.NewCompressor(1)
	if err != nil {
		t.Fatal(err)
	}
	c := comp.Compress([]byte("item"))
	a.SetGzipChunk(GzipListItem, c, []uint64{idB})
	it := a.GzipCached(GzipListItem)
	if it.ID != idA || it.Chunk.Size() != 4 || len(it.After) != 1 || it.After[0] != idB {
		t.Errorf("after SetGzipChunk: %+v, want ID %d, a 4-byte chunk, After [%d]", it, idA, idB)
	}
	fresh := &Entry{Key: "c"}
	fresh.SetGzipChunk(GzipListItem, c, nil)
	if id := fresh.GzipCached(GzipListItem).ID; id == 0 || id == idA || id == idB {
		t.Errorf("SetGzipChunk on a new entry gave ID %d, want a new one", id)
	}
}

// TestEntryGzipKeys: chunks cached for several keys stay beside each other,
// at most keep of them, the most recent; the entry's ID and the bytes its
// owner counts follow them.
func TestEntryGzipKeys(t *testing.T) {
	comp, err := gzstitch.NewCompressor(1)
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(n int) gzstitch.Chunk { return comp.Compress(make([]byte, n)) }
	type set struct {
		key  uint64
		size int
	}
	for _, tc := range []struct {
		name string
		keep int
		sets []set
		want []set // Find's results by key, newest first
	}{
		{name: "one key", keep: 3, sets: []set{{1, 10}}, want: []set{{1, 10}}},
		{name: "a key replaces its own chunk", keep: 3, sets: []set{{1, 10}, {1, 20}}, want: []set{{1, 20}}},
		{name: "keys side by side", keep: 3, sets: []set{{1, 10}, {2, 20}, {3, 30}}, want: []set{{3, 30}, {2, 20}, {1, 10}}},
		{name: "the oldest key goes", keep: 2, sets: []set{{1, 10}, {2, 20}, {3, 30}}, want: []set{{3, 30}, {2, 20}}},
		{name: "a key set again is the newest", keep: 2, sets: []set{{1, 10}, {2, 20}, {1, 15}, {3, 30}}, want: []set{{3, 30}, {1, 15}}},
		{name: "keep 1", keep: 1, sets: []set{{1, 10}, {2, 20}}, want: []set{{2, 20}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Entry{Key: "a"}
			id := e.Gzip(GzipTableRow).ID
			var owner atomic.Int64
			e.attachGzip(&owner)
			for _, s := range tc.sets {
				e.SetGzipChunkKey(GzipTableRow, s.key, chunk(s.size), []uint64{7}, tc.keep)
			}
			it := e.GzipCached(GzipTableRow)
			if it.ID != id {
				t.Errorf("ID %d, want %d", it.ID, id)
			}
			var got []set
			var bytes int64
			for _, o := range append([]*GzipItem{it}, it.Others...) {
				got = append(got, set{o.Key, o.Chunk.Size()})
				bytes += int64(o.Chunk.Len())
				if f := it.Find(o.Key); f != o {
					t.Errorf("Find(%d) = %p, want %p", o.Key, f, o)
				}
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(set{})); diff != "" {
				t.Errorf("chunks kept (-want +got):\n%s", diff)
			}
			if f := it.Find(99); f != nil {
				t.Errorf("Find of a key never set = %+v, want nil", f)
			}
			if owner.Load() != bytes {
				t.Errorf("owner counts %d bytes, want %d", owner.Load(), bytes)
			}
			if n := e.detachGzip(); n != bytes {
				t.Errorf("detach returned %d bytes, want %d", n, bytes)
			}
		})
	}
}

// TestEntryGzipConcurrent: the first concurrent callers agree on one ID.
func TestEntryGzipConcurrent(t *testing.T) {
	comp, err := gzstitch.NewCompressor(1)
	if err != nil {
		t.Fatal(err)
	}
	c := comp.Compress([]byte("x"))
	for range 50 {
		e := &Entry{Key: "k"}
		ids := make([]uint64, 8)
		var wg sync.WaitGroup
		for g := range ids {
			wg.Go(func() {
				if g%2 == 0 {
					e.SetGzipChunk(GzipListItem, c, nil)
				}
				ids[g] = e.Gzip(GzipListItem).ID
			})
		}
		wg.Wait()
		for _, id := range ids {
			if id != ids[0] {
				t.Fatalf("concurrent callers saw IDs %v, want one", ids)
			}
		}
	}
}

// TestStoreGzipBytes: a store counts the chunks cached on its latest
// snapshot's objects; a replaced object's chunks count as history, and
// chunks cached on it afterwards (by readers of older snapshots) nowhere.
func TestStoreGzipBytes(t *testing.T) {
	comp, err := gzstitch.NewCompressor(1)
	if err != nil {
		t.Fatal(err)
	}
	chunk := comp.Compress(make([]byte, 1000))
	n := int64(chunk.Len())
	var got Stats
	s := NewStore(StoreConfig{History: time.Hour, OnPublish: func(st Stats) { got = st }})
	p1, p2 := entry("a", "p1", 1, ""), entry("a", "p2", 2, "")
	s.Replace([]*Entry{p1, p2}, 10)
	p1.SetGzipChunk(GzipListItem, chunk, nil)
	p1.SetGzipChunk(GzipWatchAdded, chunk, nil)
	p2.SetGzipChunk(GzipListItem, chunk, nil)
	p2.SetGzipChunk(GzipListItem, chunk, nil) // replaces the first
	s.MarkProgress(11)
	if want := 3 * n; got.GzipBytes != want {
		t.Errorf("GzipBytes = %d, want %d", got.GzipBytes, want)
	}

	history := got.HistoryBytes
	s.Apply(Change{Entry: entry("a", "p1", 12, "")}, 12)
	if got.GzipBytes != n {
		t.Errorf("after p1 was replaced: GzipBytes = %d, want %d", got.GzipBytes, n)
	}
	if want := history + snapshotOverheadBytes + int64(len(p1.Raw)) + 2*n; got.HistoryBytes != want {
		t.Errorf("HistoryBytes = %d, want %d (with p1's chunks)", got.HistoryBytes, want)
	}
	p1.SetGzipChunk(GzipListItem, comp.Compress(make([]byte, 5000)), nil)
	s.MarkProgress(13)
	if got.GzipBytes != n {
		t.Errorf("after a chunk was cached on the replaced p1: GzipBytes = %d, want %d", got.GzipBytes, n)
	}

	s.Replace([]*Entry{entry("a", "p3", 3, "")}, 20)
	p2.SetGzipChunk(GzipWatchAdded, chunk, nil)
	s.MarkProgress(21)
	if got.GzipBytes != 0 {
		t.Errorf("after a relist: GzipBytes = %d, want 0", got.GzipBytes)
	}
}

// TestStoreGzipBytesConcurrent: chunks cached while their objects are
// replaced are counted exactly once, or not at all once replaced.
func TestStoreGzipBytesConcurrent(t *testing.T) {
	comp, err := gzstitch.NewCompressor(1)
	if err != nil {
		t.Fatal(err)
	}
	chunk := comp.Compress([]byte("item"))
	s := NewStore(StoreConfig{})
	s.Replace([]*Entry{entry("a", "p0", 1, "")}, 10)
	var wg sync.WaitGroup
	for rv := uint64(11); rv < 211; rv++ {
		e := entry("a", "p0", rv, "")
		s.Apply(Change{Entry: e}, rv)
		wg.Go(func() { e.SetGzipChunk(GzipListItem, chunk, nil) })
	}
	wg.Wait()
	live, _, err := s.Latest()
	if err != nil {
		t.Fatal(err)
	}
	e, _ := live.Get("a/p0")
	want := int64(0)
	if it := e.GzipCached(GzipListItem); it != nil {
		want = int64(it.Chunk.Len())
	}
	if got := s.gzipBytes.Load(); got != want {
		t.Errorf("gzip bytes = %d, want %d (the live object's chunk)", got, want)
	}
}
