package snapshot

import (
	"sync"
	"sync/atomic"

	"github.com/listproxy/listproxy/pkg/gzstitch"
)

// GzipUse names the bytes an entry is compressed as: each use caches its own
// chunk, since the bytes around the object differ.
type GzipUse int

const (
	// GzipListItem: the entry as a list item, with the separator or field
	// header that precedes it in a list response.
	GzipListItem GzipUse = iota
	// GzipWatchAdded: the entry as the whole ADDED frame of a watch-list's
	// initial events, in its store's format.
	GzipWatchAdded
	gzipUses
)

// GzipItem is what gzip responses keep about an entry for one use: an
// identity, and the entry's bytes compressed once, to be stitched into many
// responses (gzstitch; see GzipEntries). It is immutable.
type GzipItem struct {
	// ID names the entry among all entries of the process for this use
	// (never 0), so that chunks compressed after it can refer to it.
	ID uint64
	// Chunk is the entry's bytes for the use, compressed after the entries
	// listed in After. Empty until built.
	Chunk gzstitch.Chunk
	// After holds the IDs of the entries, in stream order, whose bytes Chunk
	// was compressed after: Chunk may only directly follow them. Its array
	// may be shared with other entries' items.
	After []uint64
}

// gzipCache is the one mutable part of an Entry: a GzipItem per use.
type gzipCache struct {
	items [gzipUses]atomic.Pointer[GzipItem]
	// mu serialises setting chunks with attach and detach, so that owner
	// counts every chunk cached while the entry is attached exactly once.
	mu sync.Mutex
	// owner, when set, counts the compressed bytes of the chunks (the
	// store's Stats.GzipBytes while the entry is in its latest snapshot).
	owner *atomic.Int64
}

// chunkBytesLocked returns the compressed bytes of the cached chunks.
func (c *gzipCache) chunkBytesLocked() int64 {
	var n int64
	for i := range c.items {
		if it := c.items[i].Load(); it != nil {
			n += int64(it.Chunk.Len())
		}
	}
	return n
}

// attach counts the chunks in owner from now on.
func (c *gzipCache) attach(owner *atomic.Int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owner == owner {
		return
	}
	n := c.chunkBytesLocked()
	if c.owner != nil {
		c.owner.Add(-n)
	}
	c.owner = owner
	owner.Add(n)
}

// detach stops counting the chunks and returns their bytes; 0 when they
// were not counted.
func (c *gzipCache) detach() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owner == nil {
		return 0
	}
	n := c.chunkBytesLocked()
	c.owner.Add(-n)
	c.owner = nil
	return n
}

// lastGzipID is the last GzipItem.ID handed out.
var lastGzipID atomic.Uint64

// Gzip returns what gzip responses cached on e for u, giving e its ID on
// first use. Safe for concurrent use.
func (e *Entry) Gzip(u GzipUse) *GzipItem {
	p := &e.gzip.items[u]
	if it := p.Load(); it != nil {
		return it
	}
	if it := (&GzipItem{ID: lastGzipID.Add(1)}); p.CompareAndSwap(nil, it) {
		return it
	}
	return p.Load()
}

// GzipCached returns what gzip responses cached on e for u, or nil.
func (e *Entry) GzipCached(u GzipUse) *GzipItem {
	return e.gzip.items[u].Load()
}

// SetGzipChunk caches c for u, compressed after the entries with IDs after,
// in place of any earlier chunk; e keeps its ID. Safe for concurrent use:
// the last call wins.
func (e *Entry) SetGzipChunk(u GzipUse, c gzstitch.Chunk, after []uint64) {
	e.gzip.mu.Lock()
	defer e.gzip.mu.Unlock()
	p := &e.gzip.items[u]
	for {
		old := p.Load()
		id := uint64(0)
		if old != nil {
			id = old.ID
		} else {
			id = lastGzipID.Add(1)
		}
		if p.CompareAndSwap(old, &GzipItem{ID: id, Chunk: c, After: after}) {
			if e.gzip.owner != nil {
				delta := int64(c.Len())
				if old != nil {
					delta -= int64(old.Chunk.Len())
				}
				e.gzip.owner.Add(delta)
			}
			return
		}
	}
}
