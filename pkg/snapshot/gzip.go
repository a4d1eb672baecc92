package snapshot

import (
	"hash/maphash"
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
	// GzipTableRow: a Table row's tail (table.Row.AppendTail) in one object
	// form, compressed after the row's head with its clock cells blank
	// (gzstitch.Blank) and, before that, what precedes the row; keyed by the
	// object form and the clock cells' lengths (SetGzipChunkKey).
	GzipTableRow
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
	// Key tells apart chunks of one entry and use compressed around
	// different request-time bytes (GzipTableRow: the object form and the
	// clock cells' lengths); 0 for the other uses.
	Key uint64
	// Others holds chunks of the entry and use for other keys, kept beside
	// Chunk (SetGzipChunkKey), newest first. Its items have no Others.
	Others []*GzipItem
}

// Find returns it or the one of its Others whose Key is key, or nil.
func (it *GzipItem) Find(key uint64) *GzipItem {
	if it.Key == key {
		return it
	}
	for _, o := range it.Others {
		if o.Key == key {
			return o
		}
	}
	return nil
}

// bytes returns the compressed bytes of its chunks.
func (it *GzipItem) bytes() int64 {
	if it == nil {
		return 0
	}
	n := int64(it.Chunk.Len())
	for _, o := range it.Others {
		n += int64(o.Chunk.Len())
	}
	return n
}

// gzipCache is the one mutable part of an Entry: what responses derived
// from its bytes, a GzipItem per use and its uid's hash.
type gzipCache struct {
	// items is allocated when a gzip response or a shard selector first
	// uses the entry: most entries never are, and an entry has no word
	// more for either.
	items atomic.Pointer[gzipItems]
	// owner, when set, counts the compressed bytes of the chunks (the
	// store's Stats.GzipBytes while the entry is in its latest snapshot).
	// Guarded by the entry's gzipLock.
	owner *atomic.Int64
}

type gzipItems struct {
	uses [gzipUses]atomic.Pointer[GzipItem]
	// uidHash is ShardHash of the object's uid (Entry.UIDHash), 0 until
	// read.
	uidHash atomic.Uint64
}

// derived returns e's gzipItems, allocating them on first use.
func (e *Entry) derived() *gzipItems {
	items := e.gzip.items.Load()
	if items == nil {
		e.gzip.items.CompareAndSwap(nil, new(gzipItems))
		items = e.gzip.items.Load()
	}
	return items
}

// gzipLocks serialise setting an entry's chunks with attaching and
// detaching it, so that owner counts every chunk cached while the entry is
// attached exactly once. They are shared by entries (gzipLock) since a
// lock of its own would grow every entry; each is held only to swap a
// pointer and add a count.
var (
	gzipLocks    [64]sync.Mutex
	gzipLockSeed = maphash.MakeSeed()
)

// gzipLock is e's lock among gzipLocks.
func (e *Entry) gzipLock() *sync.Mutex {
	return &gzipLocks[maphash.String(gzipLockSeed, e.Key)%uint64(len(gzipLocks))]
}

// gzipSlot is where e's item for u is kept.
func (e *Entry) gzipSlot(u GzipUse) *atomic.Pointer[GzipItem] {
	return &e.derived().uses[u]
}

// gzipBytesLocked returns the compressed bytes of e's cached chunks.
func (e *Entry) gzipBytesLocked() int64 {
	items := e.gzip.items.Load()
	if items == nil {
		return 0
	}
	var n int64
	for i := range items.uses {
		n += items.uses[i].Load().bytes()
	}
	return n
}

// attachGzip counts e's chunks in owner from now on.
func (e *Entry) attachGzip(owner *atomic.Int64) {
	mu := e.gzipLock()
	mu.Lock()
	defer mu.Unlock()
	c := &e.gzip
	if c.owner == owner {
		return
	}
	n := e.gzipBytesLocked()
	if c.owner != nil {
		c.owner.Add(-n)
	}
	c.owner = owner
	owner.Add(n)
}

// detachGzip stops counting e's chunks and returns their bytes; 0 when
// they were not counted.
func (e *Entry) detachGzip() int64 {
	mu := e.gzipLock()
	mu.Lock()
	defer mu.Unlock()
	c := &e.gzip
	if c.owner == nil {
		return 0
	}
	n := e.gzipBytesLocked()
	c.owner.Add(-n)
	c.owner = nil
	return n
}

// lastGzipID is the last GzipItem.ID handed out.
var lastGzipID atomic.Uint64

// Gzip returns what gzip responses cached on e for u, giving e its ID on
// first use. Safe for concurrent use.
func (e *Entry) Gzip(u GzipUse) *GzipItem {
	p := e.gzipSlot(u)
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
	items := e.gzip.items.Load()
	if items == nil {
		return nil
	}
	return items.uses[u].Load()
}

// SetGzipChunk caches c for u, compressed after the entries with IDs after,
// in place of any earlier chunk; e keeps its ID. Safe for concurrent use:
// the last call wins.
func (e *Entry) SetGzipChunk(u GzipUse, c gzstitch.Chunk, after []uint64) {
	e.setGzip(u, func(id uint64, _ *GzipItem) *GzipItem {
		return &GzipItem{ID: id, Chunk: c, After: after}
	})
}

// SetGzipChunkKey caches c for u and key, compressed after the entries with
// IDs after, in place of an earlier chunk for key. Chunks cached for other
// keys stay beside it, the keep-1 most recent of them: an entry holds at
// most keep chunks for u. Safe for concurrent use: the last call wins.
func (e *Entry) SetGzipChunkKey(u GzipUse, key uint64, c gzstitch.Chunk, after []uint64, keep int) {
	e.setGzip(u, func(id uint64, old *GzipItem) *GzipItem {
		it := &GzipItem{ID: id, Chunk: c, After: after, Key: key}
		if old == nil {
			return it
		}
		for _, o := range append([]*GzipItem{old}, old.Others...) {
			if len(it.Others) >= keep-1 {
				break
			}
			// An item without a chunk holds only the ID.
			if o.Key != key && o.Chunk.Len() > 0 {
				it.Others = append(it.Others, &GzipItem{ID: id, Chunk: o.Chunk, After: o.After, Key: o.Key})
			}
		}
		return it
	})
}

// setGzip replaces e's item for u by what next makes of e's ID and the item
// it replaces (nil if none), and counts the difference in bytes.
func (e *Entry) setGzip(u GzipUse, next func(id uint64, old *GzipItem) *GzipItem) {
	mu := e.gzipLock()
	mu.Lock()
	defer mu.Unlock()
	p := e.gzipSlot(u)
	for {
		old := p.Load()
		id := uint64(0)
		if old != nil {
			id = old.ID
		} else {
			id = lastGzipID.Add(1)
		}
		it := next(id, old)
		if p.CompareAndSwap(old, it) {
			if e.gzip.owner != nil {
				e.gzip.owner.Add(it.bytes() - old.bytes())
			}
			return
		}
	}
}
