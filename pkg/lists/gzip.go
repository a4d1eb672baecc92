package lists

import (
	"io"

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
// wire.WriteListParts writes for f, parts and the entries' items (parts as
// wire.SplitList returned them for those items). Items are copied from
// chunks cached on their entries where
// a chunk's preceding items in this response are the ones it was compressed
// after; the rest is compressed now (snapshot.GzipEntries). With
// cache.Build, the entries are consecutive in key order (no selector, or a
// shard selector alone, filtered them) and missing chunks are built and
// cached on them; without it, missing items are compressed at the
// apiserver's level 1 for this response only, since a filtered list's
// neighbours would not be the next list's.
//
// The first item is always compressed per response: it follows the list
// head, which differs between responses, and in JSON it has no separator.
func writeGzipList(w io.Writer, f wire.Format, parts wire.ListParts, entries []*snapshot.Entry, cache snapshot.GzipCache) error {
	zw := gzstitch.NewWriter(w)
	err := writeGzipItems(zw, gzipChunks, f, parts, entries, cache)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeGzipItems writes the list's head, items and tail into zw, building
// missing chunks with chunks.
func writeGzipItems(zw *gzstitch.Writer, chunks *gzstitch.Compressor, f wire.Format, parts wire.ListParts, entries []*snapshot.Entry, cache snapshot.GzipCache) error {
	if _, err := zw.Write(parts.Head); err != nil {
		return err
	}
	if len(entries) > 0 {
		var prefix [16]byte
		first := entries[0].Raw
		if _, err := zw.Write(wire.AppendItemPrefix(prefix[:0], f, true, first)); err != nil {
			return err
		}
		if _, err := zw.Write(first); err != nil {
			return err
		}
		rest := snapshot.NewGzipEntries(zw, chunks, snapshot.GzipListItem, entries[1:], func(dst []byte, e *snapshot.Entry) []byte {
			return append(wire.AppendItemPrefix(dst, f, false, e.Raw), e.Raw...)
		}, cache)
		if err := rest.WriteUpTo(rest.Len()); err != nil {
			return err
		}
	}
	_, err := zw.Write(parts.Tail)
	return err
}
