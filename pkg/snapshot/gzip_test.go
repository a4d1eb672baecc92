package snapshot

import (
	"sync"
	"testing"

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
