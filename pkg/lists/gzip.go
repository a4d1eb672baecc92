package lists

import (
	"io"
	"slices"

	"github.com/listproxy/listproxy/pkg/gzstitch"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// gzipChunkLevel is the compress/flate level at which list items are
// compressed once and cached for gzip responses (a gzip full LIST
// at ≥ 10× less CPU than the apiserver's). Each item is compressed after the
// items that precede it in key order, up to deflate's 32 KiB window, so it
// finds the matches whole-body compression finds in its neighbours (alone, a
// bench pod compresses only 3×: 53.9 MB for the list below at level 6).
// Level 6 sends half the apiserver's bytes; its first LIST costs 2× a
// level-1 compression of the body, once per object version; later LISTs
// cost about the same at every level. BenchmarkGzipList and
// BenchmarkGzipChunkLevels: 30,000 bench pods (175 MB of JSON), process CPU
// per full LIST on the shared 2-core VM, -benchtime 3x -count 2:
//
//	                                     body     first LIST  later LISTs
//	whole body at level 1 (as before)     11.9 MB   335 ms      335 ms
//	chunks, level 1                       25.7 MB   945 ms      5.3 ms
//	chunks, level 2                        8.7 MB   560 ms      3.1 ms
//	chunks, level 4                        8.2 MB   780 ms      2.9 ms
//	chunks, level 5                        6.6 MB   690 ms      2.4 ms
//	chunks, level 6                        6.3 MB   705 ms      2.2 ms
//	chunks, level 9                        6.2 MB   820 ms      2.2 ms
//
// The cache costs ~380 B of heap per entry served with gzip (209 B of
// chunk), 6.5% of a bench pod.
const gzipChunkLevel = 6

var gzipChunks = func() *gzstitch.Compressor {
	c, err := gzstitch.NewCompressor(gzipChunkLevel)
	if err != nil {
		panic(err) // a constant level in range
	}
	return c
}()

// writeGzipList writes, as one gzip member, the list response that
// wire.WriteList writes for f, env and the entries' items (items[i] is
// entries[i].Raw). Items are copied from chunks cached on their entries where
// a chunk's preceding items in this response are the ones it was compressed
// after; the rest is compressed now. With cache set, the entries are
// consecutive in key order (no selector filtered them) and missing chunks
// are built and cached on them; without it, missing items are compressed at
// the apiserver's level 1 for this response only, since a filtered list's
// neighbours would not be the next full list's.
//
// The first item is always compressed per response: it follows the list
// head, which differs between responses, and in JSON it has no separator.
func writeGzipList(w io.Writer, f wire.Format, env wire.ListEnvelope, entries []*snapshot.Entry, items [][]byte, cache bool) error {
	parts, err := wire.SplitList(f, env, items)
	if err != nil {
		return err
	}
	lw := &gzipListWriter{zw: gzstitch.NewWriter(w), chunks: gzipChunks, f: f, entries: entries, ids: make([]uint64, len(entries))}
	err = lw.write(parts, cache)
	if cerr := lw.zw.Close(); err == nil {
		err = cerr
	}
	return err
}

// gzipListWriter writes the items of one gzip list response.
type gzipListWriter struct {
	zw      *gzstitch.Writer
	chunks  *gzstitch.Compressor
	f       wire.Format
	entries []*snapshot.Entry
	// ids[i] is the GzipItem.ID of entries[i], or 0 where it has none (then
	// no chunk can have been compressed after it). ids[0] stays 0: the first
	// item's prefix differs from the one chunks were compressed after.
	ids    []uint64
	prefix [16]byte
}

func (lw *gzipListWriter) write(parts wire.ListParts, cache bool) error {
	if _, err := lw.zw.Write(parts.Head); err != nil {
		return err
	}
	run := -1 // start of a run of items whose chunks are to be built
	for i, e := range lw.entries {
		if i == 0 {
			if err := lw.writeNow(i); err != nil {
				return err
			}
			continue
		}
		it := e.GzipCached()
		if it != nil {
			lw.ids[i] = it.ID
		}
		if it != nil && chunkFits(it, lw.ids[:i]) {
			if run >= 0 {
				if err := lw.buildRun(run, i); err != nil {
					return err
				}
				run = -1
			}
			if err := lw.zw.WriteChunk(&it.Chunk); err != nil {
				return err
			}
			continue
		}
		if cache {
			if run < 0 {
				run = i
			}
			continue
		}
		if err := lw.writeNow(i); err != nil {
			return err
		}
	}
	if run >= 0 {
		if err := lw.buildRun(run, len(lw.entries)); err != nil {
			return err
		}
	}
	_, err := lw.zw.Write(parts.Tail)
	return err
}

// chunkFits reports whether it's chunk may follow the items with IDs
// served: its After must be their last IDs.
func chunkFits(it *snapshot.GzipItem, served []uint64) bool {
	if it.Chunk.Len() == 0 {
		return false // not built (a built chunk has at least its flush)
	}
	k := len(it.After)
	return k <= len(served) && slices.Equal(it.After, served[len(served)-k:])
}

// writeNow compresses item i at request time.
func (lw *gzipListWriter) writeNow(i int) error {
	raw := lw.entries[i].Raw
	if _, err := lw.zw.Write(wire.AppendItemPrefix(lw.prefix[:0], lw.f, i == 0, raw)); err != nil {
		return err
	}
	_, err := lw.zw.Write(raw)
	return err
}

// buildRun compresses items [start, end) (start ≥ 1) into chunks in one
// session, caches them on their entries and writes them. The session is
// first primed with the items before start, back to the second item, up to
// the window: those bytes precede the run in this response, and the chunks
// then compress as well as in a whole-body stream.
func (lw *gzipListWriter) buildRun(start, end int) error {
	s := lw.chunks.NewSession()
	defer s.Close()
	from := start
	for n := 0; from > 1 && n < gzstitch.Window; {
		from--
		n += lw.itemLen(from)
	}
	// history holds the IDs of the primed and compressed items; the After
	// of every chunk of the run is a slice of it.
	history := make([]uint64, 0, end-from)
	for j := from; j < start; j++ {
		history = append(history, lw.idOf(j))
		raw := lw.entries[j].Raw
		s.Prime(wire.AppendItemPrefix(lw.prefix[:0], lw.f, false, raw), raw)
	}
	for j := start; j < end; j++ {
		// After: the items whose bytes reach into the window before j.
		lo := len(history)
		for n := 0; lo > 0 && n < gzstitch.Window; {
			lo--
			n += lw.itemLen(from + lo)
		}
		e := lw.entries[j]
		c := s.Chunk(wire.AppendItemPrefix(lw.prefix[:0], lw.f, false, e.Raw), e.Raw)
		e.SetGzipChunk(c, history[lo:len(history):len(history)])
		history = append(history, lw.idOf(j))
		if err := lw.zw.WriteChunk(&c); err != nil {
			return err
		}
	}
	return nil
}

// itemLen is the length of item i with its (non-first) prefix.
func (lw *gzipListWriter) itemLen(i int) int {
	raw := lw.entries[i].Raw
	return len(wire.AppendItemPrefix(lw.prefix[:0], lw.f, false, raw)) + len(raw)
}

// idOf returns the ID of entries[i], giving it one if needed.
func (lw *gzipListWriter) idOf(i int) uint64 {
	if lw.ids[i] == 0 {
		lw.ids[i] = lw.entries[i].Gzip().ID
	}
	return lw.ids[i]
}
