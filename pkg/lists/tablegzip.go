package lists

import (
	"io"
	"slices"
	"time"

	"github.com/listproxy/listproxy/pkg/collection"
	"github.com/listproxy/listproxy/pkg/gzstitch"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/stores"
	"github.com/listproxy/listproxy/pkg/table"
	"github.com/listproxy/listproxy/pkg/wire"
)

// tableChunkKeys is how many chunks a Table row keeps, each for other
// lengths of its clock cells: an Age under 10 minutes renders in three
// lengths ("7m", "7m5s", "7m30s"), one older in one or two at a time.
const tableChunkKeys = 3

// writeGzipTable writes, as one gzip member, the Table response that
// writeTable writes uncompressed for parts, rows and entries at now; the
// entries are consecutive in key order.
//
// The head and the first row are compressed per response. Each later row
// is written as its head (table.Row.AppendHead: up to its last clock cell,
// rendered for now) in a stored block, and its tail, which is the same at
// every instant, as a chunk cached on its entry (snapshot.GzipTableRow).
// A chunk is compressed after the preceding row's tail, the separator and
// the row's head with its clock cells blank (gzstitch.Blank): it cannot
// refer to the clock cells, so it is valid after any rendering of them of
// the same lengths. It is used where the preceding row is the one it was
// compressed after and the clock cells' lengths and the object form are
// the ones it was compressed for; otherwise it is compressed again and
// cached, up to tableChunkKeys per entry (buildTableChunks). A row whose
// chunk is used is compressed ahead for the lengths its clock cells take
// tableChunkAhead later, if no chunk holds them.
func writeGzipTable(w io.Writer, opts collection.TableOptions, parts wire.ListParts, rows []*stores.TableRow, entries []*snapshot.Entry, now time.Time) error {
	zw := gzstitch.NewWriter(w)
	err := writeGzipRows(zw, opts, parts, rows, entries, now)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	return err
}

func writeGzipRows(zw *gzstitch.Writer, opts collection.TableOptions, parts wire.ListParts, rows []*stores.TableRow, entries []*snapshot.Entry, now time.Time) error {
	pooled := tableBufs.Get().(*[]byte)
	buf := (*pooled)[:0]
	buf = append(buf, parts.Head...)
	pooledHist := tableBufs.Get().(*[]byte)
	hist := (*pooledHist)[:0]
	defer func() {
		for _, b := range []struct {
			p   *[]byte
			buf []byte
		}{{pooled, buf}, {pooledHist, hist}} {
			if cap(b.buf) <= tableBufBytes {
				*b.p = b.buf[:0]
				tableBufs.Put(b.p)
			}
		}
	}()
	if len(rows) > 0 {
		buf = rows[0].Append(buf, entries[0].Raw, now, opts.Include, opts.GroupVersion)
	}
	if _, err := zw.Write(buf); err != nil {
		return err
	}
	form := tableObjectForm(opts)
	var prev uint64 // the GzipTableRow ID of entries[i-1]
	if len(entries) > 0 {
		prev = entries[0].Gzip(snapshot.GzipTableRow).ID
	}
	for i := 1; i < len(rows); i++ {
		row, e := rows[i], entries[i]
		buf = append(buf[:0], ',')
		buf = row.AppendHead(buf, e.Raw, now)
		if err := zw.WriteStored(buf); err != nil {
			return err
		}
		lens, ok := row.ClockLens(now)
		key := form<<56 | lens
		it := e.Gzip(snapshot.GzipTableRow)
		after := prev
		prev = it.ID
		if c := it.Find(key); ok && chunkAfter(c, after) {
			if err := zw.WriteChunk(&c.Chunk); err != nil {
				return err
			}
			// Ahead: the lengths a minute on, if other and not cached.
			at := now.Add(tableChunkAhead)
			if aheadLens, ok := row.ClockLens(at); ok && aheadLens != lens && !chunkAfter(it.Find(form<<56|aheadLens), after) {
				buf = row.AppendTail(buf[:0], e.Raw, opts.Include, opts.GroupVersion)
				hist = rows[i-1].AppendTail(hist[:0], entries[i-1].Raw, opts.Include, opts.GroupVersion)
				hist = append(hist, ',')
				compressTableChunk(e, row, form<<56|aheadLens, buf, hist, after, at)
				// Cached again as the newest, so that the chunk in use now
				// is not the one the entry lets go.
				e.SetGzipChunkKey(snapshot.GzipTableRow, c.Key, c.Chunk, c.After, tableChunkKeys)
			}
			continue
		}
		buf = row.AppendTail(buf[:0], e.Raw, opts.Include, opts.GroupVersion)
		if !ok {
			if _, err := zw.Write(buf); err != nil {
				return err
			}
			continue
		}
		hist = rows[i-1].AppendTail(hist[:0], entries[i-1].Raw, opts.Include, opts.GroupVersion)
		hist = append(hist, ',')
		c := buildTableChunks(e, row, form, buf, hist, after, now)
		if err := zw.WriteChunk(&c); err != nil {
			return err
		}
	}
	_, err := zw.Write(parts.Tail)
	return err
}

