package snapshot

import (
	"slices"

	"github.com/listproxy/listproxy/pkg/gzstitch"
)

// GzipEntries writes the bytes of a run of entries into one gzip member, in
// order. An entry's bytes are copied from a chunk cached on it for the use
// where the entries before it in this stream are the ones the chunk was
// compressed after; the rest are compressed now. With GzipCache.Build, the
// entries are consecutive in key order among the whole collection's or one
// shard's, so that the next such stream has the same neighbours: missing
// chunks are built at the Compressor's level, in one session per run, and
// cached under the cache's key. Without it, missing entries are compressed
// at request time (the gzstitch.Writer's level) for this stream only.
//
// A GzipEntries is not safe for concurrent use; many may share entries.
type GzipEntries struct {
	zw      *gzstitch.Writer
	chunks  *gzstitch.Compressor
	use     GzipUse
	entries []*Entry
	piece   func(dst []byte, e *Entry) []byte
	cache   GzipCache
	// ids[i] is the GzipItem.ID of entries[i] for use, or 0 where it has
	// none (then no chunk can have been compressed after it).
	ids []uint64
	// lens[i] is the length of entries[i]'s piece, or -1 until measured;
	// made by the first run to build, so that a stream of cached chunks
	// allocates none.
	lens    []int
	scratch []byte
	// next is the index of the first entry not yet written.
	next int
	// size counts the uncompressed bytes written.
	size int64
}

// GzipCache says whether a stream of entries builds and caches the chunks
// it misses, and under which key.
type GzipCache struct {
	// Build: the entries are consecutive in key order among the whole
	// collection's (no selector filtered them) or one shard's (a shard
	// selector alone filtered them).
	Build bool
	// Key is 0 for the whole collection, GzipKey of the shard selector for
	// a shard: an entry keeps a chunk per key, for the gzipKeys keys last
	// built, so that a client of the whole collection and clients of
	// shards do not rebuild each other's chunks.
	Key uint64
}

// gzipKeys is how many chunks (keys) an entry keeps per use: the whole
// collection's and those of two ways of sharding it.
const gzipKeys = 3

// GzipKey is the GzipCache.Key of a shard selector (its canonical form):
// its ShardHash, never 0.
func GzipKey(selector string) uint64 {
	return ShardHash(selector) | 1
}

// NewGzipEntries prepares writing entries to zw. piece appends the bytes of
// one entry, for use, to dst and returns the result; it must give the same
// bytes for the same entry every time.
func NewGzipEntries(zw *gzstitch.Writer, chunks *gzstitch.Compressor, use GzipUse, entries []*Entry, piece func(dst []byte, e *Entry) []byte, cache GzipCache) *GzipEntries {
	return &GzipEntries{zw: zw, chunks: chunks, use: use, entries: entries, piece: piece, cache: cache, ids: make([]uint64, len(entries))}
}

// Len returns the number of entries.
func (g *GzipEntries) Len() int { return len(g.entries) }

// Size returns the number of uncompressed bytes written so far.
func (g *GzipEntries) Size() int64 { return g.size }

// WriteUpTo writes the entries from the first one not yet written up to,
// not including, entries[end]. Writing in several calls gives the same
// stream as one call.
func (g *GzipEntries) WriteUpTo(end int) error {
	run := -1 // start of a run of entries whose chunks are to be built
	for i := g.next; i < end; i++ {
		it := g.entries[i].GzipCached(g.use)
		if it != nil {
			g.ids[i] = it.ID
			it = fittingChunk(it, g.ids[:i])
		}
		if it != nil {
			if run >= 0 {
				if err := g.buildRun(run, i); err != nil {
					return err
				}
				run = -1
			}
			if err := g.zw.WriteChunk(&it.Chunk); err != nil {
				return err
			}
			g.size += int64(it.Chunk.Size())
			continue
		}
		if g.cache.Build {
			if run < 0 {
				run = i
			}
			continue
		}
		g.scratch = g.piece(g.scratch[:0], g.entries[i])
		if _, err := g.zw.Write(g.scratch); err != nil {
			return err
		}
		g.size += int64(len(g.scratch))
	}
	if run >= 0 {
		if err := g.buildRun(run, end); err != nil {
			return err
		}
	}
	g.next = max(g.next, end)
	return nil
}

// fittingChunk returns the item of it or its Others (the chunks of other
// keys) whose chunk may follow the entries with IDs served, or nil.
func fittingChunk(it *GzipItem, served []uint64) *GzipItem {
	if chunkFits(it, served) {
		return it
	}
	for _, o := range it.Others {
		if chunkFits(o, served) {
			return o
		}
	}
	return nil
}

// chunkFits reports whether it's chunk may follow the entries with IDs
// served: its After must be their last IDs.
func chunkFits(it *GzipItem, served []uint64) bool {
	if it.Chunk.Len() == 0 {
		return false // not built (a built chunk has at least its flush)
	}
	k := len(it.After)
	return k <= len(served) && slices.Equal(it.After, served[len(served)-k:])
}

// buildRun compresses entries [start, end) into chunks in one session,
// caches them on their entries and writes them. The session is first
// primed with the entries before start, up to the window: those bytes
// precede the run in this stream, and the chunks then compress as well as
// in a whole-body stream.
func (g *GzipEntries) buildRun(start, end int) error {
	if g.lens == nil {
		g.lens = make([]int, len(g.entries))
		for i := range g.lens {
			g.lens[i] = -1
		}
	}
	s := g.chunks.NewSession()
	defer s.Close()
	from := start
	for n := 0; from > 0 && n < gzstitch.Window; {
		from--
		n += g.pieceLen(from)
	}
	// history holds the IDs of the primed and compressed entries; the After
	// of every chunk of the run is a slice of it.
	history := make([]uint64, 0, end-from)
	for j := from; j < start; j++ {
		history = append(history, g.idOf(j))
		g.scratch = g.piece(g.scratch[:0], g.entries[j])
		g.lens[j] = len(g.scratch)
		s.Prime(g.scratch)
	}
	for j := start; j < end; j++ {
		// After: the entries whose bytes reach into the window before j.
		lo := len(history)
		for n := 0; lo > 0 && n < gzstitch.Window; {
			lo--
			n += g.pieceLen(from + lo)
		}
		e := g.entries[j]
		g.scratch = g.piece(g.scratch[:0], e)
		g.lens[j] = len(g.scratch)
		c := s.Chunk(g.scratch)
		e.SetGzipChunkKey(g.use, g.cache.Key, c, history[lo:len(history):len(history)], gzipKeys)
		history = append(history, g.idOf(j))
		if err := g.zw.WriteChunk(&c); err != nil {
			return err
		}
		g.size += int64(c.Size())
	}
	return nil
}

// pieceLen is the length of entries[i]'s piece.
func (g *GzipEntries) pieceLen(i int) int {
	if g.lens[i] < 0 {
		g.scratch = g.piece(g.scratch[:0], g.entries[i])
		g.lens[i] = len(g.scratch)
	}
	return g.lens[i]
}

// idOf returns the ID of entries[i] for the use, giving it one if needed.
func (g *GzipEntries) idOf(i int) uint64 {
	if g.ids[i] == 0 {
		g.ids[i] = g.entries[i].Gzip(g.use).ID
	}
	return g.ids[i]
}
