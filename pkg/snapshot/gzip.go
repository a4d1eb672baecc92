package snapshot

import (
	"sync/atomic"

	"github.com/listproxy/listproxy/pkg/gzstitch"
)

// GzipItem is what gzip LIST responses keep about an entry: an identity, and
// the entry's list item compressed once, to be stitched into many responses
// (pkg/proxy builds it; gzstitch). It is immutable.
type GzipItem struct {
	// ID names the entry among all entries of the process (never 0), so that
	// chunks compressed after it can refer to it.
	ID uint64
	// Chunk is the item, with the bytes that precede it in a list (its
	// separator or field header), compressed after the entries listed in
	// After. Empty until built.
	Chunk gzstitch.Chunk
	// After holds the IDs of the entries, in list order, whose bytes Chunk
	// was compressed after: Chunk may only directly follow them. Its array
	// may be shared with other entries' items.
	After []uint64
}

// gzipCache is the one mutable part of an Entry.
type gzipCache struct {
	item atomic.Pointer[GzipItem]
}

// lastGzipID is the last GzipItem.ID handed out.
var lastGzipID atomic.Uint64

// Gzip returns what gzip responses cached on e, giving e its ID on first use.
// Safe for concurrent use.
func (e *Entry) Gzip() *GzipItem {
	if it := e.gzip.item.Load(); it != nil {
		return it
	}
	if it := (&GzipItem{ID: lastGzipID.Add(1)}); e.gzip.item.CompareAndSwap(nil, it) {
		return it
	}
	return e.gzip.item.Load()
}

// GzipCached returns what gzip responses cached on e, or nil.
func (e *Entry) GzipCached() *GzipItem {
	return e.gzip.item.Load()
}

// SetGzipChunk caches c, compressed after the entries with IDs after, in
// place of any earlier chunk; e keeps its ID. Safe for concurrent use: the
// last call wins.
func (e *Entry) SetGzipChunk(c gzstitch.Chunk, after []uint64) {
	for {
		old := e.gzip.item.Load()
		id := uint64(0)
		if old != nil {
			id = old.ID
		} else {
			id = lastGzipID.Add(1)
		}
		if e.gzip.item.CompareAndSwap(old, &GzipItem{ID: id, Chunk: c, After: after}) {
			return
		}
	}
}