// tableChunkAhead is how far ahead a row compressed again is compressed
// for the other lengths its clock cells take, and how far ahead a row read
// from its chunk looks: an object under 10 minutes old takes three a
// minute, and would otherwise be compressed again at the first read in
// each, and one crossing 2 or 10 minutes takes a new one.
const tableChunkAhead = time.Minute

// buildTableChunks compresses tail, e's row's tail, after prevTail (the
// preceding row's tail and the separator; its entry has the ID after) and
// the row's head with its clock cells blank, caches the chunk for the
// object form and the clock cells' lengths at now, and returns it. It also
// compresses and caches the chunks for the other lengths the clock cells
// take up to tableChunkAhead after now and are not cached yet, up to
// tableChunkKeys in all.
func buildTableChunks(e *snapshot.Entry, row *stores.TableRow, form uint64, tail, prevTail []byte, after uint64, now time.Time) gzstitch.Chunk {
	type variant struct {
		key uint64
		at  time.Time
	}
	var variants [tableChunkKeys]variant
	n := 0
	for k := time.Duration(0); k < tableChunkAhead && n < len(variants); k += time.Second {
		at := now.Add(k)
		lens, ok := row.ClockLens(at)
		if !ok {
			break
		}
		key := form<<56 | lens
		if !slices.ContainsFunc(variants[:n], func(v variant) bool { return v.key == key }) {
			variants[n] = variant{key, at}
			n++
		}
	}
	cached := e.Gzip(snapshot.GzipTableRow)
	var c gzstitch.Chunk
	// Now's last: the newest of the chunks an entry keeps.
	for k := n - 1; k >= 0; k-- {
		v := variants[k]
		if k > 0 {
			if chunkAfter(cached.Find(v.key), after) {
				continue
			}
		}
		c = compressTableChunk(e, row, v.key, tail, prevTail, after, v.at)
	}
	return c
}

// compressTableChunk compresses tail, e's row's tail, after prevTail (as
// buildTableChunks) and the row's head at at with its clock cells blank,
// caches the chunk for key, and returns it. It appends to prevTail's
// array beyond its length.
func compressTableChunk(e *snapshot.Entry, row *stores.TableRow, key uint64, tail, prevTail []byte, after uint64, at time.Time) gzstitch.Chunk {
	hist := row.AppendHeadBlank(prevTail, e.Raw, at, gzstitch.Blank)
	c := gzstitch.CompressAfter(hist, tail)
	e.SetGzipChunkKey(snapshot.GzipTableRow, key, c, []uint64{after}, tableChunkKeys)
	return c
}

// chunkAfter reports whether it is a built row chunk compressed after the
// entry with GzipTableRow ID after.
func chunkAfter(it *snapshot.GzipItem, after uint64) bool {
	return it != nil && it.Chunk.Len() > 0 && len(it.After) == 1 && it.After[0] == after
}

// tableObjectForm numbers the forms of a row's object a Table response
// asks for, from 1: the top byte of a row chunk's key.
func tableObjectForm(opts collection.TableOptions) uint64 {
	switch {
	case opts.Include == table.IncludeNone:
		return 1
	case opts.GroupVersion == "v1":
		return 2
	default:
		return 3
	}
}
